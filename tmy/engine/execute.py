"""Executing one step: its input (or list member), its options, the executor, the save.

:func:`execute` is the usual path; :func:`execute_atomic` runs a pure step
that reads and saves one variable inside one compare-and-set store update
(the loader marks such steps, :mod:`tmy.rulebook.atomic`). Both are called by
the scheduler (:mod:`tmy.engine.scheduler`), which owns errors, ``when:`` and
locks.
"""

from __future__ import annotations

from typing import Any

from tmy import logs
from tmy.engine.run import Run, StepContext, StepFailed
from tmy.engine.timers import StepClock
from tmy.errors import EvalError
from tmy.executors.adjust import adjust
from tmy.message import StepRecord
from tmy.rulebook.fields import type_names
from tmy.rulebook.model import Step
from tmy.store.base import MISSING
from tmy.values.compiled import LIST_MODES, Constant, Expression, to_text
from tmy.values.paths import Path, set_in


async def execute(run: Run, step: Step, uri: str, record: StepRecord) -> None:
    """Run ``step`` once: its input, its options, the executor (under the step timeout
    unless it is instant), then STEP_RESULT and ``save:`` (``save: STEP_ERROR`` with a
    value ends the run as an error)."""
    v = run.vars
    if logs.DEBUG_ENABLED:
        logs.emit("debug", "step.start", uri=uri, plugin=step.plugin)
    inp = step.input
    if type(inp) is Constant and step.INPUT is None:  # a constant: nothing to fetch
        value = inp.evaluate(v)
    elif inp is None and step.INPUT is None and step.list_mode is None:  # STEP_RESULT
        value = v.locals.get("STEP_RESULT")
    elif inp is not None and step.INPUT is None and step.list_mode is None:
        # a template or expression: computed now when every variable it names is at hand
        # (locals, or declared ones cached), without _step_input's and fetch's coroutines
        declared, cache = v.declared, v.cache
        for name in inp.names:
            if name in declared and name not in cache:
                value = await _step_input(run, step)
                break
        else:
            value = _input_now(run, step, None)
    else:
        value = await _step_input(run, step)
    record.input = value
    spec = step.spec
    fixed = step.fixed_options
    if fixed is None:
        fixed = step.fixed_options = _fixed_options(step)
    if fixed is False:
        cfg = await _options(run, step)
    else:  # (no options: a new empty dict, not a copy of one)
        cfg = dict(fixed) if fixed else {}
    if spec.takes is str and not isinstance(value, str):
        value = (
            value.decode("utf-8", errors="replace") if isinstance(value, bytes) else to_text(value)
        )
    if spec.run is adjust:  # ADJUST returns its input: no coroutine, no context to build
        result = value
    elif spec.instant:
        result = await spec.run(value, cfg, StepContext(run, step, uri, record))
    else:
        ctx = StepContext(run, step, uri, record)
        settings = run.services.settings
        timeout = step.timeout or settings.step_timeout
        after = settings.slow_step
        watch = logs.INFO_ENABLED and not logs.DEBUG_ENABLED and after < timeout
        try:  # the timeout and the slow-step warning on timers shared with other steps
            async with StepClock(timeout, after if watch else None, uri, step.plugin):
                result = await spec.run(value, cfg, ctx)
        except TimeoutError:
            raise EvalError(f"step {uri} ({step.plugin}) timed out after {timeout:g} s") from None
    v.locals["STEP_RESULT"] = result
    record.result = result
    if step.save is not None:
        await v.fetch(step.save.names)
        path = step.save.resolve(v)
        if path.root == "STEP_ERROR" and not path.segments:
            error = to_text(result) if result else ""  # "", None, 0, False, [], {}: no error
            run.locals["STEP_ERROR"] = error
            if error:
                record.error = error
                run.failed = True
                raise StepFailed
            return
        await v.write(path, result)


