"""The Redis store's leaderboard boards (see :mod:`tmy.store.base`).

A board is a sorted set, ``{prefix}:rank:{board}`` (member → score), and a hash
of display names, ``{prefix}:rank-names:{board}``: one hash slot, outside the
``{prefix}:{`` keys that hold values (so ``keys`` never lists them).

* ``rank_sync`` on one Redis is ONE script: it GETs the value and ZADDs (or
  ZREMs) the member in the same step, so the board agrees with the value as it
  was at that moment, whatever order concurrent syncs arrive in. A resent copy
  does the same again (it re-reads the value), so it needs no write record.
  On a Redis Cluster the value and the board are in different slots:
  see :class:`~tmy.store.redis.cluster.RedisClusterStore`.
* ``rank_top`` is one script (ZREVRANGE plus HMGET of the names): O(log N + n),
  ties by member descending; ``rank_of`` one script (ZSCORE, ZCOUNT above it):
  O(log N).
* The score is the value's JSON text as ZADD reads it (a double); a value that
  is not a JSON number (a string, bool, null, list, map) or no value removes
  the member and its name.
"""

from __future__ import annotations

from tmy.store.base import score_out
from tmy.store.codec import check_board
from tmy.store.redis.group_commit import GroupCommit


def _name(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode()


def name_args(name: str | None) -> tuple[str, str]:
    """A name as the board scripts' two arguments: given ('1', name) or not ('0', '')."""
    return ("0", "") if name is None else ("1", name)


class RedisBoards(GroupCommit):
    """Boards on Redis (see the module doc)."""

    async def rank_sync(
        self, board: str, member: str, key: str, name: str | None = None
    ) -> float | None:
        """Make ``board`` agree with the value at ``key``: one script (GET, ZADD/ZREM)."""
        check_board(board, member)
        zset, names = self._board(board)
        rkey = self._k(key)
        async with self._io(f"rank_sync {board!r} {member!r}") as redis:
            raw = await self._rank_sync(
                keys=[rkey, zset, names], args=[member, "", *name_args(name)], client=redis
            )
        return None if raw is None else score_out(float(raw))

    async def rank_top(self, board: str, n: int) -> list[tuple[str, float, str | None]]:
        """The ``n`` highest entries (one script: ZREVRANGE and the names)."""
        check_board(board)
        if n <= 0:
            return []
        zset, names = self._board(board)
        async with self._io(f"rank_top {board!r}") as redis:
            flat = await self._rank_top(keys=[zset, names], args=[n], client=redis)
        return [
            (flat[i].decode(), score_out(float(flat[i + 1])), _name(flat[i + 2]))
            for i in range(0, len(flat), 3)
        ]

    async def rank_of(self, board: str, member: str) -> int | None:
        """1 + the members scoring strictly higher (one script: ZSCORE, ZCOUNT); None if absent."""
        check_board(board, member)
        zset, _ = self._board(board)
        async with self._io(f"rank_of {board!r} {member!r}") as redis:
            rank = await self._rank_of(keys=[zset], args=[member], client=redis)
        return None if rank is None else int(rank)

    async def rank_entry(self, board: str, member: str) -> tuple[float, str | None] | None:
        """``member``'s (score, name), read together; None when absent."""
        check_board(board, member)
        zset, names = self._board(board)
        async with self._io(f"rank_entry {board!r} {member!r}") as redis:
            found = await self._rank_entry(keys=[zset, names], args=[member], client=redis)
        return None if found is None else (score_out(float(found[0])), _name(found[1]))

    async def rank_above(self, board: str, score: float) -> int:
        """Members of ``board`` scoring strictly above ``score`` (one ZCOUNT)."""
        check_board(board)
        zset, _ = self._board(board)
        async with self._io(f"rank_above {board!r}") as redis:
            return int(await redis.zcount(zset, f"({float(score)!r}", "+inf"))
