"""Trace ids, and the lines a message's handling logs under its trace id.

Every message and every scheduled run gets a ``trace_id`` (bound to the log
context for as long as it is handled) so ``trace`` can rebuild what happened
from the log. At ``info`` a run logs one ``run.done`` line holding its steps
(one line per run instead of one per event is most of what a matched message
costs); a message no rule takes logs one ``message.unmatched`` line. The
builders here are called once per message: they take plain arguments and
build the event dict directly, without a structlog bind.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from typing import Any

from tmy import logs
from tmy.logs import PREVIEW, preview
from tmy.message import Message, Reply, StepRecord
from tmy.rulebook.triggers import Match

_TRACE_PREFIX = os.urandom(4).hex()
_USED: list[int] = []  # tokens of the model steps step_fields saw since log_run looked
# trace ids: a random prefix, then the counter's low 32 bits as 8 hex digits; the last two
# digits come from a table and the six before them are formatted once per 256 ids, so the
# engine makes one with a counter step, a test and a concatenation (``"%08x" %`` per
# message costs twice that)
TRACE_COUNTER = itertools.count(1)
HEX2 = tuple(f"{i:02x}" for i in range(256))
TRACE_HIGH = [_TRACE_PREFIX + "000000"]  # the prefix and the six digits of the current 256


def roll_trace_high(n: int) -> None:
    """The counter reached ``n``, a multiple of 256: the next six digits."""
    TRACE_HIGH[0] = _TRACE_PREFIX + "%06x" % ((n >> 8) & 0xFFFFFF)


def trace_id() -> str:
    """Unique across processes (random prefix) and cheap (a counter): 16 hex digits.

    :meth:`tmy.engine.core.Engine.handle` makes its ids the same way, inline.
    """
    n = next(TRACE_COUNTER)
    if not n & 255:
        roll_trace_high(n)
    return TRACE_HIGH[0] + HEX2[n & 255]


def _plain_value(x: Any) -> bool:
    """Short enough and JSON-native: logged as it is, without a preview."""
    t = type(x)
    if t is str:
        return len(x) <= PREVIEW
    if t is int:
        return -(2**63) <= x < 2**63
    return x is None or t is float or t is bool


def step_fields(r: StepRecord) -> dict[str, Any]:
    """One step of a run.done line: values as they are when short and JSON-native.

    A step that asked a model (an LLM step, a ``when_llm`` / ``while_llm`` judgement)
    also gets ``tokens``: prompt + completion tokens it used, which the web console
    adds up into "LLM tokens used today" (and :func:`log_run` tells its observer the
    run's total, so the console never samples out a run that used tokens).
    """
    x, y = r.input, r.result
    fields = {
        "uri": r.uri,
        "plugin": r.plugin,
        "input": x if (type(x) is str and len(x) <= PREVIEW) or _plain_value(x) else preview(x),
        "result": y if (type(y) is str and len(y) <= PREVIEW) or _plain_value(y) else preview(y),
        "error": r.error or None,
        "ms": r.ms,
        "skipped": r.skipped,
    }
    if r.extra:  # empty for every step but a model's (and a few others): one test
        tokens = step_tokens(r.extra)
        if tokens:
            fields["tokens"] = tokens
            _USED.append(tokens)
    return fields


def step_tokens(extra: dict[str, Any]) -> int:
    """Prompt + completion tokens in a step record's ``extra``: its LLM call(s) (``llm``,
    fold included) and its judgements (``when_llm`` / ``while_llm``, lists of them)."""
    jobs: list[Any] = [extra.get("llm")]
    for key in ("when_llm", "while_llm"):
        judged = extra.get(key)
        if isinstance(judged, list):
            jobs.extend(judged)
    total = 0
    for job in jobs:
        if isinstance(job, dict):
            for key in ("prompt_tokens", "completion_tokens"):
                n = job.get(key)
                if type(n) is int:
                    total += n
    return total


def log_run(
    match: Match,
    message: Message,
    text: str,
    reply: Reply,
    seconds: float,
    finish: bool,
    dry_run: bool,
    observer: Callable[[dict[str, Any]], None] | None = None,
    scheduled: bool = False,
    trace: str | None = None,
) -> None:
    """The run's one line at ``info``: enough for ``trace`` to rebuild it.

    Per-event lines remain at ``debug``, and a step still running after
    ``log.slow_step`` seconds logs ``step.running`` (a hung step stays visible).
    ``finish=False`` marks a nested run (a rule called as an LLM tool);
    ``dry_run`` an ``explain`` run that stored and sent nothing; ``scheduled`` a
    cron firing. ``observer`` (the engine's, the web console's feed) gets the
    same dict, ``trace_id`` included, whether or not ``info`` is logged — and
    ``tokens`` (the steps' total) when a model was asked. ``trace``: the run's trace id
    when the caller has not bound it (:data:`tmy.logs.TRACE`: the engine's FAQ way).
    """
    if _USED:  # left by a step_fields call outside a run's line (a test, a tool)
        _USED.clear()
    if trace is None:
        trace = logs.TRACE.get()
    event = _run_event(match, message, text, reply, seconds, finish, dry_run, scheduled)
    if (
        logs.INFO_ENABLED
        and trace is not None
        and not (reply.stopped or message.event is not None or dry_run or scheduled)
        and finish
    ):  # the usual line: its fields already in their final order (logs.emit_info)
        event["trace_id"] = trace
        event["level"] = "info"
        event["timestamp"] = ""
        logs.emit_info(event)
    elif logs.INFO_ENABLED:
        logs.emit_event("info", event, trace)  # adds trace_id, level, timestamp
    if observer is not None:
        event["trace_id"] = trace
        if _USED:  # a model's step: rare
            event["tokens"] = sum(_USED)
    if _USED:
        _USED.clear()
    if observer is not None:
        observer(event)


def _run_event(
    match: Match,
    message: Message,
    text: str,
    reply: Reply,
    seconds: float,
    finish: bool,
    dry_run: bool,
    scheduled: bool,
) -> dict[str, Any]:
    """run.done's fields but trace_id, level and timestamp, for :func:`logs.emit_event`."""
    q = match.question
    answer = reply.text
    event = {
        "rule": match.rule.id,
        "trigger": match.trigger.source if match.trigger else _no_trigger(message),
        "text": text if len(text) <= PREVIEW else preview(text),
        "question": q if type(q) is str and len(q) <= PREVIEW else preview(q),
        "user": message.user,
        "chat": message.chat,
        "platform": message.platform,
        "answer": answer if len(answer) <= PREVIEW else preview(answer),
        "error": reply.error,
        "ms": int(seconds * 1e6 + 0.5) / 1000,  # to the µs, cheaper than round()
        "steps": [step_fields(r) for r in reply.steps],
        "event": "run.done",
    }
    if reply.stopped:
        event["stopped"] = True
    if message.event is not None:
        event["event_kind"] = message.event.kind
    if not finish:
        event["nested"] = True
    if dry_run:
        event["dry_run"] = True
    if scheduled:
        event["scheduled"] = True
    return event


def _no_trigger(message: Message) -> str:
    """What ran a rule that no trigger matched: an event, else an open session (or a
    scheduled or nested run, which name no trigger either)."""
    return f"<event {message.event.kind}>" if message.event is not None else "<session>"


def log_unmatched(
    message: Message,
    text: str,
    reason: str,
    rule: str | None,
    observer: Callable[[dict[str, Any]], None] | None = None,
    trace: str | None = None,
) -> None:
    """``message.unmatched``: no run for this message (no trigger, filters, chat off);
    to the log at ``info`` and to ``observer`` (see :func:`log_run`, and its ``trace``)."""
    event = {
        "text": text if len(text) <= PREVIEW else preview(text),
        "user": message.user,
        "chat": message.chat,
        "platform": message.platform,
        "rule": rule,
        "reason": reason,
        "event": "message.unmatched",
    }
    if trace is None:
        trace = logs.TRACE.get()
    if logs.INFO_ENABLED:
        logs.emit_event("info", event, trace)
    if observer is not None:
        event["trace_id"] = trace
        observer(event)


def log_received(level: str, message: Message, text: str) -> None:
    """``message.received`` (at ``debug`` for every message; at ``info`` for admin commands
    and refused messages) — when that level is logged (a one-shot command logs warnings)."""
    if level == "info" and not logs.INFO_ENABLED:
        return
    logs.emit(
        level,
        "message.received",
        text=preview(text),
        user=message.user,
        chat=message.chat,
        platform=message.platform,
    )


def log_matched(match: Match) -> None:
    """``rule.matched`` (``debug`` only)."""
    logs.emit(
        "debug",
        "rule.matched",
        rule=match.rule.id,
        trigger=match.trigger.source if match.trigger else "<session>",
        MAGIC=match.magic,
        QUESTION=preview(match.question),
    )
