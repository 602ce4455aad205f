"""The production store: Redis, shared by several daemons, one round-trip per operation.

One server (``redis://``, ``rediss://``: :class:`RedisStore`) or a Redis Cluster
(``redis+cluster://``, ``rediss+cluster://``: :class:`RedisClusterStore`), with
the same key layout on both. Layout (a key, its lock and its write records share
one hash slot, so every script's keys live on one cluster node):

* logical key ``k`` → ``{prefix}:{{k}}`` holding the JSON text (a plain string);
* its lease → ``{prefix}:{{k}}:lock`` holding the holder's token;
* a record of each write recently applied to it →
  ``{prefix}:{{k}}:op:<operation id>`` (a short string, expiring after
  ``op_ttl`` seconds — :data:`OP_RECORD_TTL`, 60, or more with long timeouts).

The prefix is ``tmy`` unless the constructor or a ``?prefix=`` URL parameter
(which wins) says otherwise, so several deployments can share one database.

Why it is built this way:

* **Every write is applied at most once.** redis-py resends a command whose
  reply did not arrive in time (Redis stalled past ``socket_timeout``, a
  connection cut after the command ran), and Redis then runs every copy it
  received — a SHIFT would hand out one item and silently drop the next.
  So each write (``update``, ``set``, ``delete``) is a script carrying an
  operation id; the script records the id (with a TTL, next to the key) when
  it applies the write, and a copy that finds the record applies nothing and
  returns what the first copy did. A call that returns was applied exactly
  once; a call that raises StoreError was applied once or not at all.
* **update is optimistic compare-and-set.** A Lua script writes the new value
  only if the key still holds the raw value ``fn`` was computed from and
  otherwise *returns* the current raw value, so a conflict costs no extra GET.
  A bounded per-process cache remembers the last raw value seen for each key
  (by get, get_many, set, delete, update), so the steady-state update is ONE
  round-trip (``EVALSHA``). An unknown key is first guessed absent. Updates of
  one key inside a process are batched (group commit: one CAS per batch) instead of thrashing
  the CAS; across processes a conflict recomputes ``fn`` on the value the
  script returned, up to ``update_retries`` times, then StoreError. All the
  attempts of one batch share one operation id and are numbered: the record
  names the attempt that was applied, so a resent copy of an earlier attempt
  that lands after a later one (or the reverse) is recognised, and the callers
  get the results of the attempt that was really written. If ``fn`` raises
  (or returns a value JSON cannot hold) on a *guessed* value, one GET checks
  the guess: the exception propagates only if the guess was the real value,
  otherwise ``fn`` runs again on the real one.
* ``update(ttl=None)`` keeps the key's current expiry (``SET … KEEPTTL``);
  ``set(ttl=None)`` stores a value that never expires; ``set(key, MISSING)``
  deletes the key.
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
* **Failures.** redis-py reconnects on the next command after a Redis restart
  (a command on a dead pooled connection fails and is retried on a new one) and retries
  connection errors and timeouts 3 times with capped exponential backoff;
  connect and socket timeouts are a few seconds, so nothing hangs: a stopped
  server fails a call in under a second, a frozen one after at most about
  4 × ``socket_timeout``. Every Redis failure surfaces as
  ``StoreError("redis at host:port: …")`` (``redis cluster at host:port,…``
  on a cluster), never as a redis-py exception.
* Needs Redis ≥ 6.0 (``KEEPTTL``).

On a Redis Cluster (:class:`RedisClusterStore`, redis-py's cluster client) the
layout is the same — data written through a plain ``redis://`` URL reads the
same through ``redis+cluster://`` once the keys are on the cluster, and the
reverse. The hash tag ``{k}`` puts a key, its write records and its lease in
one slot, so every script runs on one node. What differs:

* ``get_many`` reads keys of several slots with one MGET per slot, sent as one
  pipeline per node (redis-py's ``mget_nonatomic``): each value is read
  atomically, the set of them is not (on one server it is one MGET);
* ``keys`` SCANs every master; ``ping`` pings every master;
* a failed or timed-out command makes redis-py refresh the cluster layout
  before it resends (so the write records are kept longer: every resend may
  follow a refresh), and a MOVED/ASK redirection (a slot moved to another
  node) is followed; a script redirected or refused does not run, so neither
  changes the at-most-once guarantee. While a slot is being migrated
  (resharding), writes to its keys may fail with a StoreError (``TRYAGAIN``:
  a script's keys are split between two nodes) until the slot has moved;
* recorded writes (``set``/``delete``) that arrive while one is in flight are
  each sent on their own rather than as one pipeline (their keys may be on
  several nodes);
* the prefix may not contain ``{`` or ``}``, and a logical key may not start
  with ``}`` (its hash tag would be empty and its keys would scatter over
  slots); the engine's keys (``var/…``, ``hist/…``, ``cron/…``) never do.

Counting round-trips with ``INFO commandstats``: Redis counts the commands a
script runs as commands too. One ``update`` is one ``EVALSHA`` (inside it:
``SET NX`` of the write record, ``GET`` of the key's turn, ``GET`` and ``SET``
of the value); ``set`` and
``delete`` are one ``EVALSHA`` each (``GET`` of the record, ``SET``/``DEL``,
``SET`` of the record); ``get``/``get_many`` are one GET/MGET. ``open`` loads
the scripts (one pipelined round-trip); after a Redis restart a NOSCRIPT reply
makes redis-py load a script again, once (a NOSCRIPT reply means the script
did not run).

Fairness on a hot key: a process whose compare-and-set loses
:data:`TURN_AFTER` times in a row (another daemon committing the same key back
to back) claims the key's turn, ``{prefix}:{{k}}:turn``, for at most
:data:`TURN_PX` ms; other processes' compare-and-sets on that key then wait
until it has written. Without it, two daemons on one global counter could
starve one another (one request failing after ``update_retries`` attempts).

Connections: redis-py's pools do not queue cheaply (its blocking pool costs
about a third of a command's client CPU; its plain pool and its cluster client
fail when they run out), so the store itself lets at most
``max_connections`` operations be in flight at once and queues the rest
(waiting up to the URL's ``timeout``, by default ``socket_timeout``) in front
of a plain pool with a few spare connections (a batch of pipelined writes, the
cluster client's own layout refreshes). On one Redis, each turn of that gate
is a "lane": a client that keeps one pooled connection for itself, so a
command pays neither the pool's get nor its release (about a sixth of a
command's client CPU); a cancelled or failed command disconnects its lane's
connection, which reconnects on its next command, as a pooled one would.

The URL's ``max_connections``, ``timeout``, ``socket_timeout`` and
``socket_connect_timeout`` are the store's own settings; other query
parameters go to redis-py.

Memory: each write leaves one small record key for ``op_ttl`` seconds, so
Redis holds about (writes per second × ``op_ttl``) records — about 100 bytes
each — on top of the data.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import random
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit, urlunsplit

from redis.asyncio import Connection, ConnectionPool, Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.commands.core import AsyncScript
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisClusterException, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from tmy.errors import StoreError
from tmy.store.base import MISSING
from tmy.store.codec import check_key, check_ttl, decode, encode
from tmy.store.leases import (
    LEASE_TTL,
    KeyedLocks,
    Lease,
    check_fence,
    hold_lease,
    holder_is_gone,
    lease_ttl_option,
    lost_in_store,
    new_token,
)

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

# KEYS: the value, the write record, the key's turn. ARGV: expect ('1' a value /
# '0' absence), expected raw, op ('s' set / 'd' delete), new raw, PX milliseconds
# ('0' keeps the current expiry), attempt number, record PX milliseconds, this
# store's turn token.
# Returns the number of the attempt that applied this operation — this one, or an
# earlier copy or attempt whose reply was lost — else {current raw} ({} when absent),
# or {'', '', ms} when another process holds the key's turn for ms more milliseconds.
_CAS = """
if not redis.call('SET', KEYS[2], ARGV[6], 'NX', 'PX', ARGV[7]) then
  return tonumber(redis.call('GET', KEYS[2]))
