"""The task scheduler: runs one rule's chain of executors (seed 004, to the letter).

For each step:

1. ``STEP_URI`` = ``<rule>/<step id or position>``, ``STEP_ERROR`` = ``""``; a
   ``when:`` that is false skips the step.
2. The input: ``STEP_RESULT`` (no ``input``, no ``INPUT``); the value at the
   ``INPUT`` position; a member taken from the list at ``INPUT`` when ``input``
   is SHIFT / POPUP / LOOPBACK / LOOPFRONT / PICK (or an expression computing one);
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

from tmy import logs, metrics
from tmy.engine.execute import execute, execute_atomic
from tmy.engine.run import Run, StepContext, StepFailed
from tmy.errors import LeaseLost, TmyError
from tmy.logs import get_logger, preview
from tmy.message import StepRecord
from tmy.redact import redact
from tmy.rulebook.model import Step
from tmy.values.compiled import truthy

__all__ = ["Run", "StepContext", "run_chain", "run_steps"]  # Run, StepContext: tmy.engine.run

log = get_logger("tmy.run")


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
            if step.boards:  # top()/rank_of() in its values: their boards, fetched once per run
                await run.vars.fetch_boards(step.boards)
            if step.lock_roots or step.when is not None or step.hooks:
                await _guarded(run, step, uri, record, first=True)
            elif step.constant is not None:  # ADJUST of a constant: the reply of a FAQ rule
                record.input = record.result = loc["STEP_RESULT"] = step.constant.evaluate(None)
            else:  # the common step: no lock, no condition, no extension keys
                await execute(run, step, uri, record)
            if step.hooks and not record.skipped:  # an extension's key may repeat the step
                count = 1
                for _key, hook in step.hooks:
                    while not run.failed and await hook.again(run, step, record, count):
                        count += 1
                        loc["STEP_ERROR"] = ""
                        if step.boards:  # again after the step's own write of one
                            await run.vars.fetch_boards(step.boards)
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
        if step.boards:  # the step may have written a ranked variable: its board again
            await v.fetch_boards(step.boards)
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
        await execute_atomic(run, step, uri, record)
        return
    # a short lease the store renews while the step runs (a crashed daemon's lock
    # frees within seconds); the step's own timeout bounds how long it is held
    async with run.vars.holding(step.lock_roots):
        run.vars.forget(step.lock_roots)  # re-read what the lock now protects
        await _run_step(run, step, uri, record, first=first)


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
    await execute(run, step, uri, record)


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
    for key, hook in step.hooks:  # the hooks of extension keys the step carries
        if not await hook.before(run, step, record):
            record.extra["skipped_by"] = key
            log.info("step.skipped", uri=uri, plugin=step.plugin, reason=key)
            return False
    return True
