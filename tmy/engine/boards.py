"""Leaderboards of ``rank: true`` variables, as a run's :class:`~tmy.engine.variables.Variables`
keeps them.

A variable declared ``rank: true`` has a leaderboard per platform beside its
values (``Store.rank_sync``): after every write of it, whichever path wrote
(a save, a list mode, a locked or fenced write, an atomic span's flush, a
plugin's ``ctx.set``, a pure step's atomic update), the board is told to
re-read the value, so it equals the values even when concurrent writers'
syncs arrive out of order. ``top()`` and ``rank_of()`` read the board as
:meth:`Leaderboards.fetch_boards` fetched it (once per run, again after the run
wrote that variable).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tmy.engine.keys import board_id
from tmy.errors import EvalError, TmyError
from tmy.logs import get_logger
from tmy.message import Message
from tmy.rulebook.model import VariableDecl
from tmy.store.base import Store
from tmy.values.ranks import TOP_MAX

log = get_logger("tmy.run")

# what top() serves: (the board's first TOP_MAX entries as {"user", "name", "value"}, the
# sender's rank or None)
Board = tuple[list[dict[str, Any]], int | None]


class Leaderboards:
    """The leaderboard half of a run's variables (mixed into ``Variables``, which sets
    ``declared``, ``store``, ``message``, ``boards`` and ``key``)."""

    declared: Mapping[str, VariableDecl]
    store: Store
    message: Message
    boards: dict[str, Board]
    key: Callable[[str], str]  # a declared variable's store key (Variables.key)

    def board(self, name: str) -> str:
        """The store's id of ``name``'s leaderboard on the message's platform."""
        return board_id(self.message.platform, name)

    async def written(self, name: str) -> None:
        """After a write of the declared variable ``name``: its board re-reads the value.

        Called by every write path (and by :func:`tmy.engine.execute.execute_atomic`,
        which updates the store itself). The sync re-reads the stored value, so
        it is right whatever order concurrent writers' syncs arrive in. A sync
        that fails is logged, not raised: the value is written, and the board
        catches up at the variable's next write.
        """
        if not self.declared[name].rank:
            return
        message = self.message
        # the user's display name; a platform that sent none has it equal to the id,
        # and the board keeps the name it had (top() shows the id when it never had one)
        shown = message.user_name if message.user_name != message.user else None
        self.boards.pop(name, None)  # re-fetched on the run's next top()/rank_of()
        try:
            await self.store.rank_sync(self.board(name), message.user, self.key(name), shown)
        except TmyError as exc:
            log.warning("rank.sync_failed", variable=name, user=message.user, error=str(exc))

    async def sync_ranks(self, names: Iterable[str]) -> None:
        """Sync the boards of the ranked ones among ``names`` (a caller that wrote their
        keys itself, such as a scheduled run's fenced commit)."""
        for name in names:
            if name in self.declared:
                await self.written(name)

    async def fetch_boards(self, names: Iterable[str]) -> None:
        """Fetch the leaderboards among ``names`` this run has not fetched yet: the top
        :data:`~tmy.values.ranks.TOP_MAX` and the sender's rank, for :meth:`leaderboard`.

        A name that is not a ``rank: true`` variable is left out: :meth:`leaderboard`
        says so when an expression asks for it.
        """
        wanted = [
            n
            for n in names
            if n not in self.boards and (d := self.declared.get(n)) is not None and d.rank
        ]
        for name in wanted:
            board = self.board(name)
            top, rank = await asyncio.gather(
                self.store.rank_top(board, TOP_MAX), self.store.rank_of(board, self.message.user)
            )
            entries = [
                {"user": member, "name": shown if shown is not None else member, "value": score}
                for member, score, shown in top
            ]
            self.boards[name] = (entries, rank)

    def leaderboard(self, name: str) -> Board:
        """``(top, rank)`` of ``name``'s board as :meth:`fetch_boards` fetched it:
        the highest :data:`~tmy.values.ranks.TOP_MAX` entries first, the sender's
        1-based rank (None before their first value). Inside an atomic span the
        span's own writes reach the board when they are committed together at its end,
        so a step after the span sees them; a step inside it sees the board as it was."""
        decl = self.declared.get(name)
        if decl is None or not decl.rank:
            raise EvalError(
                f"{name!r} is not a leaderboard: declare it with rank: true (a user-scoped number)"
            )
        board = self.boards.get(name)
        if board is None:  # a value evaluated without the engine's fetch: an engine bug
            raise EvalError(f"the leaderboard {name!r} was not fetched before it was read")
        return board