async def execute_atomic(run: Run, step: Step, uri: str, record: StepRecord) -> None:
    """A pure step that reads and saves one variable, as one atomic store update.

    Everything else the step reads is fetched first; then the input, options,
    executor and save position are computed inside the store's update function
    on the variable's current value, so a concurrent change makes the store
    recompute it (compare-and-set) instead of every run waiting for a lock.
    The function may run more than once: only pure executors get here.
    """
    v = run.vars
    if logs.DEBUG_ENABLED:
        logs.emit("debug", "step.start", uri=uri, plugin=step.plugin, atomic_update=True)
    assert step.save is not None and step.save.root is not None
    name = step.save.root
    others = set(step.save.names)
    for value in (step.input, *step.options.values()):
        if value is not None:
            others |= value.names
    if step.INPUT is not None:
        others |= step.INPUT.names | ({step.INPUT.root} if step.INPUT.root else set())
    others.discard(name)
    await v.fetch(others)
    spec = step.spec
    ctx = StepContext(run, step, uri, record)

    def apply(current: Any) -> tuple[Any, tuple[Any, Any]]:
        root = v.default(name) if current is MISSING else current
        v.cache[name] = root
        value = _input_now(run, step, step.INPUT.resolve(v) if step.INPUT is not None else None)
        cfg = _options_now(step, v)
        if spec.takes is str and not isinstance(value, str):
            value = (
                value.decode("utf-8", errors="replace")
                if isinstance(value, bytes)
                else to_text(value)
            )
        result = _drive(spec.run(value, cfg, ctx), step)
        path = step.save.resolve(v)
        new = set_in(root, path, result) if path.segments else result
        return new, (new, (value, result))

    new, (value, result) = await v.store.update(v.key(name), apply)
    v.cache[name] = new
    await v.written(name)  # its leaderboard, when it is ranked
    record.input = value
    record.result = result
    v.locals["STEP_RESULT"] = result


def _drive(coro: Any, step: Step) -> Any:
    """The result of a pure executor's coroutine, run to its end without an event loop."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise EvalError(f"executor {step.plugin} is declared pure but waited on I/O")


def _input_now(run: Run, step: Step, path: Path | None) -> Any:
    """A step's input when it takes no list member, every value it names fetched
    (``path``: its resolved INPUT position). Sync: an atomic update computes it too."""
    v = run.vars
    if step.input is not None:
        if path is not None:
            v.locals["INPUT"] = v.peek(path)
        value = step.input.evaluate(v)
        # the ABC check last: an isinstance on Expression costs a Python frame per step
        if isinstance(value, str) and value in LIST_MODES and isinstance(step.input, Expression):
            # seed 004: an input expression computing a list mode takes from INPUT's list
            raise EvalError(
                f"input computed {value}, a list mode, but the step has no INPUT naming the list"
            )
        return value
    if path is not None:
        return v.peek(path)
    return v.locals.get("STEP_RESULT")


async def _step_input(run: Run, step: Step) -> Any:
    v = run.vars
    path: Path | None = None
    if step.INPUT is not None:
        await v.fetch(step.INPUT.names)
        path = step.INPUT.resolve(v)
    mode: str | None = None
    if step.list_mode is not None and isinstance(step.list_mode, Constant):  # no ABC check
        mode = step.list_mode.value
    elif step.list_mode is not None and path is not None:
        # an expression that may compute a list mode; INPUT is bound while it runs
        v.locals["INPUT"] = await v.read(path)
        await v.fetch(step.list_mode.names)
        computed = step.list_mode.evaluate(v)
        if isinstance(computed, str) and computed in LIST_MODES:
            mode = computed
        else:
            return computed
    if mode is not None:
        assert path is not None
        return await v.take(path, mode)
    names = set(step.input.names) if step.input is not None else set()
    if path is not None:
        names.add(path.root)
    await v.fetch(names)  # INPUT's variable and the input's names: one round-trip
    return _input_now(run, step, path)


def _fixed_options(step: Step) -> dict[str, Any] | bool:
    """The options every run of ``step`` gets, when each is a constant of an immutable
    value (a constant list or dict is copied per run: a run may change it) — what
    :func:`_options_now` would make at every run; else False."""
    options = step.spec.options
    for name, val in step.options.items():
        opt = options.get(name)
        if opt is not None and (
            not opt.evaluate or type(val) is not Constant or isinstance(val.value, list | dict)
        ):
            return False
    return _options_now(step, None)  # constants: no variable is read


async def _options(run: Run, step: Step) -> dict[str, Any]:
    v = run.vars
    for val in step.options.values():
        if val.names:  # (a constant names none: nothing to fetch, no coroutine)
            await v.fetch(val.names)
    return _options_now(step, v)


def _options_now(step: Step, v: Any) -> dict[str, Any]:
    """The step's options evaluated against ``v`` (every name they use already fetched):
    the executor's defaults (in its order), each option the step sets in its place."""
    spec = step.spec
    options = spec.options
    cfg = dict(spec.defaults)
    for name, val in step.options.items():
        opt = options.get(name)
        if opt is None:  # not the executor's (an extension's step key): not its config
            continue
        if not opt.evaluate:
            cfg[name] = val
            continue
        value = val.evaluate(v)
        if opt.types and not val.constant and not isinstance(value, opt.types):
            raise EvalError(
                f"option '{name}' of {step.plugin} must be {type_names(opt.types)}, "
                f"got {type(value).__name__}"
            )
        cfg[name] = value
    return cfg