end
local turn = redis.call('GET', KEYS[3])
if turn and turn ~= ARGV[8] then
  redis.call('DEL', KEYS[2])
  return {'', '', redis.call('PTTL', KEYS[3])}
end
local cur = redis.call('GET', KEYS[1])
local stale
if ARGV[1] == '1' then stale = cur ~= ARGV[2] else stale = cur ~= false end
if stale then
  redis.call('DEL', KEYS[2])
  if cur then return {cur} end
  return {}
end
if ARGV[3] == 'd' then
  if cur then redis.call('DEL', KEYS[1]) end
elseif ARGV[5] ~= '0' then
  redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[5])
else
  redis.call('SET', KEYS[1], ARGV[4], 'KEEPTTL')
end
return tonumber(ARGV[6])
"""
# KEYS: the value, the write record. ARGV: op ('s' set / 'd' delete), raw,
# PX milliseconds ('0' never expires), record PX milliseconds.
# Returns 1 for a set, the number of keys removed for a delete — recorded, so a
# resent copy returns what the first one did and writes nothing.
_PUT = """
local done = redis.call('GET', KEYS[2])
if done then return tonumber(done) end
local result = 1
if ARGV[1] == 'd' then
  result = redis.call('DEL', KEYS[1])
elseif ARGV[3] ~= '0' then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
else
  redis.call('SET', KEYS[1], ARGV[2])
