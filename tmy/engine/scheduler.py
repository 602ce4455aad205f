"""The task scheduler: runs one rule's chain of executors (seed 004, to the letter).

For each step:

1. ``STEP_URI`` = ``<rule>/<step id or position>``, ``STEP_ERROR`` = ``""``; a
   ``when:`` that is false skips the step.
2. The input: ``STEP_RESULT`` (no ``input``, no ``INPUT``); the value at the
   ``INPUT`` position; a member taken from the list at ``INPUT`` when ``input``
   is SHIFT / POPUP / LOOPBACK / LOOPFRONT (or an expression computing one);
   else ``input`` itself, with ``INPUT``'s value bound as the temporary ``INPUT``.
3. The result goes to ``STEP_RESULT`` and, with ``save:``, to that position too.
   An error puts its message in ``STEP_ERROR`` and stops the chain (unless the
   step says ``on_error: continue``); ``save: STEP_ERROR`` with a non-empty
   value ends the run as an error.

A step that reads the persistent variable it saves to runs holding that
variable's store lock, so concurrent runs cannot interleave between its read
and its write (no lost increments). List modes and nested saves on persistent
variables are single atomic store updates.

Writes under a lock are fenced by its lease, and an atomic span's writes are
buffered and applied together in one fenced store commit when the span ends
(see :func:`run_chain`): a run whose lease was lost (its daemon paused or cut
off from the store longer than the lease) ends with an error and writes
nothing more, and a crash mid-span leaves all of the span's writes or none.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tmy import logs, metrics
from tmy.engine.variables import Variables
from tmy.errors import EvalError, LeaseLost, TmyError
from tmy.executors.adjust import adjust
from tmy.logs import get_logger, preview
from tmy.message import Message, StepRecord
from tmy.redact import redact
from tmy.rulebook.model import Rule, Step
from tmy.store.base import MISSING
from tmy.values.compiled import LIST_MODES, Constant, Expression, to_text, truthy
from tmy.values.paths import Path, parse_path, set_in

log = get_logger("tmy.run")


class Run:
    """The state of one rule run (a plain class: one is made per message)."""

    __slots__ = ("failed", "message", "records", "rule", "services", "stopped", "trace_id", "vars")

    def __init__(
        self, rule: Rule, message: Message, trace_id: str, vars: Variables, services: Any
    ) -> None:
        self.rule = rule
        self.message = message
        self.trace_id = trace_id
        self.vars = vars
        self.services = services  # tmy.engine.core.Services
        self.records: list[StepRecord] = []
        self.failed = False
        self.stopped = False  # a step's ``stop:`` held: the chain ended normally

    @property
    def locals(self) -> dict[str, Any]:
        return self.vars.locals


class StepContext:
    """What an executor can reach besides its input and options."""

    __slots__ = ("record", "run", "step", "uri")

    def __init__(self, run: Run, step: Step, uri: str, record: StepRecord) -> None:
        self.run = run
        self.step = step
        self.uri = uri
        self.record = record

    @property
    def message(self) -> Message:
        return self.run.message

    @property
    def vars(self) -> Variables:
        return self.run.vars

    @property
    def services(self) -> Any:
        return self.run.services

    @property
    def log(self) -> Any:
        return log.bind(uri=self.uri)

    async def get(self, path: str) -> Any:
        """Read a variable position (declared variables come from the store)."""
        return await self.run.vars.read(parse_path(path))

    async def set(self, path: str, value: Any) -> None:
        """Write a variable position (declared variables are written through)."""
        await self.run.vars.write(parse_path(path), value)


class StepFailed(Exception):
    """Internal: a step ended with STEP_ERROR."""


async def run_chain(run: Run) -> None:
    """Run every step of ``run.rule`` in order, honouring errors, ``when:`` and ``stop:``.

    A rule with an atomic span (a variable read in one step and written in a
    later one) holds those variables' locks from the span's first step to its
    last, taken together in name order, so concurrent runs cannot interleave
    between the guard and the write. The span's writes to those variables are
    buffered (its own later steps read them) and applied in ONE store commit,
    fenced by the span's leases, when the span ends: all of them or none. A
    span that fails (a step error that stops the run, a lost lease, a crash)
    writes none of them. Side effects that are not store writes (an HTTP or
    LLM request already sent, a reply) are not undone.
    """
    rule = run.rule
    if not rule.atomic_vars:
        await run_steps(run, rule.steps)
        return
    first, last = rule.atomic_span
    await run_steps(run, rule.steps[:first])
    if run.failed or run.stopped:
        return
    v = run.vars
    async with v.holding(rule.atomic_vars), v.buffering(rule.atomic_vars):
        v.forget(rule.atomic_vars)  # re-read what the locks now protect
        await run_steps(run, rule.steps[first : last + 1])
        if not run.failed:
            try:
                await v.flush(rule.atomic_vars)
            except LeaseLost as exc:
                _lease_lost(run, rule.steps[last], run.records[-1], exc, "span")
            except TmyError as exc:
                where = f"{rule.file}:{rule.line}: rule {rule.id!r}"
                error = f"{where}: the atomic span's writes were not applied: {exc}"
                _fail(run, rule.steps[last], run.records[-1], error)
                run.failed = True
        elif v.pending:
            log.warning(
                "span.dropped",
                rule=rule.id,
                writes=len(v.pending),
                reason="the run failed inside its atomic span: none of its writes were applied",
            )
    if run.failed or run.stopped:
        return
    await run_steps(run, rule.steps[last + 1 :])


def _lease_lost(run: Run, step: Step, record: StepRecord, exc: LeaseLost, kind: str) -> None:
    """A run lost its lease: a clear error in the log, a metric, and the run ends."""
    metrics.lease_lost(kind)
    log.error("lease.lost", rule=run.rule.id, uri=step.uri, key=exc.key, kind=kind, error=str(exc))
    _fail(run, step, record, str(exc))
    run.failed = True  # whatever on_error says: nothing more is written under a lost lease


async def run_steps(run: Run, steps: tuple[Step, ...]) -> None:
    """Run ``steps`` in order (the chain of a rule without an atomic span)."""
    loc = run.vars.locals
    records = run.records
    perf_counter = time.perf_counter
    for step in steps:
        uri = step.uri
        loc["STEP_URI"] = uri
        loc["STEP_ERROR"] = ""
        record = StepRecord(uri, step.spec.name)
        records.append(record)
        started = perf_counter()
        try:
            if step.lock_roots or step.when is not None or step.extras:
                await _guarded(run, step, uri, record, first=True)
            elif step.constant is not None:  # ADJUST of a constant: the reply of a FAQ rule
                record.input = record.result = loc["STEP_RESULT"] = step.constant.evaluate(None)
            else:  # the common step: no lock, no condition, no extension keys
                await _execute(run, step, uri, record)
            if step.extras and not record.skipped:
                count = 1
                for hook in _loop_hooks(run, step):
                    while not run.failed and await hook.again(run, step, record, count):
                        count += 1
                        loc["STEP_ERROR"] = ""
                        await _guarded(run, step, uri, record, first=False)
        except StepFailed:
            pass
        except LeaseLost as exc:
            _lease_lost(run, step, record, exc, "span" if run.vars.pending is not None else "step")
        except TmyError as exc:
            _fail(run, step, record, str(exc))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a plugin bug must not take the daemon down
            log.exception("step.crashed", uri=uri, plugin=step.plugin)
            _fail(run, step, record, f"{type(exc).__name__}: {exc}")
        if "INPUT" in loc:
            del loc["INPUT"]  # the temporary INPUT lives for one step
        seconds = perf_counter() - started
        record.ms = int(seconds * 1e6 + 0.5) / 1000  # round(…, 3) costs twice as much
        if not record.skipped:
            meter = step.meter
            if meter is None:
                meter = step.meter = metrics.step_meter(step.spec.name)
            meter.observe(seconds)
        if not record.skipped and logs.DEBUG_ENABLED:  # at info: in the run's one line
            logs.emit(
                "debug",
                "step.done",
                uri=uri,
                plugin=step.plugin,
                input=preview(record.input),
                result=preview(record.result),
                error=record.error or None,
                ms=record.ms,
            )
        if run.failed:
            return
        if step.stop is not None and not record.skipped and await _stops(run, step, record):
            return


async def _stops(run: Run, step: Step, record: StepRecord) -> bool:
    """Evaluate ``stop:`` after the step: true ends the run with the usual reply."""
    v = run.vars
    try:
        await v.fetch(step.stop.names)
        stop = truthy(step.stop.evaluate(v))
    except TmyError as exc:
        _fail(run, step, record, f"stop: {exc}")
        run.failed = True
        return True
    if stop:
        run.stopped = True
        record.extra["stopped"] = True
        log.info("run.stopped", uri=step.uri, rule=run.rule.id)
    return stop


async def _guarded(run: Run, step: Step, uri: str, record: StepRecord, *, first: bool) -> None:
    """One execution of ``step``, holding its variable's lock when it needs one."""
    if not step.lock_roots:
        await _run_step(run, step, uri, record, first=first)
        return
    if step.atomic_update:  # pure: read, execute and write inside one store update
        if first and not await _admitted(run, step, uri, record):
            record.skipped = True
            return
        await _execute_atomic(run, step, uri, record)
        return
    # a short lease the store renews while the step runs (a crashed daemon's lock
    # frees within seconds); the step's own timeout bounds how long it is held
    async with run.vars.holding(step.lock_roots):
        run.vars.forget(step.lock_roots)  # re-read what the lock now protects
        await _run_step(run, step, uri, record, first=first)


