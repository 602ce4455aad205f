"""The production store: Redis, shared by several daemons, one round-trip per operation.

Layout (Redis Cluster safe — a key and its lock share one hash slot):

* logical key ``k`` → ``{prefix}:{{k}}`` holding the JSON text (a plain string);
* its lease → ``{prefix}:{{k}}:lock`` holding the holder's token.

The prefix is ``tmy`` unless the constructor or a ``?prefix=`` URL parameter
(which wins) says otherwise, so several deployments can share one database.

Why it is built this way:

* **update is optimistic compare-and-set.** A Lua script writes the new value
  only if the key still holds the raw value ``fn`` was computed from and
  otherwise *returns* the current raw value, so a conflict costs no extra GET.
  A bounded per-process cache remembers the last raw value seen for each key
  (by get, get_many, set, delete, update), so the steady-state update is ONE
  round-trip (``EVALSHA``). An unknown key is first guessed absent. Updates of
  one key inside a process are batched (group commit: one CAS per batch) instead of thrashing
  the CAS; across processes a conflict recomputes ``fn`` on the value the
  script returned, up to ``update_retries`` times, then StoreError. If ``fn``
  raises (or returns a value JSON cannot hold) on a *guessed* value, one GET
  checks the guess: the exception propagates only if the guess was the real
  value, otherwise ``fn`` runs again on the real one.
* ``update(ttl=None)`` keeps the key's current expiry (``SET … KEEPTTL``);
  ``set(ttl=None)`` stores a value that never expires; ``set(key, MISSING)``
  deletes the key.
* **lock** is an in-process ``asyncio.Lock`` per key plus a lease taken by a
  script (``SET NX PX``; an existing lease with our own token also counts as
  taken, so a retried call whose first reply was lost does not wait on
  itself); a lease held elsewhere is polled for with short sleeps (never longer
  than its remaining PTTL); release is compare-and-delete. Leases are not
  renewed: a holder that outlives ``ttl`` may lose it.
* **Failures.** redis-py reconnects on the next command after a Redis restart
  (a command on a dead pooled connection fails and is retried on a new one) and retries
  connection errors and timeouts 3 times with capped exponential backoff;
  connect and socket timeouts are a few seconds, so nothing hangs: a stopped
  server fails a call in under a second, a frozen one after at most about
  4 × ``socket_timeout``. Every Redis failure surfaces as
  ``StoreError("redis at host:port: …")``, never as a redis-py exception.
* Needs Redis ≥ 6.0 (``KEEPTTL``). This client speaks to one Redis server;
  the key layout is ready for a Cluster client.

Counting round-trips with ``INFO commandstats``: Redis counts the GET/SET/DEL a
script runs as commands too. One ``update`` is one ``EVALSHA`` (plus the GET
and SET inside it); ``get``/``set``/``delete``/``get_many`` are one
GET/SET/DEL/MGET. ``open`` loads the scripts (one pipelined round-trip); after
a Redis restart a NOSCRIPT reply makes redis-py load a script again, once.

Known limit: redis-py retries a command whose reply was lost (connection cut
or timed out after Redis ran it). For ``update`` such a retry sees its own
write as a conflict and applies ``fn`` once more. Only a connection that dies
mid-command can cause it; a restarted server is detected before sending.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from tmy.errors import StoreError
from tmy.store.base import MISSING
from tmy.store.codec import check_key, check_ttl, decode, encode
from tmy.store.leases import KeyedLocks, hold_lease

R = TypeVar("R")


@dataclass(slots=True)
class _Job:
    """One caller's update waiting in a key's batch."""

    fn: Callable[[Any], tuple[Any, Any]]
    future: asyncio.Future[Any]
    px: str


def _ttl_arg(ttl: float | None) -> str:
    return "0" if ttl is None else str(_px(check_ttl(ttl)))


def _apply(
    batch: list[_Job], expected: bytes | None, key: str, verified: bool
) -> tuple[list[tuple[_Job, BaseException | None, Any]], bytes | None, bool]:
    """Run each job's fn in order, each on a fresh decode of the previous result.

    A job whose fn raises leaves the value as it was for the next job. Returns
    (outcomes, final raw value, True when a fn failed on an unverified guess).
    """
    outcomes: list[tuple[_Job, BaseException | None, Any]] = []
    raw = expected
    for job in batch:
        try:
            new, result = job.fn(MISSING if raw is None else decode(raw, key))
            next_raw = None if new is MISSING else encode(new, key)
        except Exception as exc:
            if not verified:
                return outcomes, raw, True
            outcomes.append((job, exc, None))
            continue
        outcomes.append((job, None, result))
        raw = next_raw
    return outcomes, raw, False


def _settle(outcomes: list[tuple[_Job, BaseException | None, Any]]) -> None:
    for job, exc, result in outcomes:
        if job.future.done():
            continue
        if exc is not None:
            job.future.set_exception(exc)
        else:
            job.future.set_result(result)


log = logging.getLogger(__name__)

# ARGV: expect ('1' a value / '0' absence), expected raw, op ('s' set / 'd' delete),
# new raw, PX milliseconds ('0' keeps the current expiry).
# Returns 1 when written, else {current raw} ({} when absent).
_CAS = """
local cur = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  if cur ~= ARGV[2] then
    if cur then return {cur} end
    return {}
  end
