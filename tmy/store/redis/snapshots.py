"""The Redis store's ``snapshot`` and ``restore`` (see :mod:`tmy.store.base`).

On a single Redis ``snapshot`` is ONE script,
:data:`~tmy.store.redis.scripts.SNAP_ALL`: it finds the store's keys itself
(SCAN inside the script, which Redis runs alone) and returns every value with
its PTTL and every board with its names in one reply — one point in time, so
two keys written by one ``commit`` always agree in it
(``Snapshot.point_in_time`` True). Redis is busy for the script's length (a
SCAN of the database and one read per key: roughly a second per few hundred
thousand keys), so it is bounded: above :data:`POINT_IN_TIME_MAX_KEYS` keys
and board entries or :data:`POINT_IN_TIME_MAX_BYTES` of values, the script
stops without reading and the batched reads below are used instead, the
snapshot saying so (``point_in_time`` False; a log line too).

The batched reads (a Redis Cluster always: its keys live on several nodes, so
a cluster backup is per key, ``point_in_time`` False) SCAN the value keys
(``{prefix}:{…}``, never KEYS) and read them with a script,
:data:`~tmy.store.redis.scripts.SNAP`, that returns each key's value and PTTL
together: every entry is one consistent (value, TTL) pair,
the set of them is not one moment (keys written meanwhile may or may not be in
it). Up to :data:`~tmy.store.snapshot.BATCH` keys per script (one hash slot per
script on a cluster: the scripts of many slots go in one pipeline), a few
pipelines in flight. Boards are SCANned too
(``{prefix}:rank:{…}``) and read a ZSCAN page at a time together with their
names (:data:`~tmy.store.redis.scripts.RANK_PAGE`). Leases, write records and
turns are never read.

``restore`` checks everything first (:mod:`tmy.store.snapshot`), then sends
plain ``SET [PX]`` / ``ZADD`` / ``HSET`` commands in pipelines of
:data:`~tmy.store.snapshot.BATCH`. They are not recorded writes: each sets a
value the snapshot holds, so a copy redis-py resends after a lost reply writes
the same thing again (a TTL restarts a moment later). ``replace`` first
UNLINKs every value key but the format marker and every board (not leases, not
write records, which expire on their own). Board entries go after every value,
each re-synced from the value it mirrors
(:func:`~tmy.store.board_keys.board_value_key`): on one Redis the
:data:`~tmy.store.redis.scripts.RANK_SYNC` script in the pipeline instead of a
ZADD, on a cluster a ZADD and then ``rank_sync`` (value and board are in
different slots); a lagging entry is corrected, one without a numeric value
removed, one of a board id the engine did not make written as given. Meant for a store no daemon is
writing to meanwhile (a daemon's write to a key the snapshot also holds is
overwritten, as a merge means).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from redis.exceptions import NoScriptError

from tmy.errors import StoreError
from tmy.store.base import FORMAT_KEY, Snapshot
from tmy.store.board_keys import board_value_key
from tmy.store.codec import decode
from tmy.store.redis.boards import RedisBoards, name_args
from tmy.store.snapshot import BATCH, batches, checked_ranks, encoded_entries, sorted_snapshot

IN_FLIGHT = 8  # snapshot scripts sent at once
POINT_IN_TIME_MAX_KEYS = 200_000
"""The most value keys plus board entries one snapshot script reads (a single Redis)."""
POINT_IN_TIME_MAX_BYTES = 64 * 2**20
"""The most bytes of keys, values, members and names one snapshot script reads."""

log = logging.getLogger("tmy.store.redis")


def glob_escape(text: str) -> str:
    """``text`` matched literally by SCAN MATCH."""
    return "".join("\\" + c if c in "\\*?[]" else c for c in text)


def _waves(groups: list[list[str]]) -> list[list[list[str]]]:
    """Groups gathered into waves of at most :data:`BATCH` keys (a group may be alone)."""
    waves: list[list[list[str]]] = []
    size = BATCH
    for group in groups:
        if size + len(group) > BATCH:
            waves.append([])
            size = 0
        waves[-1].append(group)
        size += len(group)
    return waves


async def _each(items: Sequence[Any], fn: Callable[[Any], Awaitable[None]]) -> None:
    """``fn`` over ``items``, at most :data:`IN_FLIGHT` at once."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(item: Any) -> None:
        async with gate:
            await fn(item)

    await asyncio.gather(*(one(item) for item in items))


