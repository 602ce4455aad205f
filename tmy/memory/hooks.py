"""What an LLM step with ``memory:`` calls: before the request (recall) and after the answer.

:class:`MemoryRecall` is long-term memory's implementation of the LLM runtime's
:class:`~tmy.llm.runtime.Recall` slot; the memory extension's lifespan plugs it
into the app's LLM runtime (tmy.llm never imports this package).

:meth:`~MemoryRecall.before_request` returns the memory block for the step's
dynamic tail ('' when nothing is relevant) and puts the details — each recalled
entry with the parts of its score, the near misses and why they missed — on the
step's record (``ask --json``: ``extra.memory``; ``run.py ctx`` prints them with
:meth:`~MemoryRecall.ctx_lines`). :meth:`~MemoryRecall.after_answer` records the
turn for the conversation's summary.

Neither ever fails the step: a store or endpoint failure is logged and the
step answers without memory ("better none than wrong").

Under the ``ctx`` inspector nothing is written: no use counts, no turn, no
summary (a conversation that has ended is summarised by the next real request).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tmy.config.memory import RecallSpec
from tmy.errors import TmyError
from tmy.llm.exchange import CAPTURE, Job
from tmy.logs import get_logger
from tmy.memory import dialog
from tmy.memory.recall import recall
from tmy.memory.report import ctx_lines
from tmy.memory.runtime import MemoryRuntime

log = get_logger("tmy.memory")


def _dry() -> bool:
    """Under the ``ctx`` inspector: nothing is written."""
    return CAPTURE.get() is not None


class MemoryRecall:
    """Recall and turn capture for LLM steps with ``memory:`` (a :class:`tmy.llm.Recall`)."""

    def __init__(self, memory: MemoryRuntime) -> None:
        self.memory = memory

    async def before_request(self, job: Job, spec: RecallSpec, query: str) -> str:
        """The memory block for this step's tail (details on the step record)."""
        if spec.max == 0 and spec.dialogue == 0:
            return ""
        ctx = job.ctx
        dry = _dry()
        try:
            result = await recall(
                ctx.services,
                ctx.message,
                spec,
                query,
                touch_entries=not dry,
                job=None if dry else job,
                tz=ctx.services.settings.tz,
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

    async def after_answer(self, job: Job, spec: RecallSpec, ask: str, answer: str) -> None:
        """Record this turn for the conversation's summary (and summarise a full conversation)."""
        if not spec.summarize or _dry():
            return
        ctx = job.ctx
        cfg = self.memory.config
        if not cfg.dialogue.enabled:
            return
        rule = ctx.rule
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

    def ctx_lines(self, details: Mapping[str, Any]) -> list[str]:
        """``#`` lines for the ``ctx`` header: what was recalled, with its score parts."""
        return ctx_lines(dict(details))
