"""The Redis store's link to Redis: its URL options, pool, gate and lanes, open and close.

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

Failures: redis-py reconnects on the next command after a Redis restart (a
command on a dead pooled connection fails and is retried on a new one) and
retries connection errors and timeouts 3 times with capped exponential
backoff; connect and socket timeouts are a few seconds, so nothing hangs: a
stopped server fails a call in under a second, a frozen one after at most
about 4 × ``socket_timeout``. Every Redis failure surfaces as
``StoreError("redis at host:port: …")`` (``redis cluster at host:port,…`` on a
cluster), never as a redis-py exception.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import secrets
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit, urlunsplit

from redis.asyncio import ConnectionPool, Redis
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from tmy.errors import StoreError
from tmy.store.base import FORMAT_KEY, STORE_FORMAT, check_format
from tmy.store.claims import ClaimBatcher
from tmy.store.codec import MAX_VALUE_BYTES, check_key, decode, encode
from tmy.store.leases import LEASE_TTL, KeyedLocks, lease_ttl_option, new_token
from tmy.store.redis.cache import RawCache
from tmy.store.redis.connection import (
    REDIS_RETRIES,
    SPARE_CONNECTIONS,
    TunedConnection,
    retry_policy,
)
from tmy.store.redis.scripts import (
    CAS,
    COMMIT,
    GIVE,
    PUT,
    RANK_ENTRY,
    RANK_OF,
    RANK_PAGE,
    RANK_SET,
    RANK_SYNC,
    RANK_TOP,
    RENEW,
    SNAP,
    SNAP_ALL,
    TAKE,
    px,
)
from tmy.store.redis.version import check_version

if TYPE_CHECKING:
    from tmy.store.redis.group_commit import Job

OP_RECORD_TTL = 60.0
"""Seconds (at least) a write's record is kept to recognise resent copies of it."""

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


class RedisLanes:
    """The link to Redis under every Redis store: options, gate and lanes, lifecycle.

    It also holds the state of the layers above it (the raw-value cache and
    update batches of :class:`~tmy.store.redis.group_commit.GroupCommit`, the
    queued writes and leases of :class:`~tmy.store.redis.RedisStore`), so the
    one constructor below stays the store's documented signature.
    """

    _cas: AsyncScript  # the scripts, registered by open()
    _put: AsyncScript
    _take: AsyncScript
    _give: AsyncScript
    _renew: AsyncScript
    _commit_script: AsyncScript
    _snap: AsyncScript
    _snap_all: AsyncScript
    _rank_sync: AsyncScript
    _rank_set: AsyncScript
    _rank_top: AsyncScript
    _rank_of: AsyncScript
    _rank_entry: AsyncScript
    _rank_page: AsyncScript

    _SCHEMES = ("redis", "rediss")
    _REFRESH_COST = 0  # connect+reply rounds a resend may wait for besides its own (see op_ttl)

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
        max_value_bytes: int = MAX_VALUE_BYTES,
    ) -> None:
        """``url``'s ``?prefix=`` overrides ``prefix``, and its ``max_connections``,
        ``timeout`` (the wait for a free connection; default: ``socket_timeout``),
        ``socket_timeout`` and ``socket_connect_timeout`` override the arguments
        (the store sizes its gate and write records by them); other query
        parameters go to redis-py. ``max_value_bytes``: the largest encoded value it
        takes (``limits.max_value_bytes``)."""
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
        self.max_value_bytes = max_value_bytes
        self._locate(url, parts, rest)  # sets where and what the client connects to
        # a write's record must outlive every resent copy of it: redis-py sends at
        # most 1 + REDIS_RETRIES copies, each within a connect and a socket timeout
        # (and, on a cluster, after a refresh of the layout that may cost as much again)
        attempt = (1 + self._REFRESH_COST) * (self.socket_timeout + self.connect_timeout) + 0.5
        self.op_ttl = max(OP_RECORD_TTL, 2 * (1 + REDIS_RETRIES) * attempt)
        self._op_px = str(px(self.op_ttl))
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
        # recorded writes (set/delete, compare-and-sets) waiting while one is in flight:
        # sent as one pipeline (tmy.store.redis.pipelined)
        self._put_queue: list[tuple[Any, list[str], tuple[Any, ...], asyncio.Future[Any]]] = []
        self._putting = False
        self._put_task: asyncio.Task[None] | None = None  # the pipeline sender (kept referenced)
        self._cache = RawCache(cache_keys)
        self._batches: dict[str, list[Job]] = {}
        self._leases = KeyedLocks()
        self._claims = ClaimBatcher(self._claim_batch)  # type: ignore[attr-defined]

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

    def _board(self, board: str) -> tuple[str, str]:
        """A board's sorted set and hash of names: ``{prefix}:rank:{board}`` and
        ``{prefix}:rank-names:{board}`` (one hash slot; outside the value keys' ``{prefix}:{``)."""
        tail = self._k(board)[len(self._head) :]  # the checks of a key (a cluster's too)
        return f"{self.prefix}:rank:{{{tail}", f"{self.prefix}:rank-names:{{{tail}"

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
            connection_class=TunedConnection,  # rediss:// URLs keep redis-py's SSLConnection
            max_connections=self.max_connections + SPARE_CONNECTIONS,
            socket_timeout=self.socket_timeout,
            socket_connect_timeout=self.connect_timeout,
            retry=retry_policy(),
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
        self._cas = client.register_script(CAS)
        self._put = client.register_script(PUT)
        self._take = client.register_script(TAKE)
        self._give = client.register_script(GIVE)
        self._renew = client.register_script(RENEW)
        self._commit_script = client.register_script(COMMIT)
        self._snap = client.register_script(SNAP)
        self._snap_all = client.register_script(SNAP_ALL)
        self._rank_sync = client.register_script(RANK_SYNC)
        self._rank_set = client.register_script(RANK_SET)
        self._rank_top = client.register_script(RANK_TOP)
        self._rank_of = client.register_script(RANK_OF)
        self._rank_entry = client.register_script(RANK_ENTRY)
        self._rank_page = client.register_script(RANK_PAGE)
        scripts = (
            self._cas,
            self._put,
            self._take,
            self._give,
            self._renew,
            self._commit_script,
            self._snap,
            self._snap_all,
            self._rank_sync,
            self._rank_set,
            self._rank_top,
            self._rank_of,
            self._rank_entry,
            self._rank_page,
        )
        try:
            with self._failing("connect"):
                await self._prepare(client, scripts)
                check_version(await client.info("server"), self.where)
                await self._mark_format(client)
        except BaseException:
            await client.aclose()
            raise
        self._redis = client

    async def _mark_format(self, client: Any) -> None:
        """Write the format marker when absent (SET NX: a resent copy changes nothing);
        refuse a store a newer tmy wrote."""
        rkey = self._k(FORMAT_KEY)
        await client.set(rkey, encode({"format": STORE_FORMAT}), nx=True)
        raw = await client.get(rkey)
        check_format(None if raw is None else decode(raw, FORMAT_KEY), self.where)

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
