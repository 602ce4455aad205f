"""The Redis store's ``update``: optimistic compare-and-set, batched per key (group commit).

A Lua script (:data:`~tmy.store.redis.scripts.CAS`) writes the new value only
if the key still holds the raw value ``fn`` was computed from and otherwise
*returns* the current raw value, so a conflict costs no extra GET. The raw
value last seen for each key (:class:`~tmy.store.redis.cache.RawCache`) is the
guess, so the steady-state update is ONE round-trip (``EVALSHA``); an unknown
key is first guessed absent. Compare-and-sets of different keys that are ready
while another write is in flight share one pipeline (:mod:`tmy.store.redis.pipelined`:
each carries its write record, so a resent pipeline applies none twice).
Updates of one key inside a process are batched (one CAS per batch) instead of thrashing
the CAS; across processes a conflict recomputes ``fn`` on the value the script returned,
up to ``update_retries`` times, then StoreError. All the attempts of one batch share one
operation id and are numbered: the record names the attempt that was applied, so a
resent copy of an earlier attempt that lands after a later one (or the reverse) is
recognised, and the callers get the results of the attempt that was really written. If
``fn`` raises (or returns a value JSON cannot hold) on a *guessed* value, one GET checks
the guess: the exception propagates only if the guess was the real value, otherwise
``fn`` runs again on the real one.

Fairness on a hot key: a process whose compare-and-set loses
:data:`TURN_AFTER` times in a row (another daemon committing the same key back
to back) claims the key's turn, ``{prefix}:{{k}}:turn``, for at most
:data:`TURN_PX` ms; other processes' compare-and-sets on that key then wait
until it has written. Without it, two daemons on one global counter could
starve one another (one request failing after ``update_retries`` attempts).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tmy.errors import StoreError
from tmy.store.base import MISSING
from tmy.store.codec import decode, encode
from tmy.store.redis.pipelined import PipelinedWrites
from tmy.store.redis.scripts import ttl_arg

R = TypeVar("R")

TURN_AFTER = 3  # compare-and-sets lost in a row before a process claims the key's turn
TURN_PX = 2000  # how long a claimed turn lasts at most (a dead claimer blocks no longer)
TURN_WAIT = 30.0  # seconds an update waits, in all, while other processes hold turns


@dataclass(slots=True)
class Job:
    """One caller's update waiting in a key's batch."""

    fn: Callable[[Any], tuple[Any, Any]]
    future: asyncio.Future[Any]
    px: str


Outcome = tuple[Job, BaseException | None, Any]
"""A job, the exception its fn raised (or None) and its result."""


def _apply(
    batch: list[Job], expected: bytes | None, key: str, verified: bool, limit: int
) -> tuple[list[Outcome], bytes | None, bool]:
    """Run each job's fn in order, each on a fresh decode of the previous result.

    A job whose fn raises leaves the value as it was for the next job. Returns
    (outcomes, final raw value, True when a fn failed on an unverified guess).
    """
    outcomes: list[Outcome] = []
    raw = expected
    for job in batch:
        try:
            new, result = job.fn(MISSING if raw is None else decode(raw, key))
            next_raw = None if new is MISSING else encode(new, key, limit)
        except Exception as exc:
            if not verified:
                return outcomes, raw, True
            outcomes.append((job, exc, None))
            continue
        outcomes.append((job, None, result))
        raw = next_raw
    return outcomes, raw, False


def _settle(outcomes: list[Outcome]) -> None:
    for job, exc, result in outcomes:
        if job.future.done():
            continue
        if exc is not None:
            job.future.set_exception(exc)
        else:
            job.future.set_result(result)


@dataclass(slots=True)
class _Round:
    """One batch's compare-and-set attempts against one key."""

    key: str
    rkey: str
    record: str  # the write record every attempt of this batch shares
    turn: str  # the key's turn
    expected: bytes | None  # the raw value the next attempt compares against
    verified: bool = False  # True once ``expected`` was read from Redis during this round
    lost: int = 0  # compare-and-sets lost to other processes
    holding_turn: bool = False
    sent: dict[int, tuple[list[Outcome], bytes | None]] = field(default_factory=dict)