def _loop_hooks(run: Run, step: Step) -> list[Any]:
    """Hooks of this step's extension keys that can repeat it (``while_llm``)."""
    if not step.extras:
        return []
    hooks = run.services.step_hooks
    return [hooks[k] for k in step.extras if k in hooks and hasattr(hooks[k], "again")]


def _fail(run: Run, step: Step, record: StepRecord, message: str) -> None:
    message = redact(message) or "error"  # an upstream may have echoed a configured secret
    run.locals["STEP_ERROR"] = message
    record.error = message
    if step.on_error == "stop":
        run.failed = True


async def _run_step(run: Run, step: Step, uri: str, record: StepRecord, *, first: bool) -> None:
    if first and not await _admitted(run, step, uri, record):
        record.skipped = True
        return
    await _execute(run, step, uri, record)


async def _admitted(run: Run, step: Step, uri: str, record: StepRecord) -> bool:
    """``when:`` and extension checks (``when_llm``); False skips the step."""
    v = run.vars
    if step.when is not None:
        if step.INPUT is not None and "INPUT" in step.when.names:  # a condition on the input
            await v.fetch(step.INPUT.names)
            v.locals["INPUT"] = await v.read(step.INPUT.resolve(v))
        await v.fetch(step.when.names)
        if not truthy(step.when.evaluate(v)):
            record.extra["skipped_by"] = "when"
            log.info("step.skipped", uri=uri, plugin=step.plugin, reason="when")
            return False
    if step.extras:
        hooks = run.services.step_hooks
        for key in step.extras:
            hook = hooks.get(key)
            if (
                hook is not None
                and hasattr(hook, "before")
                and not await hook.before(run, step, record)
            ):
                record.extra["skipped_by"] = key
                log.info("step.skipped", uri=uri, plugin=step.plugin, reason=key)
                return False
    return True