end
redis.call('SET', KEYS[2], result, 'PX', ARGV[4])
return result
"""
# ARGV: token, PX. Returns 0 when the lease is ours, else {remaining ms, holder's token}.
_TAKE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then return 0 end
local left = redis.call('PTTL', KEYS[1])
if left < 1 then left = 1 end
return {left, holder}
"""
# ARGV: token. Deletes the lease only if it holds that token.
_GIVE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# ARGV: token, PX. Extends the lease only if it holds that token; 1 when extended.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""

# KEYS: the write record, then N lease keys, then the keys written. ARGV: N,
# record PX milliseconds, the N lease tokens, then per key written: op ('s' set /
# 'd' delete), raw, PX milliseconds ('0' never expires).
# Returns 0 when applied (by this copy or an earlier one whose reply was lost),
# else i: the i-th lease no longer holds its token (nothing was written).
_COMMIT = """
if redis.call('GET', KEYS[1]) then return 0 end
local n = tonumber(ARGV[1])
for i = 1, n do
  if redis.call('GET', KEYS[1 + i]) ~= ARGV[2 + i] then return i end
end
local a = 3 + n
for j = 2 + n, #KEYS do
  if ARGV[a] == 'd' then
    redis.call('DEL', KEYS[j])
  elseif ARGV[a + 2] ~= '0' then
    redis.call('SET', KEYS[j], ARGV[a + 1], 'PX', ARGV[a + 2])
  else
    redis.call('SET', KEYS[j], ARGV[a + 1])
  end
  a = a + 3
end
redis.call('SET', KEYS[1], '1', 'PX', ARGV[2])
return 0
"""

TURN_AFTER = 3  # compare-and-sets lost in a row before a process claims the key's turn
TURN_PX = 2000  # how long a claimed turn lasts at most (a dead claimer blocks no longer)
TURN_WAIT = 30.0  # seconds an update waits, in all, while other processes hold turns

OP_RECORD_TTL = 60.0
"""Seconds (at least) a write's record is kept to recognise resent copies of it."""

_REDIS_RETRIES = 3  # redis-py resends a timed-out or cut command this many times
_SPARE_CONNECTIONS = 8  # pooled connections beyond the gate's (see the module doc)
# URL query parameters the store reads itself (the rest go to redis-py)
_OWN_OPTIONS = (
    "max_connections",
    "timeout",
    "socket_timeout",
    "socket_connect_timeout",
    "lease_ttl",
)


def _positive(name: str, value: Any, url: str) -> float:
    """A connection option (from the URL or the arguments): a positive number, else StoreError."""
    try:
        number = float(value) if not isinstance(value, bool) else 0.0
    except (TypeError, ValueError):
        number = 0.0
    whole = name != "max_connections" or number.is_integer()
    if not (number > 0 and math.isfinite(number) and whole):
        kind = "a whole number" if name == "max_connections" else "a number of seconds"
        raise StoreError(f"store {url!r}: {name} must be {kind} above 0, not {value!r}")
    return number


def _px(seconds: float) -> int:
    return max(1, math.ceil(seconds * 1000))


def _glob_escape(text: str) -> str:
    """``text`` matched literally by SCAN MATCH."""
    return "".join("\\" + c if c in "\\*?[]" else c for c in text)


try:  # hiredis (the ``redis[hiredis]`` extra) and a redis-py that packs with it
    import hiredis
    from redis.connection import HiredisRespSerializer
    from redis.utils import HIREDIS_AVAILABLE

    HIREDIS_AVAILABLE = HIREDIS_AVAILABLE and hasattr(hiredis, "pack_command")
    _PACKER = HiredisRespSerializer()
except ImportError:
    HIREDIS_AVAILABLE = False


