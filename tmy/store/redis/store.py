"""The Redis store's values, recorded writes, commits and locks (:class:`RedisStore`).

* ``update(ttl=None)`` keeps the key's current expiry (``SET … KEEPTTL``);
  ``set(ttl=None)`` stores a value that never expires; ``set(key, MISSING)``
  deletes the key. ``update`` itself is :mod:`tmy.store.redis.group_commit`.
* ``set`` and ``delete`` are recorded writes (:data:`~tmy.store.redis.scripts.PUT`);
  those that arrive while one is in flight go together as one pipeline, with the
  compare-and-sets of ``update`` (:mod:`tmy.store.redis.pipelined`).
* **lock** is an in-process ``asyncio.Lock`` per key plus a lease taken by a
  script (``SET NX PX``; an existing lease with our own token also counts as
  taken, so a resent take does not wait on itself); a lease held elsewhere is
  polled for with short sleeps (never longer than its remaining PTTL), and one
  held by a dead process of this machine is cleared at once (see
  :mod:`tmy.store.leases`). Leases are short (5 s by default) and renewed
  every third of that by a compare-token-and-``PEXPIRE`` script while the
  holder works, so a lease restored from the AOF after a crash, or left by a
  killed daemon, frees within seconds. Release is compare-and-delete, so a
  resent release never deletes a lease someone else took meanwhile; a resent
  take that lands after its release can leave a lease with nobody behind it,
  which expires within one lease length.
* **commit** applies several writes with ONE script that first compares
  each fencing lease's key with its holder's token (an expired lease key is
  gone, so it fails too) and writes nothing unless all still hold
  (``LeaseLost``); it is recorded like every write, so a resent copy applies
  nothing twice. On a Redis Cluster every key of one commit (values, write
  record, leases) must be in one hash slot: a key and its own lease always
  are; keys of several variables are refused with a StoreError before
  anything is sent. ``?lease_ttl=`` in the URL sets ``lock``'s default lease
  length.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from tmy.store.base import MISSING
from tmy.store.codec import check_ttl, decode, encode
from tmy.store.leases import (
    Lease,
    check_fence,
    hold_lease,
    holder_is_gone,
    lost_in_store,
    new_token,
)
from tmy.store.redis.postings import RedisPostings
from tmy.store.redis.scripts import px, ttl_arg
from tmy.store.redis.snapshots import RedisSnapshots

log = logging.getLogger("tmy.store.redis")  # the name it had as one module


class RedisStore(RedisPostings, RedisSnapshots):
    """A :class:`~tmy.store.base.Store` on Redis (``redis://`` or ``rediss://`` URL).

    The lexical index, and snapshots carrying it, are
    :class:`~tmy.store.redis.postings.RedisPostings`'.

    The constructor is :class:`~tmy.store.redis.lanes.RedisLanes`'s (URL and
    connection options); ``update`` is :class:`~tmy.store.redis.group_commit.GroupCommit`'s.
    """

    one_slot_commits = False  # one server runs a commit's script over any keys

    async def get(self, key: str) -> Any:
        """The value at ``key``, or ``MISSING`` (one GET)."""
        rkey = self._k(key)
        async with self._io(f"get {key!r}") as redis:
            raw = await redis.get(rkey)
        self._cache.put(rkey, raw)
        return MISSING if raw is None else decode(raw, key)

    async def get_many(self, keys: Sequence[str]) -> list[Any]:
        """Values for ``keys`` in order, ``MISSING`` for absent ones (one MGET)."""
        rkeys = [self._k(k) for k in keys]
        if not rkeys:
            return []
        async with self._io("get_many") as redis:
            raws = await self._mget(redis, rkeys)
        out = []
        for key, rkey, raw in zip(keys, rkeys, raws, strict=True):
            self._cache.put(rkey, raw)
            out.append(MISSING if raw is None else decode(raw, key))
        return out

    async def set(self, key: str, value: Any, *, ttl: float | None = None) -> None:
        """Replace the value at ``key`` (one EVALSHA: a recorded SET [PX]); MISSING deletes it.

        Recorded like every write, so a copy redis-py resends after a lost reply
        cannot overwrite what another client wrote after the first copy.
        """
        if value is MISSING:
            await self.delete(key)
            return
        rkey = self._k(key)
        raw = encode(value, key, self.max_value_bytes)
        px = ttl_arg(ttl)
        keys, args = [rkey, self._op(rkey)], ("s", raw, px, self._op_px)
        await self._scripted(self._put, f"set {key!r}", keys, args)
        self._cache.put(rkey, raw)

    async def delete(self, key: str) -> bool:
        """Remove ``key`` (one EVALSHA: a recorded DEL); True when something was removed."""
        rkey = self._k(key)
        args = ("d", b"", "0", self._op_px)
        removed = await self._scripted(self._put, f"delete {key!r}", [rkey, self._op(rkey)], args)
        self._cache.put(rkey, None)
        return bool(removed)

    async def claim(self, key: str, ttl: float) -> bool:
        """Take ``key`` for ``ttl`` seconds: one ``SET key token NX PX ms GET``.

        The token is this claim's own, so a copy redis-py resends after a lost
        reply finds it and still answers True (see :meth:`Store.claim`). Claims
        asked in one pass of the event loop go as one pipeline (:mod:`tmy.store.claims`).
        """
        rkey = self._k(key)
        check_ttl(ttl)
        return await self._claims.claim(rkey, ttl)

    async def claim_many(self, keys: Sequence[str], ttl: float) -> list[bool]:
        """:meth:`claim` of each of ``keys`` in order, in one pipeline: for a caller that
        gathered its claims itself (:mod:`tmy.adapters.dedup`). A key listed twice is taken
        by its first listing only (the second ``SET NX GET`` finds the first's token)."""
        check_ttl(ttl)
        if not keys:
            return []
        return await self._claim_batch([(self._k(key), ttl) for key in keys])

    async def _claim_batch(self, batch: Sequence[tuple[str, float]]) -> list[bool]:
        raws = [encode(f"claim:{secrets.token_hex(8)}") for _ in batch]
        async with self._io(f"claim of {len(batch)} keys") as redis:
            if len(batch) == 1:
                (rkey, ttl), raw = batch[0], raws[0]
                olds = [await redis.set(rkey, raw, nx=True, px=px(ttl), get=True)]
            else:
                pipe = redis.pipeline(transaction=False)
                for (rkey, ttl), raw in zip(batch, raws, strict=True):
                    pipe.set(rkey, raw, nx=True, px=px(ttl), get=True)
                olds = await pipe.execute()
        return [old is None or old == raw for old, raw in zip(olds, raws, strict=True)]

    async def _mget(self, redis: Any, rkeys: list[str]) -> list[bytes | None]:
        return await redis.mget(rkeys)

    async def keys(self, prefix: str) -> list[str]:
        """Every live key starting with ``prefix``, sorted (SCAN MATCH, glob-escaped);
        not the format marker."""
        return sorted(await self._value_keys(prefix, f"keys {prefix!r}"))

    async def commit(
        self, writes: Sequence[tuple[str, Any, float | None]], *, fence: Sequence[Lease] = ()
    ) -> None:
        """Apply ``writes`` with ONE script, only if every ``fence`` lease still holds.

        ``writes`` are ``(key, value, ttl)`` (``MISSING`` deletes; ``ttl`` None:
        no expiry). The script compares each fence lease's key with its token
        (an expired lease key is gone, so it fails too) and then applies every
        write, or none (:class:`~tmy.errors.LeaseLost` naming the key). It is
        recorded like every write: a copy redis-py resends after a lost reply
        applies nothing again. On a Redis Cluster every key written and every
        fence lease must share one hash slot (else StoreError, nothing sent).
        """
        leases = check_fence(fence)
        wkeys: list[str] = []
        args: list[Any] = []
        raws: list[bytes | None] = []
        for key, value, ttl in writes:
            rkey = self._k(key)
            raw = None if value is MISSING else encode(value, key, self.max_value_bytes)
            wkeys.append(rkey)
            raws.append(raw)
            args += ["d", b"", "0"] if raw is None else ["s", raw, ttl_arg(ttl)]
        if not wkeys and not leases:
            return
        lkeys = [self._k(lease.key) + ":lock" for lease in leases]
        self._one_slot([*wkeys, *lkeys], [k for k, _, _ in writes], [x.key for x in leases])
        record = self._op(wkeys[0] if wkeys else self._k(leases[0].key))
        keys = [record, *lkeys, *wkeys]
        argv = [len(leases), self._op_px, *(x.token for x in leases), *args]
        what = f"commit of {len(wkeys)} writes"
        async with self._io(what) as redis:
            failed = await self._commit_script(keys=keys, args=argv, client=redis)
        if failed:
            for rkey in wkeys:  # nothing written: forget any guess about these keys
                self._cache.put(rkey, None)
            raise lost_in_store(leases[int(failed) - 1], self.where)
        for rkey, raw in zip(wkeys, raws, strict=True):
            self._cache.put(rkey, raw)

    def _one_slot(self, rkeys: list[str], keys: list[str], leases: list[str]) -> None:
        """On one Redis any keys go together in a script; see RedisClusterStore."""

    # -- locks ------------------------------------------------------------------

    def lock(
        self, key: str, *, ttl: float | None = None, wait: float = 30.0
    ) -> AbstractAsyncContextManager[Lease]:
        """Hold the lease ``key`` across all processes on this Redis (see :meth:`Store.lock`).

        ``ttl`` defaults to the store's ``lease_ttl`` (URL ``?lease_ttl=``, else 5 s).
        """
        lkey = self._k(key) + ":lock"
        token = new_token()
        ttl = self.lease_ttl if ttl is None else check_ttl(ttl, "lock ttl")
        args = (token, px(ttl))

        async def take() -> float | None:
            async with self._io(f"lock {key!r}") as redis:
                reply = await self._take(keys=[lkey], args=args, client=redis)
                if reply == 0:
                    return None
                left_ms, holder = reply
                holder = holder.decode(errors="replace")
                if not holder_is_gone(holder):
                    return left_ms / 1000
                # its holder was a process of this machine that has died: clear it now
                # (compare-and-delete, so a lease taken meanwhile by another is kept)
                if await self._give(keys=[lkey], args=[holder], client=redis):
                    log.warning("lock %r: cleared the lease of a dead holder (%s)", key, holder)
                return 0.0

        async def renew() -> bool:
            async with self._io(f"renew lock {key!r}") as redis:
                return bool(await self._renew(keys=[lkey], args=args, client=redis))

        async def give() -> None:
            async with self._io(f"unlock {key!r}") as redis:
                await self._give(keys=[lkey], args=[token], client=redis)

        return hold_lease(
            self._leases,
            key,
            where=self.where,
            ttl=ttl,
            wait=wait,
            take=take,
            give=give,
            renew=renew,
            token=token,
        )