class GroupCommit(PipelinedWrites):
    """``update`` on Redis: group commit and compare-and-set (see the module doc)."""

    async def update(
        self, key: str, fn: Callable[[Any], tuple[Any, R]], *, ttl: float | None = None
    ) -> R:
        """Atomically apply ``fn`` to the value at ``key`` by compare-and-set (see module doc).

        Group commit: updates of one key that arrive while a compare-and-set for
        it is in flight join the next batch, whose functions are applied in
        arrival order and written by ONE compare-and-set. Sixty-four runs
        rotating the same list cost a few round-trips, not sixty-four.
        """
        job = Job(fn, asyncio.get_running_loop().create_future(), ttl_arg(ttl))
        queue = self._batches.get(key)
        if queue is not None:  # a leader is committing this key: ride along
            queue.append(job)
            return await job.future
        queue = self._batches[key] = [job]
        batch: list[Job] = []
        try:
            while queue:
                batch = queue[:]
                queue.clear()
                await self._commit(key, batch)
        except BaseException as exc:
            # the leading caller was cancelled (or failed): everyone waiting on this
            # batch or the next must hear about it instead of waiting forever
            failure = (
                exc
                if isinstance(exc, Exception)
                else StoreError(f"{self.where}: update {key!r} was interrupted; try again")
            )
            for pending in (*batch, *queue):
                if pending is not job and not pending.future.done():
                    pending.future.set_exception(failure)
            raise
        finally:
            del self._batches[key]
        return job.future.result()

    async def _commit(self, key: str, batch: list[Job]) -> None:
        """Apply a batch of update functions with one compare-and-set; settle their futures.

        Every attempt of this batch carries the same write record and its own
        number; whichever attempt Redis applied first is the one the callers
        hear about, even when the reply that reaches us belongs to a resent
        copy or a later attempt (see the module doc).
        """
        rkey = self._k(key)
        state = _Round(key, rkey, self._op(rkey), rkey + ":turn", self._cache.get(rkey))
        try:
            await self._attempt(batch, state)
        except Exception as exc:
            for job in batch:
                if not job.future.done():
                    job.future.set_exception(exc)
        finally:
            if state.holding_turn:
                try:
                    async with self._io(f"update {key!r}") as redis:
                        await self._give(keys=[state.turn], args=(self._turn_token,), client=redis)
                except StoreError:
                    pass  # the turn expires by itself within TURN_PX milliseconds

    async def _attempt(self, batch: list[Job], state: _Round) -> None:
        """Compare-and-set until one attempt is applied (settling the batch), else raise."""
        key = state.key
        waited_until = time.monotonic() + TURN_WAIT
        attempt = 0
        while attempt < self.update_retries:
            attempt += 1
            outcomes, raw, guess_failed = _apply(
                batch, state.expected, key, state.verified, self.max_value_bytes
            )
            if guess_failed:
                # fn (or encoding) failed on a guessed value: fail only if it is real
                if await self._guessed_wrong(state):
                    continue
                outcomes, raw, _ = _apply(batch, state.expected, key, True, self.max_value_bytes)
            if raw == state.expected and state.verified and not state.sent:
                _settle(outcomes)  # no change to a value read from Redis: nothing to write
                return
            reply = await self._compare_and_set(state, outcomes, raw)
            if isinstance(reply, int):  # applied, by this attempt or an earlier one
                if reply not in state.sent:
                    raise StoreError(
                        f"{self.where}: update {key!r}: the write record names attempt "
                        f"{reply}, which this process never sent (operation id clash?)"
                    )
                applied, written = state.sent[reply]
                self._cache.put(state.rkey, written)
                _settle(applied)
                return
            if len(reply) == 3:  # another process has the key's turn: let it write
                if time.monotonic() > waited_until:
                    raise StoreError(
                        f"{self.where}: update {key!r} waited {TURN_WAIT:g} s for its turn"
                    )
                attempt -= 1  # waiting for a turn is not a lost attempt
                left = max(int(reply[2]), 1) / 1000
                await asyncio.sleep(random.uniform(0.0002, min(left, 0.002)))
                continue
            await self._lost(state, reply, attempt)
        raise StoreError(
            f"{self.where}: update {key!r} gave up after {self.update_retries} "
            "attempts: other processes kept changing it"
        )

    async def _guessed_wrong(self, state: _Round) -> bool:
        """Read the key's real value; True (and it becomes the guess) when it differs."""
        async with self._io(f"update {state.key!r}") as redis:
            actual = await redis.get(state.rkey)
        state.verified = True
        if actual == state.expected:
            return False
        state.expected = actual
        self._cache.put(state.rkey, actual)
        return True

    async def _compare_and_set(
        self, state: _Round, outcomes: list[Outcome], raw: bytes | None
    ) -> Any:
        """Send one numbered attempt writing ``raw``; the script's reply (see scripts.CAS)."""
        px = next((j.px for j, exc, _ in reversed(outcomes) if exc is None), "0")
        number = len(state.sent) + 1
        state.sent[number] = (outcomes, raw)
        expected = state.expected
        args = (
            "0" if expected is None else "1",
            expected or b"",
            "d" if raw is None else "s",
            raw or b"",
            px,
            number,
            self._op_px,
            self._turn_token,
        )
        keys = [state.rkey, state.record, state.turn]
        return await self._scripted(self._cas, f"update {state.key!r}", keys, args)

    async def _lost(self, state: _Round, reply: list[bytes], attempt: int) -> None:
        """Another process wrote the key meanwhile: its value is the next guess."""
        state.expected = reply[0] if reply else None
        state.verified = True
        self._cache.put(state.rkey, state.expected)
        state.lost += 1
        if state.lost >= TURN_AFTER and not state.holding_turn:
            # A process that keeps losing (another daemon commits this key back
            # to back) claims the key's turn: others' compare-and-sets wait
            # until it has written, so no daemon starves on a hot key.
            async with self._io(f"update {state.key!r}") as redis:
                state.holding_turn = bool(
                    await redis.set(state.turn, self._turn_token, nx=True, px=TURN_PX)
                )
        elif attempt >= 2:  # a busy key: spread the contenders out a little
            await asyncio.sleep(random.uniform(0, min(0.05, 0.0005 * 2**attempt)))