class _Connection(Connection):
    """redis-py's connection, minus a timer task for each command it sends, and
    packing commands with hiredis (as redis-py's sync connection does) when it
    is installed.

    redis-py bounds every write with ``asyncio.wait_for`` (on Python 3.11 a new
    task and two more turns of the event loop per command, about an eighth of
    a command's client CPU). A write into an empty socket buffer that fits
    under the transport's high-water mark cannot wait at all, so it needs no
    timer: such writes go through redis-py's own untimed branch (same error
    handling); any other write is bounded as before. Reads keep their timeout.
    """

    if HIREDIS_AVAILABLE:  # the sync client packs in C; redis-py's asyncio one in Python

        def pack_command(self, *args: Any) -> list[bytes]:
            return _PACKER.pack(*args)

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        writer = self._writer
        if (
            writer is None
            or self.health_check_interval
            or not isinstance(command, list)
            or writer.transport.get_write_buffer_size()
            or sum(map(len, command)) > writer.transport.get_write_buffer_limits()[1]
        ):
            await super().send_packed_command(command, check_health)
            return
        # drain() returns without waiting (nothing can pause the transport), so
        # nothing else runs on this connection while its timeout is lifted
        timeout, self.socket_timeout = self.socket_timeout, None
        try:
            await super().send_packed_command(command, check_health)
        finally:
            self.socket_timeout = timeout


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
    _put: AsyncScript
    _take: AsyncScript
    _give: AsyncScript
    _renew: AsyncScript
    _commit_script: AsyncScript

    _SCHEMES = ("redis", "rediss")
    _REFRESH_COST = 0  # connect+reply rounds a resend may wait for besides its own (see op_ttl)
    _PIPELINED_WRITES = True  # writes queued behind one in flight go as one pipeline

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
        """``url``'s ``?prefix=`` overrides ``prefix``, and its ``max_connections``,
        ``timeout`` (the wait for a free connection; default: ``socket_timeout``),
        ``socket_timeout`` and ``socket_connect_timeout`` override the arguments
        (the store sizes its gate and write records by them); other query
        parameters go to redis-py."""
        try:
            parts = urlsplit(url)
        except ValueError as exc:
            raise StoreError(f"invalid Redis URL {url!r}: {exc}") from None
        if parts.scheme not in self._SCHEMES:
            schemes = " or ".join(f"{s}://" for s in self._SCHEMES)
            raise StoreError(f"not a {self._kind()} URL ({schemes}): {url!r}")
        query = parse_qsl(parts.query, keep_blank_values=True)
        rest = [(k, v) for k, v in query if k != "prefix"]
        prefix = next((v for k, v in reversed(query) if k == "prefix"), prefix)
        if not prefix:
            raise StoreError(f"the key prefix may not be empty: {url!r}")
        self.prefix = prefix
        self.url = urlunsplit(parts._replace(query=urlencode([*rest, ("prefix", prefix)])))
        own = {k: v for k, v in rest if k in _OWN_OPTIONS}  # the last one of each wins
        rest = [(k, v) for k, v in rest if k not in _OWN_OPTIONS]
        self.max_connections = int(
            _positive("max_connections", own.get("max_connections", max_connections), url)
        )
        self.socket_timeout = _positive(
            "socket_timeout", own.get("socket_timeout", socket_timeout), url
        )
        self.connect_timeout = _positive(
            "socket_connect_timeout", own.get("socket_connect_timeout", connect_timeout), url
        )
        self.queue_timeout = _positive("timeout", own.get("timeout", self.socket_timeout), url)
        self.lease_ttl = (
            lease_ttl_option(own["lease_ttl"], url) if "lease_ttl" in own else LEASE_TTL
        )
        self.update_retries = update_retries
        self._locate(url, parts, rest)  # sets where and what the client connects to
        # a write's record must outlive every resent copy of it: redis-py sends at
        # most 1 + _REDIS_RETRIES copies, each within a connect and a socket timeout
        # (and, on a cluster, after a refresh of the layout that may cost as much again)
        attempt = (1 + self._REFRESH_COST) * (self.socket_timeout + self.connect_timeout) + 0.5
        self.op_ttl = max(OP_RECORD_TTL, 2 * (1 + _REDIS_RETRIES) * attempt)
        self._op_px = str(_px(self.op_ttl))
        self._turn_token = new_token()  # this store's claim on a hot key's turn
        self._op_base = secrets.token_hex(8)  # this instance's operation ids: base + counter
        self._op_seq = itertools.count(1)
        self._head = f"{prefix}:{{"
        try:  # no I/O: a bad query parameter is refused here rather than at first use
            self._validate()
        except (TypeError, ValueError, RedisClusterException) as exc:
            raise StoreError(f"invalid {self._kind()} URL {url!r}: {exc}") from None
        self._redis: Any = None  # the client (Redis or RedisCluster) while open
        self._gate = asyncio.Semaphore(self.max_connections)  # bounds operations in flight
        self._lanes: list[Any] = []  # idle single-connection clients (see _lane)
        # recorded writes (set/delete) waiting while one is in flight: sent as one pipeline
        self._put_queue: list[tuple[list[str], tuple[Any, ...], asyncio.Future[Any]]] = []
        self._putting = False
        self._put_task: asyncio.Task[None] | None = None  # the pipeline sender (kept referenced)
        self._cache = _RawCache(cache_keys)
        self._batches: dict[str, list[_Job]] = {}
        self._leases = KeyedLocks()

    @classmethod
    def _kind(cls) -> str:
        return "Redis"

    def _locate(self, url: str, parts: SplitResult, rest: list[tuple[str, str]]) -> None:
        """Set ``where`` (for messages) and the URL redis-py connects to."""
        try:
            host, port = parts.hostname or "localhost", parts.port or 6379
        except ValueError as exc:
            raise StoreError(f"invalid Redis URL {url!r}: {exc}") from None
        self.where = f"redis at {host}:{port}"
        self._connect_url = urlunsplit(parts._replace(query=urlencode(rest)))

    def _validate(self) -> None:
        """Build (without I/O) what open() would, so a bad option fails now."""
        self._pool().make_connection()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.where!r}, prefix={self.prefix!r})"

    def _k(self, key: str) -> str:
        check_key(key)
        return f"{self._head}{key}}}"

    def _op(self, rkey: str) -> str:
        """A new write record key for ``rkey``, in its hash slot."""
        return f"{rkey}:op:{self._op_base}{next(self._op_seq):x}"

    def _r(self) -> Any:
        if self._redis is None:
            raise StoreError(f"{self.where}: the store is not open (await store.open())")
        return self._redis

    def _pool(self) -> ConnectionPool:
        """A new pool (one per open: asyncio objects belong to the loop that first uses them).

        The gate (:meth:`_io`) keeps the operations in flight at ``max_connections``;
        the spare connections are for the pipeline of queued writes.
        """
        return ConnectionPool.from_url(
            self._connect_url,
            connection_class=_Connection,  # rediss:// URLs keep redis-py's SSLConnection
            max_connections=self.max_connections + _SPARE_CONNECTIONS,
            socket_timeout=self.socket_timeout,
            socket_connect_timeout=self.connect_timeout,
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), retries=_REDIS_RETRIES),
            retry_on_error=[RedisConnectionError, RedisTimeoutError],
        )

    @contextmanager
    def _failing(self, what: str) -> Iterator[None]:
        """Re-raise any Redis failure as StoreError naming the server and the operation."""
        try:
            yield
        except (RedisError, RedisClusterException, OSError) as exc:
            raise StoreError(f"{self.where}: {what} failed: {exc}") from exc

    @asynccontextmanager
    async def _io(self, what: str) -> AsyncIterator[Any]:
        """Around the commands of one operation: failures as StoreError (see
        :meth:`_failing`), a turn among at most ``max_connections`` in flight
        and the client to send them with (see the module doc on connections)."""
        client, lanes = self._r(), self._lanes
        with self._failing(what):
            gate = self._gate
            if gate.locked():  # all taken: queue, for at most queue_timeout
                try:
                    async with asyncio.timeout(self.queue_timeout):
                        await gate.acquire()
                except TimeoutError:
                    raise StoreError(
                        f"{self.where}: {what} failed: no free connection after "
                        f"{self.queue_timeout:g}s ({self.max_connections} commands in flight)"
                    ) from None
            else:  # the usual case: a free turn, taken without a timer
                await gate.acquire()
            if self._redis is not client:  # closed (perhaps reopened) while this waited
                gate.release()
                self._r()  # raises "not open" if it is closed
                raise StoreError(f"{self.where}: {what} failed: the store was reopened")
            lane = lanes.pop() if lanes else self._lane(client)
            try:
                yield lane
            finally:
                gate.release()
                if self._redis is client:
                    lanes.append(lane)
                elif lane is not client:  # closed meanwhile: give its connection back
                    await lane.aclose()

    def _lane(self, client: Any) -> Any:
        """A client that keeps one pooled connection for itself (redis-py's
        ``single_connection_client``): its commands skip the pool's get and
        release. There are at most ``max_connections`` (one per turn of the
        gate); :meth:`close` gives their connections back."""
        return Redis(connection_pool=client.connection_pool, single_connection_client=True)

    # -- lifecycle --------------------------------------------------------------

    def _client(self) -> Any:
        """A new client (one per open: asyncio objects belong to the loop that first uses them)."""
        return Redis.from_pool(self._pool())

    async def _prepare(self, client: Any, scripts: Sequence[AsyncScript]) -> None:
        """Load the scripts: one round-trip, which also proves Redis answers."""
        pipe = client.pipeline(transaction=False)
        for script in scripts:
            pipe.script_load(script.script)
        await pipe.execute()

    async def open(self) -> None:
        """Connect, load the scripts (proving Redis answers); idempotent."""
        if self._redis is not None:
            return
        self._gate = asyncio.Semaphore(self.max_connections)  # of this loop
        self._lanes = []
        client = self._client()
        self._cas = client.register_script(_CAS)
        self._put = client.register_script(_PUT)
        self._take = client.register_script(_TAKE)
        self._give = client.register_script(_GIVE)
        self._renew = client.register_script(_RENEW)
        self._commit_script = client.register_script(_COMMIT)
        scripts = (self._cas, self._put, self._take, self._give, self._renew, self._commit_script)
        try:
            with self._failing("connect"):
                await self._prepare(client, scripts)
        except BaseException:
            await client.aclose()
            raise
        self._redis = client

    async def close(self) -> None:
        """Close every pooled connection; idempotent."""
        client, self._redis = self._redis, None
        lanes, self._lanes = self._lanes, []
        if client is not None:
            with self._failing("close"):
                for lane in lanes:
                    if lane is not client:
                        await lane.aclose()  # gives its connection back to the pool
                await client.aclose()

    async def ping(self) -> None:
        """Raise StoreError unless Redis answers PING."""
        async with self._io("ping") as redis:
            await redis.ping()

    # -- values -----------------------------------------------------------------

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
        raw = encode(value, key)
        px = _ttl_arg(ttl)
        await self._recorded(f"set {key!r}", [rkey, self._op(rkey)], ("s", raw, px, self._op_px))
        self._cache.put(rkey, raw)

    async def delete(self, key: str) -> bool:
        """Remove ``key`` (one EVALSHA: a recorded DEL); True when something was removed."""
        rkey = self._k(key)
        args = ("d", b"", "0", self._op_px)
        removed = await self._recorded(f"delete {key!r}", [rkey, self._op(rkey)], args)
        self._cache.put(rkey, None)
        return bool(removed)

    async def _recorded(self, what: str, keys: list[str], args: tuple[Any, ...]) -> Any:
        """Run the recorded-write script (set/delete): at once when no other one is in
        flight, else with the others that arrive meanwhile, in one pipeline.

        Sixty-four runs each saving a variable cost one round-trip, not sixty-four,
        and a lone write waits for nothing. Each write keeps its own record, so a
        resent pipeline applies nothing twice. On a cluster (keys on several
        nodes) every write goes on its own.
        """
        if not self._PIPELINED_WRITES:
            async with self._io(what) as redis:
                return await self._put(keys=keys, args=args, client=redis)
        if self._putting:
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._put_queue.append((keys, args, future))
            return await future
        self._putting = True
        try:
            async with self._io(what) as redis:
                return await self._put(keys=keys, args=args, client=redis)
        finally:
            if self._put_queue:  # others arrived meanwhile: one pipeline for all of them
                self._put_task = asyncio.get_running_loop().create_task(self._send_queued())
            else:
                self._putting = False

    async def _send_queued(self) -> None:
        try:
            while self._put_queue:
                batch, self._put_queue = self._put_queue, []
                try:
                    with self._failing(f"{len(batch)} writes"):
                        pipe = self._r().pipeline(transaction=False)
                        for keys, args, _ in batch:
                            pipe.evalsha(self._put.sha, len(keys), *keys, *args)
                        results = await pipe.execute(raise_on_error=False)
                except StoreError as exc:
                    for *_, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (keys, args, future), result in zip(batch, results, strict=True):
                    if future.done():
                        continue
                    if isinstance(result, NoScriptError):  # Redis restarted: load, send alone
                        try:
                            async with self._io("write") as redis:
                                result = await self._put(keys=keys, args=args, client=redis)
                        except StoreError as exc:
                            result = exc
                    if isinstance(result, BaseException):
                        error = (
                            result
                            if isinstance(result, StoreError)
                            else StoreError(f"{self.where}: write failed: {result}")
                        )
                        future.set_exception(error)
                    else:
                        future.set_result(result)
        finally:
            self._putting = False

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
        """Apply a batch of update functions with one compare-and-set; settle their futures.

        Every attempt of this batch carries the same write record and its own
        number; whichever attempt Redis applied first is the one the callers
        hear about, even when the reply that reaches us belongs to a resent
        copy or a later attempt (see the module doc).
        """
        rkey = self._k(key)
        record = self._op(rkey)
        turn = rkey + ":turn"
        sent: dict[int, tuple[list[tuple[_Job, BaseException | None, Any]], bytes | None]] = {}
        expected = self._cache.get(rkey)  # a guess; absent when unknown
        verified = False  # True once ``expected`` was read from Redis during this commit
        lost = 0  # compare-and-sets lost to other processes
        holding_turn = False
        waited_until = time.monotonic() + TURN_WAIT
        try:
            attempt = 0
            while attempt < self.update_retries:
                attempt += 1
                outcomes, raw, guess_failed = _apply(batch, expected, key, verified)
                if guess_failed:
                    # fn (or encoding) failed on a guessed value: fail only if it is real
                    async with self._io(f"update {key!r}") as redis:
                        actual = await redis.get(rkey)
                    verified = True
                    if actual != expected:
                        expected = actual
                        self._cache.put(rkey, expected)
                        continue
                    outcomes, raw, _ = _apply(batch, expected, key, True)
                if raw == expected and verified and not sent:
                    _settle(outcomes)  # no change to a value read from Redis: nothing to write
                    return
                px = next((j.px for j, exc, _ in reversed(outcomes) if exc is None), "0")
                number = len(sent) + 1
                sent[number] = (outcomes, raw)
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
                async with self._io(f"update {key!r}") as redis:
                    reply = await self._cas(keys=[rkey, record, turn], args=args, client=redis)
                if isinstance(reply, int):  # applied, by this attempt or an earlier one
                    if reply not in sent:
                        raise StoreError(
                            f"{self.where}: update {key!r}: the write record names attempt "
                            f"{reply}, which this process never sent (operation id clash?)"
                        )
                    applied, written = sent[reply]
                    self._cache.put(rkey, written)
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
                expected = reply[0] if reply else None  # written elsewhere meanwhile
                verified = True
                self._cache.put(rkey, expected)
                lost += 1
                if lost >= TURN_AFTER and not holding_turn:
                    # A process that keeps losing (another daemon commits this key back
                    # to back) claims the key's turn: others' compare-and-sets wait
                    # until it has written, so no daemon starves on a hot key.
                    async with self._io(f"update {key!r}") as redis:
                        holding_turn = bool(
                            await redis.set(turn, self._turn_token, nx=True, px=TURN_PX)
                        )
                elif attempt >= 2:  # a busy key: spread the contenders out a little
                    await asyncio.sleep(random.uniform(0, min(0.05, 0.0005 * 2**attempt)))
            raise StoreError(
                f"{self.where}: update {key!r} gave up after {self.update_retries} "
                "attempts: other processes kept changing it"
            )
        except Exception as exc:
            for job in batch:
                if not job.future.done():
                    job.future.set_exception(exc)
        finally:
            if holding_turn:
                try:
                    async with self._io(f"update {key!r}") as redis:
                        await self._give(keys=[turn], args=(self._turn_token,), client=redis)
                except StoreError:
                    pass  # the turn expires by itself within TURN_PX milliseconds

    async def _mget(self, redis: Any, rkeys: list[str]) -> list[bytes | None]:
        return await redis.mget(rkeys)

    async def keys(self, prefix: str) -> list[str]:
        """Every live key starting with ``prefix``, sorted (SCAN MATCH, glob-escaped)."""
        pattern = _glob_escape(self._head) + _glob_escape(prefix) + "*"
        head = len(self._head.encode())
        found: set[str] = set()
        async with self._io(f"keys {prefix!r}") as redis:
            async for rkey in redis.scan_iter(match=pattern, count=1000):
                if rkey.endswith(b"}"):  # lock keys end in ":lock", write records in ":op:…"
                    key = rkey[head:-1].decode()
                    if key.startswith(prefix):  # "a}" also matches the key of "a"
                        found.add(key)
        return sorted(found)

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
            raw = None if value is MISSING else encode(value, key)
            wkeys.append(rkey)
            raws.append(raw)
            args += ["d", b"", "0"] if raw is None else ["s", raw, _ttl_arg(ttl)]
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
        args = (token, _px(ttl))

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