async def _execute(run: Run, step: Step, uri: str, record: StepRecord) -> None:
    v = run.vars
    if logs.DEBUG_ENABLED:
        logs.emit("debug", "step.start", uri=uri, plugin=step.plugin)
    if type(step.input) is Constant and step.INPUT is None:  # a constant: nothing to fetch
        value = step.input.evaluate(v)
    else:
        value = await _step_input(run, step)
    record.input = value
    spec = step.spec
    cfg = await _options(run, step) if spec.options else {}
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
        slow = None
        after = settings.slow_step
        if logs.INFO_ENABLED and not logs.DEBUG_ENABLED and after < timeout:
            slow = asyncio.get_running_loop().call_later(
                after, _still_running, uri, step.plugin, after
            )
        try:
            async with asyncio.timeout(timeout):  # no extra task, unlike wait_for
                result = await spec.run(value, cfg, ctx)
        except TimeoutError:
            raise EvalError(f"step {uri} ({step.plugin}) timed out after {timeout:g} s") from None
        finally:
            if slow is not None:
                slow.cancel()
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


async def _execute_atomic(run: Run, step: Step, uri: str, record: StepRecord) -> None:
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
        cfg = _options_now(run, step)
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
        if isinstance(step.input, Expression) and isinstance(value, str) and value in LIST_MODES:
            # seed 004: an input expression computing a list mode takes from INPUT's list
            raise EvalError(
                f"input computed {value}, a list mode, but the step has no INPUT naming the list"
            )
        return value
    if path is not None:
        return v.peek(path)
    return v.locals.get("STEP_RESULT")


def _still_running(uri: str, plugin: str, after: float) -> None:
    """A step that has not finished ``after`` seconds in: logged so a hung step is visible
    (the run's own line comes only when it ends). Runs in the step's context: same trace_id."""
    logs.emit("info", "step.running", uri=uri, plugin=plugin, seconds=after)


async def _step_input(run: Run, step: Step) -> Any:
    v = run.vars
    path: Path | None = None
    if step.INPUT is not None:
        await v.fetch(step.INPUT.names)
        path = step.INPUT.resolve(v)
    mode: str | None = None
    if isinstance(step.list_mode, Constant):
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


async def _options(run: Run, step: Step) -> dict[str, Any]:
    v = run.vars
    for val in step.options.values():
        await v.fetch(val.names)
    return _options_now(run, step)


def _options_now(run: Run, step: Step) -> dict[str, Any]:
    """The step's options evaluated (every name they use already fetched)."""
    v = run.vars
    cfg: dict[str, Any] = {}
    for name, opt in step.spec.options.items():
        val = step.options.get(name)
        if val is None:
            cfg[name] = opt.default
        elif not opt.evaluate:
            cfg[name] = val
        else:
            value = val.evaluate(v)
            if opt.types and not val.constant and not isinstance(value, opt.types):
                raise EvalError(
                    f"option '{name}' of {step.plugin} must be {_type_names(opt.types)}, "
                    f"got {type(value).__name__}"
                )
            cfg[name] = value
    return cfg


def _type_names(types: Any) -> str:
    if isinstance(types, tuple):
        return " or ".join(t.__name__ for t in types)
    return types.__name__
