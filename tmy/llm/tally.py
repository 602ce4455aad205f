"""Usage counters added up in memory and written to the store in one batch per interval.

(The batch also carries the conversation's last LLM message, ``llmlast``, that ``ctx``
inspects again: :meth:`Tally.put`, a plain value written with the next flush.)

Three store transactions per model call (the user's, the chat's and everyone's
counter, :mod:`tmy.llm.usage`) were 13% of a call's CPU, and on Redis three
sequential round-trips were most of a mock step. So a call only adds its
tokens to :class:`Tally` (a dict), and a flush writes everything added since
the last one at once: under one lease on the store (``lock("llm/usage")``), one
``get_many`` of the counters touched, one ``commit`` of their new values. The
lease makes the read-add-write exact across daemons sharing the store; a Redis
Cluster, whose commits may not span hash slots, adds each counter with its own
atomic ``update`` instead.

When flushes happen:

* every ``llm.budget.flush_interval`` seconds (default 1) while the app runs, and
  once more when it stops cleanly — a clean stop loses nothing; a crash
  (``kill -9``, power) loses at most the calls of the last interval;
* before the model call's step goes on, whenever a daily budget is configured
  (``llm.budget.per_user_daily_tokens`` / ``daily_tokens``) or the interval is 0:
  a budget is checked against the store, and another daemon must see these
  tokens before it admits its next request. Concurrent calls share such a flush
  (the flush that starts after a call added its tokens carries it);
* before ``budget`` and ``ctx`` read the counters.

A flush that fails (the store is unreachable) keeps its counts for the next
one, so they are retried, not dropped (``llm.usage_flush_failed`` is logged);
as with any store write whose outcome was unknown, a retried batch may then
count twice. Only when the last flush at a stop fails too are the counts lost.

What reads the counters sees this daemon's unwritten counts too — the budget
check, ``budget``, ``ctx`` — while another process reading the store (``python
run.py budget`` next to a serving daemon, a backup) sees them up to one interval
late, unless a budget is configured.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import structlog

from tmy.errors import TmyError
from tmy.store.base import MISSING, Store
from tmy.store.periodic import flushing_every

log = structlog.get_logger("tmy.llm")

LEASE = "llm/usage"  # the lease every flush of every daemon holds (a namespace of its own)
KEEP = 40 * 86400  # counters expire 40 days after their last write
_SUMS = ("prompt", "completion", "cached", "calls")


def add_to(value: Any, delta: dict[str, Any]) -> dict[str, Any]:
    """``value`` (a stored counter, or anything else: a fresh one) plus ``delta``."""
    if not isinstance(value, dict):  # a fresh counter: the delta's copy (its counts are ints)
        return {
            "prompt": delta["prompt"],
            "completion": delta["completion"],
            "cached": delta["cached"],
            "calls": delta["calls"],
            "models": dict(delta["models"]),
            "latency_ms": round(delta["latency_ms"], 3),
        }
    out = dict(value)
    for name in _SUMS:
        out[name] = int(out.get(name, 0)) + delta[name]
    models = dict(out.get("models") or {})
    for model, n in delta["models"].items():
        models[model] = int(models.get(model, 0)) + n
    out["models"] = models
    out["latency_ms"] = round(float(out.get("latency_ms", 0.0)) + delta["latency_ms"], 3)
    return out


def _merge(into: dict[str, dict[str, Any]], batch: dict[str, dict[str, Any]]) -> None:
    for key, delta in batch.items():
        have = into.get(key)
        into[key] = delta if have is None else add_to(have, delta)


class Tally:
    """Counters not yet in the store, by key, and the flushes that put them there."""

    def __init__(
        self, store_of: Callable[[], Store], *, write_through: bool, eager: bool = False
    ) -> None:
        self._store_of = store_of  # the store is read at each flush (a reload may swap it)
        self.write_through = write_through  # counts: flushed before the call's step goes on
        self.eager = eager  # no flusher runs: every put is written at once too
        self._pending: dict[str, dict[str, Any]] = {}
        self._flushing: dict[str, dict[str, Any]] = {}  # the batch being written now
        self._sets: dict[str, tuple[Any, float]] = {}  # plain values to set (last one wins)
        self._setting: dict[str, tuple[Any, float]] = {}
        self._added = 0  # adds so far; a flush that started after add n carries it
        self._written = 0
        self._lock = asyncio.Lock()

    def add(
        self, keys: list[str], prompt: int, completion: int, cached: int, model: str, ms: float
    ) -> None:
        """Count one call on each of ``keys`` (no I/O)."""
        pending, tokens = self._pending, prompt + completion
        for key in keys:
            delta = pending.get(key)
            if delta is None:  # the key's first call since the last flush
                pending[key] = {
                    "prompt": prompt,
                    "completion": completion,
                    "cached": cached,
                    "calls": 1,
                    "models": {model: tokens},
                    "latency_ms": 0.0 + ms,
                }
                continue
            delta["prompt"] += prompt
            delta["completion"] += completion
            delta["cached"] += cached
            delta["calls"] += 1
            models = delta["models"]
            models[model] = models.get(model, 0) + tokens
            delta["latency_ms"] += ms
        self._added += 1

    def put(self, key: str, value: Any, ttl: float) -> None:
        """Set ``key`` to ``value`` with the next flush (a later put of the key wins)."""
        self._sets[key] = (value, ttl)
        self._added += 1

    def unwritten_value(self, key: str) -> Any:
        """The value a put of ``key`` waits to write (MISSING: none)."""
        found = self._sets.get(key) or self._setting.get(key)
        return MISSING if found is None else found[0]

    def unwritten(self, key: str) -> dict[str, Any] | None:
        """What ``key`` has counted here that the store may not show yet (None: nothing)."""
        parts = [d for d in (self._flushing.get(key), self._pending.get(key)) if d]
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else add_to(parts[0], parts[1])

    def with_unwritten(self, key: str, stored: Any) -> Any:
        """The stored counter plus what is not written yet (``stored`` as it is when none)."""
        delta = self.unwritten(key)
        if delta is None:
            return stored
        return add_to(None if stored is MISSING else stored, delta)

    async def flush(self) -> None:
        """Write every count added before this call (StoreError when the store fails;
        the counts then wait for the next flush)."""
        wanted = self._added
        async with self._lock:
            if self._written >= wanted or not (self._pending or self._sets):
                self._written = max(self._written, wanted)
                return
            batch, sets, upto = self._pending, self._sets, self._added
            self._pending, self._flushing, self._sets, self._setting = {}, batch, {}, sets

            done = False

            def written() -> None:  # at once: a reader must not count the batch twice
                nonlocal done
                done = True
                self._flushing, self._setting = {}, {}

            try:
                await _write(self._store_of(), batch, sets, written)
            except BaseException:
                if not done:  # (a failure after the commit, releasing the lease: it is in)
                    _merge(self._pending, batch)  # later adds and these: the next flush's
                    self._sets = {**sets, **self._sets}  # a later put of a key still wins
                raise
            finally:
                self._flushing, self._setting = {}, {}
            self._written = upto

    async def flush_logged(self) -> None:
        """A flush whose failure is logged, not raised (the background and the final one)."""
        try:
            await self.flush()
        except Exception as exc:  # the flusher must outlive any one failure: counts are kept
            waiting = len(self._pending) + len(self._sets)
            error = str(exc) if isinstance(exc, TmyError | OSError) else repr(exc)
            log.warning("llm.usage_flush_failed", error=error, pending=waiting)


async def _write(
    store: Store,
    batch: dict[str, dict[str, Any]],
    sets: dict[str, tuple[Any, float]],
    written: Callable[[], None],
) -> None:
    """Add ``batch`` to the stored counters and write ``sets``: under the lease, one read
    of the counters and one commit of everything; ``written()`` as soon as it is in."""
    keys = sorted(batch)
    if store.one_slot_commits:  # a Redis Cluster: one atomic update per counter, a set per value

        def adder(delta: dict[str, Any]) -> Callable[[Any], tuple[Any, None]]:
            return lambda current: (add_to(current, delta), None)

        named = [*keys, *sets]
        results = await asyncio.gather(
            *(store.update(k, adder(batch[k]), ttl=KEEP) for k in keys),
            *(store.set(k, value, ttl=ttl) for k, (value, ttl) in sets.items()),
            return_exceptions=True,
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:  # only what failed waits for the next flush: the rest is in, once
            for i, (name, result) in enumerate(zip(named, results, strict=True)):
                if not isinstance(result, BaseException):
                    (batch if i < len(keys) else sets).pop(name, None)
            raise failed[0]
        written()
        return
    plain = [(k, value, ttl) for k, (value, ttl) in sets.items()]
    if not keys:  # nothing to add to: blind writes need no lease
        await store.commit(plain)
        written()
        return
    async with store.lock(LEASE) as lease:
        current = await store.get_many(keys)
        writes = [(k, add_to(v, batch[k]), float(KEEP)) for k, v in zip(keys, current, strict=True)]
        await store.commit(writes + plain, fence=[lease])
        written()


@contextlib.asynccontextmanager
async def flushing(tally: Tally, interval: float) -> Any:
    """Flush every ``interval`` seconds while the block runs, and once more at its end
    (stopped between flushes, never inside one: a batch cut mid-commit would be of
    unknown outcome, and the final flush might count it twice)."""
    async with flushing_every(interval, tally.flush_logged):
        yield tally