class RedisClusterStore(RedisStore):
    """A :class:`~tmy.store.base.Store` on a Redis Cluster (``redis+cluster://`` or
    ``rediss+cluster://`` URL naming one or more of its nodes, comma-separated).

    The same layout, scripts and guarantees as :class:`RedisStore`; see the
    module doc for what differs on a cluster.
    """

    _SCHEMES = ("redis+cluster", "rediss+cluster")
    _REFRESH_COST = 1  # a resend may first wait for a refresh of the cluster layout
    _PIPELINED_WRITES = False  # queued writes may be on several nodes: each goes alone

    @classmethod
    def _kind(cls) -> str:
        return "Redis Cluster"

    def _locate(self, url: str, parts: SplitResult, rest: list[tuple[str, str]]) -> None:
        if "{" in self.prefix or "}" in self.prefix:
            raise StoreError(
                f"the key prefix may not contain '{{' or '}}' on a Redis Cluster "
                f"(it would change the hash slots of the keys): {url!r}"
            )
        userinfo, at, hosts = parts.netloc.rpartition("@")
        nodes: list[tuple[str, int]] = []
        for item in hosts.split(","):
            try:
                node = urlsplit(f"//{item}")
                host, port = node.hostname, node.port or 6379
            except ValueError as exc:
                raise StoreError(f"invalid Redis Cluster URL {url!r}: {exc}") from None
            if not host:
                raise StoreError(
                    f"invalid Redis Cluster URL {url!r}: {item!r} is not host:port "
                    "(name nodes as host:port,host:port)"
                )
            nodes.append((host, port))
        if parts.path not in ("", "/", "/0"):
            raise StoreError(
                f"invalid Redis Cluster URL {url!r}: a cluster has only database 0 "
                f"(drop the path {parts.path!r})"
            )
        self.nodes = nodes
        self.where = "redis cluster at " + ",".join(
            f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in nodes
        )
        # redis-py reads credentials, TLS and options from a one-node URL; the
        # other nodes are extra startup nodes (any one that answers is enough)
        scheme = parts.scheme.removesuffix("+cluster")
        first = hosts.split(",")[0]
        self._connect_url = urlunsplit((scheme, userinfo + at + first, "", urlencode(rest), ""))

    def _validate(self) -> None:
        self._client()

    def _k(self, key: str) -> str:
        check_key(key)
        if key[0] == "}":
            raise StoreError(
                f"store key {key!r} cannot be stored on a Redis Cluster: it starts with '}}', "
                "so its hash tag would be empty and its keys would land in different slots"
            )
        return f"{self._head}{key}}}"

    def _client(self) -> Any:
        return RedisCluster.from_url(
            self._connect_url,
            startup_nodes=[ClusterNode(host, port) for host, port in self.nodes[1:]],
            # per node; the gate keeps the commands in flight below it (a few spare
            # for the client's own layout refreshes)
            max_connections=self.max_connections + _SPARE_CONNECTIONS,
            socket_timeout=self.socket_timeout,
            socket_connect_timeout=self.connect_timeout,
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), retries=_REDIS_RETRIES),
        )

    async def _prepare(self, client: Any, scripts: Sequence[AsyncScript]) -> None:
        """Discover the nodes and slots, load the scripts on every master."""
        await client.initialize()
        for script in scripts:
            await client.script_load(script.script)  # sent to every master

    def _lane(self, client: Any) -> Any:
        return client  # the cluster client picks a node's connection per command

    async def ping(self) -> None:
        """Raise StoreError unless every master answers PING."""
        async with self._io("ping") as redis:
            await redis.ping(target_nodes=RedisCluster.PRIMARIES)

    def _one_slot(self, rkeys: list[str], keys: list[str], leases: list[str]) -> None:
        """Refuse a commit whose keys are in several hash slots (a script runs on one node)."""
        slots = {key_slot(k.encode()) for k in rkeys}
        if len(slots) > 1:
            raise StoreError(
                f"{self.where}: cannot commit keys {keys} fenced by leases {leases} in one "
                f"script: on a Redis Cluster they fall in {len(slots)} hash slots, and one "
                "atomic commit needs them all in one slot"
            )

    async def _mget(self, redis: Any, rkeys: list[str]) -> list[bytes | None]:
        # one MGET per slot (a cluster refuses an MGET across slots), one pipeline per node
        return await redis.mget_nonatomic(rkeys)
