"""What an LLM step with ``memory:`` calls: before the request (recall) and after the answer.

:func:`before_request` returns the memory block for the step's dynamic tail
('' when nothing is relevant) and puts the details — each recalled entry with
the parts of its score, the near misses and why they missed — on the step's
record (``ask --json``: ``extra.memory``; ``run.py ctx`` prints them).
:func:`after_answer` records the turn for the conversation's summary.

Neither ever fails the step: a store or endpoint failure is logged and the
step answers without memory ("better none than wrong").

Under the ``ctx`` inspector nothing is written: no use counts, no turn, no
summary (a conversation that has ended is summarised by the next real request).
"""

from __future__ import annotations

from typing import Any

from tmy.config.memory import recall_spec
from tmy.errors import ExecutorError, TmyError
from tmy.logs import get_logger
from tmy.memory import dialog
from tmy.memory.recall import memory_of, recall

log = get_logger("tmy.memory")


def _spec(raw: Any) -> Any:
    try:
        return recall_spec(raw)
    except ValueError as exc:  # a computed memory: value that is wrong: a STEP_ERROR
        raise ExecutorError(str(exc)) from None


def _dry() -> bool:
    from tmy.llm.exchange import CAPTURE

    return CAPTURE.get() is not None


async def before_request(job: Any, raw: Any, query: str) -> str:
    """The memory block for this step's tail (details on the step record)."""
    spec = _spec(raw)
    if spec is None or (spec.max == 0 and spec.dialogue == 0):
        return ""
    ctx = job.ctx
    dry = _dry()
    engine = getattr(ctx.services, "engine", None)
    try:
        result = await recall(
            ctx.services,
            ctx.message,
            spec,
            query,
            touch_entries=not dry,
            job=None if dry else job,
            tz=getattr(engine, "tz", None),
        )
    except TmyError as exc:
        log.warning("memory.recall_failed", uri=ctx.uri, error=str(exc))
        ctx.record.extra.setdefault("memory", {})["error"] = str(exc)
        return ""
    ctx.record.extra.setdefault("memory", {}).update(result.details())
    log.info(
        "memory.recalled",
        uri=ctx.uri,
        entries=[s.item.get("id") for s in result.entries],
        dialogues=len(result.dialogues),
        considered=result.considered,
    )
    return result.block


async def after_answer(job: Any, raw: Any, ask: str, answer: str) -> None:
    """Record this turn for the conversation's summary (and summarise a full conversation)."""
    spec = _spec(raw)
    if spec is None or not spec.summarize or _dry():
        return
    ctx = job.ctx
    cfg = memory_of(ctx.services).config
    if not cfg.dialogue.enabled:
        return
    rule = ctx.run.rule
    idle = float(rule.session) if rule.session > 0 else cfg.dialogue.idle
    max_turns = cfg.dialogue.max_turns or job.rt.config.history_turns
    try:
        ended = await dialog.record_turn(
            ctx.services.store, ctx.message, ask, answer, idle, max_turns, rule.id
        )
        for record in ended:
            await dialog.close(job, record, cfg)
    except TmyError as exc:
        log.warning("memory.turn_failed", uri=ctx.uri, error=str(exc))
