"""Chat history per conversation (platform + chat + user), kept in the store.

Stored at ``conversation_key("llmhist", message)`` as ``[[ask, answer], …]``,
oldest first. ``ask`` is the user message exactly as it was sent (the dynamic
tail: time, sender, recalled memory, then the question) and ``answer`` the
model's final answer — not tool traffic. So the next request of the
conversation starts with the previous request's messages byte for byte, and a
provider's prompt cache keeps hitting the whole conversation (seed 003).

The history never slides (dropping the oldest turn would change every
request's prefix): when it is full — more than the step's ``history:`` turns,
or more than ``llm.history.max_tokens`` — the next request first **folds** it
(:mod:`tmy.llm.fold`): the whole history becomes one summary pair, and the
history grows from there again. ``STEP_SUMMARY`` (stored by the engine after a
run) is the same thing decided by a rule: it replaces the whole history the
next time a step with ``history:`` answers.

The conversation's last message that reached an LLM step is kept too
(``llmlast``): ``ctx`` without a query inspects it again. It goes to the store with
the usage counters' next flush (:mod:`tmy.llm.tally`), not as a write of its own.
"""

from __future__ import annotations

import time
from typing import Any

from tmy.engine.keys import conversation_key
from tmy.llm.prompt import estimate_tokens
from tmy.llm.tally import Tally
from tmy.message import Message
from tmy.store.base import MISSING, Store
from tmy.store.joined import ReadBatch

KIND = "llmhist"
FOLD_ASK = "Summarise our conversation so far."  # the user side of a fold's summary pair
LAST = "llmlast"
LAST_TTL = 30 * 86400  # the last message is kept this long (seconds)


def _valid(pair: Any) -> bool:
    return isinstance(pair, list) and len(pair) == 2 and all(isinstance(s, str) for s in pair)


def valid_pairs(value: Any) -> list[list[str]]:
    """The well-formed ``[ask, answer]`` pairs of a stored history."""
    return [p for p in value if _valid(p)] if isinstance(value, list) else []


def tokens(pairs: list[list[str]]) -> int:
    """The estimated tokens of ``pairs`` (as :func:`tmy.llm.prompt.estimate_tokens` counts)."""
    return sum(estimate_tokens(q) + estimate_tokens(a) for q, a in pairs)


def is_full(pairs: list[list[str]], turns: int, max_tokens: int) -> bool:
    """More than ``turns`` turns since the last fold (its summary pair does not count),
    or more than ``max_tokens`` in all: the next request folds first."""
    since = len(pairs) - (1 if pairs and pairs[0][0] == FOLD_ASK else 0)
    if since > max(turns, 1):
        return True
    return bool(max_tokens) and len(pairs) > 1 and tokens(pairs) > max_tokens


async def load(
    store: Store, message: Message, reads: ReadBatch | None = None
) -> tuple[list[list[str]], list[str] | None]:
    """This conversation's pairs, and the pending STEP_SUMMARY that replaces them (if any).

    Nothing is changed here: the summary takes the history's place only once a
    Q&A that used it succeeded (:func:`append`), so a failed request or the
    ``ctx`` inspector does not use it up. ``reads``: joins this read with other
    conversations' reads of the same loop turn (:mod:`tmy.store.joined`).
    """
    both = [conversation_key("summary", message), conversation_key(KIND, message)]
    summary, stored = await (store.get_many(both) if reads is None else reads.get_many(store, both))
    if summary is not MISSING and _valid(summary):
        return [summary], summary
    return valid_pairs(stored), None


async def append(
    store: Store,
    message: Message,
    ask: str,
    answer: str,
    summary: list[str] | None = None,
) -> None:
    """Add one turn atomically (concurrent turns of one conversation both land).

    Nothing is ever dropped here (that would slide the history): only a fold
    (:func:`replace_prefix`) or ``STEP_SUMMARY`` shortens it. With ``summary``
    the stored history is replaced by it first and the pending summary is
    cleared. An ephemeral identity (one request) keeps no history.
    """
    if message.ephemeral:
        return

    def add(current: Any) -> tuple[Any, None]:
        pairs = [summary] if summary else valid_pairs(current)
        return [*pairs, [ask, answer]], None

    await store.update(conversation_key(KIND, message), add)
    if summary:
        await store.delete(conversation_key("summary", message))


async def replace_prefix(
    store: Store, message: Message, folded: list[list[str]], pair: list[str]
) -> list[list[str]]:
    """Put ``pair`` in the place of ``folded`` — atomically, and only while the stored
    history still starts with them; turns added meanwhile stay after it. The history
    as it is now stored."""

    def swap(current: Any) -> tuple[Any, list[list[str]]]:
        pairs = valid_pairs(current)
        if folded and pairs[: len(folded)] == folded:
            new = [pair, *pairs[len(folded) :]]
            return new, new
        return current, pairs  # folded meanwhile (another request, STEP_SUMMARY): as it is

    result: list[list[str]] = await store.update(conversation_key(KIND, message), swap)
    return result


async def clear(store: Store, message: Message) -> bool:
    """Forget this conversation's history."""
    return await store.delete(conversation_key(KIND, message))


# -- the last message (what ``ctx`` without a query inspects) -------------------------------------


async def remember_last(
    store: Store, message: Message, rule: str, question: Any, tally: Tally | None = None
) -> None:
    """Keep the message that reached an LLM step of ``rule`` (``ctx`` shows it again).

    With ``tally`` it is written with the next usage flush (:mod:`tmy.llm.tally`: no
    store write of its own per call), at once when the tally is eager.
    """
    if message.ephemeral:
        return
    text = message.text if isinstance(message.text, str) else str(message.text)
    record = {
        "text": text,
        "question": question if isinstance(question, str) else text,
        "rule": rule,
        "at": round(time.time(), 3),
    }
    key = conversation_key(LAST, message)
    if tally is None:
        await store.set(key, record, ttl=LAST_TTL)
        return
    tally.put(key, record, LAST_TTL)
    if tally.eager:
        await tally.flush()


async def last_message(
    store: Store, message: Message, tally: Tally | None = None
) -> dict[str, str] | None:
    """``{text, question, rule}`` of this conversation's last LLM message, or None
    (with ``tally``: one it has not written yet first)."""
    key = conversation_key(LAST, message)
    value = MISSING if tally is None else tally.unwritten_value(key)
    if value is MISSING:
        value = await store.get(key)
    if not isinstance(value, dict) or not isinstance(value.get("text"), str):
        return None
    return {
        "text": value["text"],
        "question": str(value.get("question") or value["text"]),
        "rule": str(value.get("rule") or ""),
    }