elseif cur then
  return {cur}
end
if ARGV[3] == 'd' then
  if cur then redis.call('DEL', KEYS[1]) end
elseif ARGV[5] ~= '0' then
  redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[5])
else
  redis.call('SET', KEYS[1], ARGV[4], 'KEEPTTL')
end
return 1
"""
# ARGV: token, PX. Returns 0 when the lease is ours, else its remaining milliseconds.
_TAKE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
if redis.call('GET', KEYS[1]) == ARGV[1] then return 0 end
local left = redis.call('PTTL', KEYS[1])
if left < 1 then return 1 end
return left
"""
_GIVE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def _px(seconds: float) -> int:
    return max(1, math.ceil(seconds * 1000))


def _glob_escape(text: str) -> str:
    """``text`` matched literally by SCAN MATCH."""
    return "".join("\\" + c if c in "\\*?[]" else c for c in text)


class _RawCache:
    """The last raw value seen per Redis key: a guess for the next CAS, bounded.

    A wrong guess costs one extra round-trip, never correctness, so eviction is
    plain first-in-first-out (a key seen again moves to the back).
    """

    def __init__(self, max_keys: int, max_bytes: int = 32 << 20) -> None:
        self.max_keys = max_keys
        self.max_bytes = max_bytes
        self._raw: dict[str, bytes] = {}
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._raw)

    def get(self, rkey: str) -> bytes | None:
        return self._raw.get(rkey)

    def put(self, rkey: str, raw: bytes | None) -> None:
        old = self._raw.pop(rkey, None)
        if old is not None:
            self._bytes -= len(old)
        if raw is None or len(raw) > self.max_bytes // 16:
            return  # absent is the default guess; huge values are not worth the memory
        self._raw[rkey] = raw
        self._bytes += len(raw)
        while len(self._raw) > self.max_keys or self._bytes > self.max_bytes:
            self._bytes -= len(self._raw.pop(next(iter(self._raw))))