class RedisSnapshots(RedisBoards):
    """``snapshot`` and ``restore`` on Redis (see the module doc)."""

    # -- scanning -------------------------------------------------------------------------------

    async def _scan(self, match: str, what: str) -> set[bytes]:
        """Every Redis key matching ``match`` (SCAN, on every master of a cluster)."""
        found: set[bytes] = set()
        async with self._io(what) as redis:
            async for rkey in redis.scan_iter(match=match, count=1000):
                found.add(rkey)
        return found

    async def _value_keys(self, prefix: str, what: str) -> dict[str, str]:
        """Live logical keys starting with ``prefix`` -> their Redis keys (not the marker)."""
        head = len(self._head.encode())
        out: dict[str, str] = {}
        for rkey in await self._scan(glob_escape(self._head + prefix) + "*", what):
            if rkey.endswith(b"}"):  # lock keys end in ":lock", write records in ":op:…"
                key = rkey[head:-1].decode()
                if key.startswith(prefix) and key != FORMAT_KEY:  # "a}" also matches "a"
                    out[key] = rkey.decode()
        return out

    async def _boards(self, what: str) -> dict[str, tuple[str, str]]:
        """Every board id -> its (sorted set, names) keys."""
        head = f"{self.prefix}:rank:{{"
        found = await self._scan(glob_escape(head) + "*", what)
        boards = [rkey.decode()[len(head) : -1] for rkey in found]
        return {board: self._board(board) for board in boards}

    def _groups(self, rkeys: list[str]) -> list[list[str]]:
        """Redis keys in groups one script may read (one Redis: any keys together)."""
        return [list(chunk) for chunk in batches(rkeys)]

    # -- snapshot -------------------------------------------------------------------------------

    _ONE_SCRIPT_SNAPSHOT = True  # a single Redis: the whole store in one script
    point_in_time_max_keys = POINT_IN_TIME_MAX_KEYS
    point_in_time_max_bytes = POINT_IN_TIME_MAX_BYTES

    async def snapshot(self) -> Snapshot:
        """Every live key and board entry: one script (one point in time) on a single
        Redis within the bounds, else each key's value and TTL read together."""
        if self._ONE_SCRIPT_SNAPSHOT:
            snap = await self._snapshot_at_once()
            if snap is not None:
                return snap
            log.warning(
                "%s: the store is over %d keys or %d MB: snapshot read in batches, "
                "per key (not one point in time)",
                self.where,
                self.point_in_time_max_keys,
                self.point_in_time_max_bytes // 2**20,
            )
        return await self._snapshot_in_batches()

    async def _snapshot_at_once(self) -> Snapshot | None:
        """The store read by one script (see the module doc); None when over the bounds."""
        rank_head, names_head = f"{self.prefix}:rank:", f"{self.prefix}:rank-names:"
        args = [
            glob_escape(self._head) + "*",
            glob_escape(rank_head + "{") + "*",
            rank_head,
            names_head,
            self._k(FORMAT_KEY),
            self.point_in_time_max_keys,
            self.point_in_time_max_bytes,
        ]
        async with self._io("snapshot") as redis:
            reply = await self._snap_all(keys=[], args=args, client=redis)
        if int(reply[0]) != 1:
            return None
        flat, boards = reply[1], reply[2]
        head = len(self._head.encode())
        entries: list[tuple[str, Any, float | None]] = []
        for i in range(0, len(flat), 3):
            key = flat[i][head:-1].decode()
            pttl = int(flat[i + 2])
            entries.append((key, decode(flat[i + 1], key), None if pttl < 0 else pttl / 1000))
        ranks: list[tuple[str, str, float, str | None]] = []
        zhead = len(f"{rank_head}{{".encode())
        for i in range(0, len(boards), 3):
            board = boards[i][zhead:-1].decode()
            scores, named = boards[i + 1], boards[i + 2]
            names = {named[j]: named[j + 1].decode() for j in range(0, len(named), 2)}
            ranks.extend(
                (board, scores[j].decode(), float(scores[j + 1]), names.get(scores[j]))
                for j in range(0, len(scores), 2)
            )
        return sorted_snapshot(entries, ranks)

    async def _snapshot_in_batches(self) -> Snapshot:
        """Every live key (value and TTL read together) and every board entry, per key."""
        keys = await self._value_keys("", "snapshot")
        logical = {rkey: key for key, rkey in keys.items()}
        entries: list[tuple[str, Any, float | None]] = []

        async def read(wave: list[list[str]]) -> None:
            for group, flat in zip(wave, await self._read_wave(wave), strict=True):
                for rkey, raw, pttl in zip(group, flat[::2], flat[1::2], strict=True):
                    if raw is None or pttl == -2:  # expired or deleted since the SCAN
                        continue
                    key = logical[rkey]
                    entries.append((key, decode(raw, key), None if pttl < 0 else pttl / 1000))

        await _each(_waves(self._groups(sorted(logical))), read)
        ranks: list[tuple[str, str, float, str | None]] = []

        async def read_board(item: tuple[str, tuple[str, str]]) -> None:
            board, (zset, names) = item
            seen: dict[str, tuple[float, str | None]] = {}  # ZSCAN may repeat a member
            cursor: Any = "0"
            while True:
                async with self._io(f"snapshot of board {board!r}") as redis:
                    page = await self._rank_page(keys=[zset, names], args=[cursor], client=redis)
                cursor, flat = page[0], page[1:]
                for i in range(0, len(flat), 3):
                    name = None if flat[i + 2] is None else flat[i + 2].decode()
                    seen[flat[i].decode()] = (float(flat[i + 1]), name)
                if cursor in (b"0", "0", 0):
                    break
            ranks.extend((board, m, score, name) for m, (score, name) in seen.items())

        await _each(sorted((await self._boards("snapshot")).items()), read_board)
        return sorted_snapshot(entries, ranks, point_in_time=False)

    async def _read_wave(self, wave: list[list[str]]) -> list[Any]:
        """One SNAP script per group, the wave's scripts in one pipeline (split per node
        on a cluster). After a Redis restart (NOSCRIPT: nothing ran) the script is loaded
        again and the wave read again: reads are safe to repeat."""
        for attempt in (1, 2):
            async with self._io("snapshot") as redis:
                pipe = redis.pipeline(transaction=False)
                for group in wave:
                    pipe.execute_command("EVALSHA", self._snap.sha, len(group), *group)
                replies = await pipe.execute(raise_on_error=False)
                if attempt == 1 and any(isinstance(r, NoScriptError) for r in replies):
                    await redis.script_load(self._snap.script)  # every master of a cluster
                    continue
            for reply in replies:
                if isinstance(reply, BaseException):
                    raise StoreError(f"{self.where}: snapshot failed: {reply}")
            break
        return replies

    # -- restore --------------------------------------------------------------------------------

    async def restore(self, snapshot: Snapshot, *, replace: bool) -> int:
        """Write ``snapshot`` in pipelines (see the module doc); ``replace`` wipes first."""
        rows = encoded_entries(snapshot, self.max_value_bytes)
        ranks = checked_ranks(snapshot)
        # every Redis key first: a key a cluster refuses is refused before anything is written
        targets = [(self._k(key), raw, ttl) for key, raw, ttl in rows]
        boards = {board: self._board(board) for board, _, _, _ in ranks}
        if replace:
            doomed = list((await self._value_keys("", "restore")).values())
            for zset, names in (await self._boards("restore")).values():
                doomed += [zset, names]
            for chunk in batches(doomed):
                async with self._io("restore: clearing the store") as redis:
                    pipe = redis.pipeline(transaction=False)
                    for rkey in chunk:
                        pipe.execute_command("UNLINK", rkey)
                    await pipe.execute()
                for rkey in chunk:
                    self._cache.put(rkey, None)
        for chunk in batches(targets):
            async with self._io(f"restore of {len(chunk)} keys") as redis:
                pipe = redis.pipeline(transaction=False)
                for rkey, raw, ttl in chunk:
                    if ttl is None:
                        pipe.set(rkey, raw)
                    else:
                        pipe.set(rkey, raw, px=max(1, round(ttl * 1000)))
                await pipe.execute()
            for rkey, raw, _ in chunk:
                self._cache.put(rkey, raw)
        later: list[tuple[str, str, str]] = []  # (board, member, value key): synced after
        for chunk in batches(ranks):
            async with self._io(f"restore of {len(chunk)} board entries") as redis:
                pipe = redis.pipeline(transaction=False)
                for board, member, score, name in chunk:
                    zset, names = boards[board]
                    key = board_value_key(board, member)
                    if name is None:
                        pipe.hdel(names, member)
                    if key is not None and not self.one_slot_commits:
                        # the entry as its (restored) value has it: one script, as rank_sync
                        args = [member, "", *name_args(name)]
                        await self._rank_sync(
                            keys=[self._k(key), zset, names], args=args, client=pipe
                        )
                        continue
                    pipe.zadd(zset, {member: score})
                    if name is not None:
                        pipe.hset(names, member, name)
                    if key is not None:  # a cluster: value and board in different slots
                        later.append((board, member, key))
                await pipe.execute()
        await _each(later, lambda item: self.rank_sync(*item))
        return len(rows)
