"""What the console keeps of a run: a tuple of the engine's event dict's fields.

Keeping the engine's ``run.done`` dicts themselves (and their steps) for the live page
cost a busy daemon ~13% of its dispatch rate in ``bench/console.py``: the dicts, kept
a while, no longer reuse warm memory and the collector walks them. A tuple taken by
one C call (:func:`operator.itemgetter`) lets the dict go at once. A run with one of
the rarer flags (``nested``, ``scheduled``, ``stopped``, ``dry_run``, ``event_kind``)
keeps its whole dict at :data:`FULL`.

Readers turn a record back into a dict with :func:`as_event`.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

Record = tuple[Any, ...]

RUN_KEYS = ("event", "trace_id", "rule", "user", "chat", "platform", "text", "answer",
            "error", "ms", "steps", "trigger", "question")  # fmt: skip
MISS_KEYS = ("event", "trace_id", "rule", "user", "chat", "platform", "text", "reason")
EVENT, TRACE, RULE, USER, CHAT, PLATFORM, TEXT, ANSWER, ERROR, MS, STEPS = range(11)
FULL = len(RUN_KEYS)  # a flagged run's whole dict
PLAIN = len(RUN_KEYS)  # a plain run's record length
RUN_FIELDS = 13  # keys of a plain run.done dict with its trace_id (tmy.engine.tracing)
LOGGED_FIELDS = RUN_FIELDS + 2  # … and ``level``, ``timestamp`` once logged

_RUN = itemgetter(*RUN_KEYS)
_MISS = itemgetter(*MISS_KEYS)


def record_of(e: dict[str, Any]) -> Record:
    """The record of one engine event dict (``run.done`` or ``message.unmatched``)."""
    if "steps" not in e:
        return _MISS(e)
    if len(e) == (LOGGED_FIELDS if "level" in e else RUN_FIELDS):
        return _RUN(e)
    return (*_RUN(e), e)


def error_of(r: Record) -> Any:
    return r[ERROR] if len(r) > ERROR and r[EVENT] == "run.done" else None


def as_event(r: Record) -> dict[str, Any]:
    """The record as the engine's dict (its whole dict for a flagged run)."""
    if len(r) > FULL:
        return r[FULL]
    return dict(zip(RUN_KEYS if r[EVENT] == "run.done" else MISS_KEYS, r, strict=False))
