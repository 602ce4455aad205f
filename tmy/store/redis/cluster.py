"""The Redis store on a Redis Cluster (:class:`RedisClusterStore`).

The layout is the same as on one server — data written through a plain
``redis://`` URL reads the same through ``redis+cluster://`` once the keys are
on the cluster, and the reverse. The hash tag ``{k}`` puts a key, its write
records and its lease in one slot, so every script runs on one node. What
differs:

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
* ``snapshot`` reads the keys of one hash slot per script (the scripts of
  several slots in flight at once): a cluster backup is per key — each key's
  value and TTL agree, but keys may be of different moments
  (``Snapshot.point_in_time`` False; a single Redis reads its whole store in
  one script); ``restore``'s pipelines are split per node by redis-py;
* ``rank_sync`` cannot read the value and write the board in one script (they
  are in different slots): it GETs the value, then sets the board
  (:data:`~tmy.store.redis.scripts.RANK_SET`), then GETs the value again and
  repeats if it changed meanwhile (at most :data:`SYNC_ROUNDS` times). Last
  writer wins, checked: a sync whose stale board write lands after a newer
  one sees the newer value on its second GET and writes that; the writer of
  any later change syncs after it. So a board still converges to the values
  when every writer syncs, but between a write and its sync a reader may see
  the board one step behind (also true on one Redis, between the write and
  the sync);
* the prefix may not contain ``{`` or ``}``, and a logical key may not start
  with ``}`` (its hash tag would be empty and its keys would scatter over
  slots); the engine's keys (``var/…``, ``hist/…``, ``cron/…``) never do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import SplitResult, urlencode, urlsplit, urlunsplit

from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.commands.core import AsyncScript
from redis.crc import key_slot

from tmy.errors import StoreError
from tmy.store.base import rank_score, score_out
from tmy.store.codec import check_board, check_key, decode
from tmy.store.redis.boards import name_args
from tmy.store.redis.connection import SPARE_CONNECTIONS, retry_policy
from tmy.store.redis.store import RedisStore
from tmy.store.snapshot import batches

SYNC_ROUNDS = 3
"""Board writes one cluster ``rank_sync`` makes at most while the value keeps changing."""


class RedisClusterStore(RedisStore):
    """A :class:`~tmy.store.base.Store` on a Redis Cluster (``redis+cluster://`` or
    ``rediss+cluster://`` URL naming one or more of its nodes, comma-separated).

    The same layout, scripts and guarantees as :class:`RedisStore`; see the
    module doc of :mod:`tmy.store.redis.cluster` for what differs.
    """

    _SCHEMES = ("redis+cluster", "rediss+cluster")
    _REFRESH_COST = 1  # a resend may first wait for a refresh of the cluster layout
    _PIPELINED_WRITES = False  # queued writes may be on several nodes: each goes alone
    _ONE_SCRIPT_SNAPSHOT = False  # keys on several nodes: a snapshot is per key
    one_slot_commits = True  # a commit's script runs on one node: its keys share one slot

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
            max_connections=self.max_connections + SPARE_CONNECTIONS,
            socket_timeout=self.socket_timeout,
            socket_connect_timeout=self.connect_timeout,
            retry=retry_policy(),
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

    def _groups(self, rkeys: list[str]) -> list[list[str]]:
        """Keys in groups of one hash slot (a script reads one slot), each at most a batch."""
        slots: dict[int, list[str]] = {}
        for rkey in rkeys:
            slots.setdefault(key_slot(rkey.encode()), []).append(rkey)
        return [list(chunk) for group in slots.values() for chunk in batches(group)]

    async def rank_sync(
        self, board: str, member: str, key: str, name: str | None = None
    ) -> float | None:
        """GET the value, set the board, GET again: repeat while the value changed (see
        the module doc)."""
        check_board(board, member)
        zset, names = self._board(board)
        rkey = self._k(key)
        what = f"rank_sync {board!r} {member!r}"
        async with self._io(what) as redis:
            raw = await redis.get(rkey)
        for _ in range(SYNC_ROUNDS):
            score = None if raw is None else rank_score(decode(raw, key))
            text = "" if score is None else raw.decode()
            async with self._io(what) as redis:
                await self._rank_set(
                    keys=[zset, names], args=[member, text, *name_args(name)], client=redis
                )
                again = await redis.get(rkey)
            if again == raw:
                break
            raw = again
        return None if score is None else score_out(score)
