"""Chat history per conversation (platform + chat + user), kept in the store.

Stored at ``conversation_key("llmhist", message)`` as ``[[ask, answer], …]``,
newest last, at most ``llm.history.turns`` pairs. Only the question and the
final answer are kept — not the time/sender tail nor tool traffic — so a turn
reads the same every time it is sent again, and the request prefix stays
byte-identical across turns (a provider's prompt cache keeps hitting).

``STEP_SUMMARY`` (stored by the engine after a run) replaces the whole history
the next time a step with ``history:`` answers, and is then cleared.
"""

from __future__ import annotations

from typing import Any

from tmy.engine.variables import conversation_key
from tmy.message import Message
from tmy.store.base import MISSING, Store

KIND = "llmhist"


def _valid(pair: Any) -> bool:
    return isinstance(pair, list) and len(pair) == 2 and all(isinstance(s, str) for s in pair)


async def load(store: Store, message: Message) -> tuple[list[list[str]], list[str] | None]:
    """This conversation's pairs, and the pending STEP_SUMMARY that replaces them (if any).

    Nothing is changed here: the summary takes the history's place only once a
    Q&A that used it succeeded (:func:`append`), so a failed request or the
    ``ctx`` inspector does not use it up.
    """
    summary, stored = await store.get_many(
        [conversation_key("summary", message), conversation_key(KIND, message)]
    )
    if summary is not MISSING and _valid(summary):
        return [summary], summary
    if not isinstance(stored, list):
        return [], None
    return [p for p in stored if _valid(p)], None


async def append(
    store: Store,
    message: Message,
    ask: str,
    answer: str,
    keep: int,
    summary: list[str] | None = None,
) -> None:
    """Add one turn atomically (concurrent turns of one conversation both land).

    With ``summary`` the stored history is replaced by it first and the pending
    summary is cleared. An ephemeral identity (one request) keeps no history.
    """
    if message.ephemeral:
        return

    def add(current: Any) -> tuple[Any, None]:
        pairs = [summary] if summary else current if isinstance(current, list) else []
        return [*pairs, [ask, answer]][-max(keep, 1) :], None

    await store.update(conversation_key(KIND, message), add)
    if summary:
        await store.delete(conversation_key("summary", message))


async def clear(store: Store, message: Message) -> bool:
    """Forget this conversation's history."""
    return await store.delete(conversation_key(KIND, message))
