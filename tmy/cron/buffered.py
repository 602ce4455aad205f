"""A scheduled run whose store writes are kept back, to be committed fenced.

Why: a daemon that holds an occurrence's claim lease can be paused (SIGSTOP, a
frozen VM, a store link cut off) for longer than the lease. Another daemon then
takes the lease and runs the occurrence. If the first one's steps wrote to the
store as they went, both runs' writes would land (a counter bumped twice, a
rotating tip moved twice). So a scheduled run works on a :class:`RunBuffer` —
it reads through to the real store and keeps every write to itself — and the
caller commits what it wrote together with the occurrence's done mark in one
``Store.commit`` fenced by the claim lease: all of it lands, under a lease still
held, or none of it.

What is not buffered: side effects outside the store (HTTP and LLM steps are
sent when they run; the LLM runtime keeps its own history and memory in the
real store). A read-modify-write in a scheduled rule reads when its step runs
and lands at the commit, so the caller holds the store locks of every variable
the rule may write (``Rule.scheduled_locks``) for the whole run and fences the
commit with them too; the loader makes every other writer of those variables
take their lock, so a chat run or another occurrence writing one in between
waits, and its update is added on top instead of being overwritten.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from tmy.engine.core import Engine
from tmy.engine.keys import variable_key
from tmy.message import Message, Reply
from tmy.store.base import MISSING
from tmy.store.codec import decode
from tmy.store.overlay import OverlayStore

Write = tuple[str, Any, float | None]
Sync = tuple[str, str, str, str | None]  # a leaderboard's rank_sync(board, member, key, name)
IndexWrite = tuple[str, tuple[Any, ...]]  # a lexical index write (method name, arguments)


class RunBuffer(OverlayStore):
    """An overlay whose writes can be handed to ``Store.commit`` (key, value, ttl)."""

    def pending(self) -> list[Write]:
        """What the run wrote, as commit writes: deleted and expired keys become deletions."""
        now = time.time()
        out: list[Write] = []
        for key, (raw, expires) in sorted(self._mine.items()):
            if raw is None or (expires is not None and expires <= now):
                out.append((key, MISSING, None))
            else:
                out.append((key, decode(raw, key), None if expires is None else expires - now))
        return out


async def run_buffered(
    engine: Engine, rule: Any, message: Message, question: str, extra: dict[str, Any]
) -> tuple[Reply, Sequence[Write], Sequence[Sync], Sequence[IndexWrite]]:
    """Run ``rule`` as a scheduled run on a second engine over a :class:`RunBuffer`.

    The second engine shares the real one's rules, settings, executors, hooks
    and HTTP client; only its store differs. Returns the reply, the writes to
    commit (nothing has reached the real store), the leaderboard syncs to
    repeat on the real store once they are committed (a ``rank: true``
    variable written by the run) and the lexical index writes to replay there
    then (a REMEMBER's entry is found through the index: :mod:`tmy.store.index_log`).
    """
    buffer = RunBuffer(engine.services.store)
    shadow = Engine(engine.rulebook, engine.services.derive(buffer), fixed_now=engine.fixed_now)
    try:
        reply = await shadow.run_scheduled(rule, message, question, extra)
        return reply, buffer.pending(), buffer.board_syncs(), buffer.index_writes()
    finally:
        buffer.discard()  # the real store is not ours to close


def variable_keys(rulebook: Any, names: Sequence[str], message: Message) -> list[str]:
    """The store keys of the declared variables ``names`` for ``message``, in name order."""
    return [variable_key(rulebook.variables[name], message) for name in sorted(names)]