class RedisStore:
    """A :class:`~tmy.store.base.Store` on Redis (``redis://`` or ``rediss://`` URL)."""

    _cas: AsyncScript  # the scripts, registered by open()
    _take: AsyncScript
    _give: AsyncScript

    def __init__(
        self,
        url: str,
        prefix: str = "tmy",
        *,
        socket_timeout: float = 5.0,
        connect_timeout: float = 2.0,
        max_connections: int = 64,
        update_retries: int = 100,
        cache_keys: int = 10_000,
    ) -> None:
        """``url``'s ``?prefix=`` overrides ``prefix``; other query parameters go to redis-py."""
        try:
            parts = urlsplit(url)
            host, port = parts.hostname or "localhost", parts.port or 6379
        except ValueError as exc:
            raise StoreError(f"invalid Redis URL {url!r}: {exc}") from None
        if parts.scheme not in ("redis", "rediss"):
            raise StoreError(f"not a Redis URL (redis:// or rediss://): {url!r}")
        query = parse_qsl(parts.query, keep_blank_values=True)
        rest = [(k, v) for k, v in query if k != "prefix"]
        prefix = next((v for k, v in reversed(query) if k == "prefix"), prefix)
        if not prefix:
            raise StoreError(f"the key prefix may not be empty: {url!r}")
        self.prefix = prefix
        self.url = urlunsplit(parts._replace(query=urlencode([*rest, ("prefix", prefix)])))
        self.where = f"redis at {host}:{port}"
        self._connect_url = urlunsplit(parts._replace(query=urlencode(rest)))
        self.socket_timeout = socket_timeout
        self.connect_timeout = connect_timeout
        self.max_connections = max_connections
        self.update_retries = update_retries
        self._head = f"{prefix}:{{"
        try:  # no I/O: a bad query parameter is refused here rather than at first use
            self._pool().make_connection()
        except (TypeError, ValueError) as exc:
            raise StoreError(f"invalid Redis URL {url!r}: {exc}") from None
        self._redis: Redis | None = None
        self._cache = _RawCache(cache_keys)
        self._batches: dict[str, list[_Job]] = {}
        self._leases = KeyedLocks()

    def __repr__(self) -> str:
        return f"RedisStore({self.where!r}, prefix={self.prefix!r})"

    def _k(self, key: str) -> str:
        check_key(key)
        return f"{self._head}{key}}}"

    def _r(self) -> Redis:
        if self._redis is None:
            raise StoreError(f"{self.where}: the store is not open (await store.open())")
        return self._redis

    def _pool(self) -> BlockingConnectionPool:
        """A new pool (one per open: asyncio objects belong to the loop that first uses them)."""
        return BlockingConnectionPool.from_url(
            self._connect_url,
            max_connections=self.max_connections,
            timeout=self.socket_timeout,  # wait for a free pooled connection
            socket_timeout=self.socket_timeout,
            socket_connect_timeout=self.connect_timeout,
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), retries=3),
            retry_on_error=[RedisConnectionError, RedisTimeoutError],
        )

    @contextmanager
    def _failing(self, what: str) -> Iterator[None]:
        """Re-raise any Redis failure as StoreError naming the server and the operation."""
        try:
            yield
        except (RedisError, OSError) as exc:
            raise StoreError(f"{self.where}: {what} failed: {exc}") from exc

    # -- lifecycle --------------------------------------------------------------

    async def open(self) -> None:
        """Create the connection pool, load the scripts (proving Redis answers); idempotent."""
        if self._redis is not None:
            return
        client = Redis.from_pool(self._pool())
        self._cas = client.register_script(_CAS)
        self._take = client.register_script(_TAKE)
        self._give = client.register_script(_GIVE)
        try:
            with self._failing("connect"):  # one round-trip: also proves Redis answers
                pipe = client.pipeline(transaction=False)
                for script in (self._cas, self._take, self._give):
                    pipe.script_load(script.script)
                await pipe.execute()
        except BaseException:
            await client.aclose()
            raise
        self._redis = client

    async def close(self) -> None:
        """Close every pooled connection; idempotent."""
        client, self._redis = self._redis, None
        if client is not None:
            with self._failing("close"):
                await client.aclose()

    async def ping(self) -> None:
        """Raise StoreError unless Redis answers PING."""
        with self._failing("ping"):
            await self._r().ping()

    # -- values -----------------------------------------------------------------

    async def get(self, key: str) -> Any:
        """The value at ``key``, or ``MISSING`` (one GET)."""
        rkey = self._k(key)
        with self._failing(f"get {key!r}"):
            raw = await self._r().get(rkey)
        self._cache.put(rkey, raw)
        return MISSING if raw is None else decode(raw, key)

    async def get_many(self, keys: Sequence[str]) -> list[Any]:
        """Values for ``keys`` in order, ``MISSING`` for absent ones (one MGET)."""
        rkeys = [self._k(k) for k in keys]
        if not rkeys:
            return []
        with self._failing("get_many"):
            raws = await self._r().mget(rkeys)
        out = []
        for key, rkey, raw in zip(keys, rkeys, raws, strict=True):
            self._cache.put(rkey, raw)
            out.append(MISSING if raw is None else decode(raw, key))
        return out

    async def set(self, key: str, value: Any, *, ttl: float | None = None) -> None:
        """Replace the value at ``key`` (one SET [PX]); MISSING deletes it."""
        if value is MISSING:
            await self.delete(key)
            return
        rkey = self._k(key)
        raw = encode(value, key)
        px = None if ttl is None else _px(check_ttl(ttl))
        with self._failing(f"set {key!r}"):
            await self._r().set(rkey, raw, px=px)
        self._cache.put(rkey, raw)

    async def delete(self, key: str) -> bool:
        """Remove ``key`` (one DEL); True when something was removed."""
        rkey = self._k(key)
        with self._failing(f"delete {key!r}"):
            removed = await self._r().delete(rkey)
        self._cache.put(rkey, None)
        return bool(removed)

    async def update(
        self, key: str, fn: Callable[[Any], tuple[Any, R]], *, ttl: float | None = None
    ) -> R:
        """Atomically apply ``fn`` to the value at ``key`` by compare-and-set (see module doc).

        Group commit: updates of one key that arrive while a compare-and-set for
        it is in flight join the next batch, whose functions are applied in
        arrival order and written by ONE compare-and-set. Sixty-four runs
        rotating the same list cost a few round-trips, not sixty-four.
        """
        job = _Job(fn, asyncio.get_running_loop().create_future(), _ttl_arg(ttl))
        queue = self._batches.get(key)
        if queue is not None:  # a leader is committing this key: ride along
            queue.append(job)
            return await job.future
        queue = self._batches[key] = [job]
        batch: list[_Job] = []
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

    async def _commit(self, key: str, batch: list[_Job]) -> None:
        """Apply a batch of update functions with one compare-and-set; settle their futures."""
        rkey = self._k(key)
        redis = self._r()
        expected = self._cache.get(rkey)  # a guess; absent when unknown
        verified = False  # True once ``expected`` was read from Redis during this commit
        try:
            for attempt in range(self.update_retries):
                outcomes, raw, guess_failed = _apply(batch, expected, key, verified)
                if guess_failed:
                    # fn (or encoding) failed on a guessed value: fail only if it is real
                    with self._failing(f"update {key!r}"):
                        actual = await redis.get(rkey)
                    verified = True
                    if actual != expected:
                        expected = actual
                        self._cache.put(rkey, expected)
                        continue
                    outcomes, raw, _ = _apply(batch, expected, key, True)
                if raw == expected and verified:  # no change to a value read from Redis
                    _settle(outcomes)
                    return
                px = next((j.px for j, exc, _ in reversed(outcomes) if exc is None), "0")
                args = (
                    "0" if expected is None else "1",
                    expected or b"",
                    "d" if raw is None else "s",
                    raw or b"",
                    px,
                )
                with self._failing(f"update {key!r}"):
                    reply = await self._cas(keys=[rkey], args=args, client=redis)
                if reply == 1:
                    self._cache.put(rkey, raw)
                    _settle(outcomes)
                    return
                expected = reply[0] if reply else None  # written elsewhere meanwhile
                verified = True
                self._cache.put(rkey, expected)
                if attempt >= 2:  # a busy key: spread the contenders out a little
                    await asyncio.sleep(random.uniform(0, min(0.05, 0.0005 * 2**attempt)))
            raise StoreError(
                f"{self.where}: update {key!r} gave up after {self.update_retries} "
                "attempts: other processes kept changing it"
            )
        except Exception as exc:
            for job in batch:
                if not job.future.done():
                    job.future.set_exception(exc)

    async def keys(self, prefix: str) -> list[str]:
        """Every live key starting with ``prefix``, sorted (SCAN MATCH, glob-escaped)."""
        pattern = _glob_escape(self._head) + _glob_escape(prefix) + "*"
        head = len(self._head.encode())
        found: set[str] = set()
        cursor = 0
        with self._failing(f"keys {prefix!r}"):
            while True:
                cursor, batch = await self._r().scan(cursor, match=pattern, count=1000)
                for rkey in batch:
                    if rkey.endswith(b"}"):  # lock keys end in ":lock"
                        key = rkey[head:-1].decode()
                        if key.startswith(prefix):  # "a}" also matches the key of "a"
                            found.add(key)
                if cursor == 0:
                    break
        return sorted(found)

    # -- locks ------------------------------------------------------------------

    def lock(
        self, key: str, *, ttl: float = 30.0, wait: float = 30.0
    ) -> AbstractAsyncContextManager[None]:
        """Hold the lease ``key`` across all processes on this Redis (see :meth:`Store.lock`)."""
        lkey = self._k(key) + ":lock"
        args = (uuid.uuid4().hex, _px(check_ttl(ttl, "lock ttl")))

        async def take() -> float | None:
            with self._failing(f"lock {key!r}"):
                held_ms = await self._take(keys=[lkey], args=args, client=self._r())
            return None if held_ms == 0 else held_ms / 1000

        async def give() -> None:
            with self._failing(f"unlock {key!r}"):
                await self._give(keys=[lkey], args=[args[0]], client=self._r())

        return hold_lease(
            self._leases, key, where=self.where, ttl=ttl, wait=wait, take=take, give=give
        )
