"""The production store: Redis, shared by several daemons, one round-trip per operation.

One server (``redis://``, ``rediss://``: :class:`RedisStore`) or a Redis Cluster
(``redis+cluster://``, ``rediss+cluster://``: :class:`RedisClusterStore`), with
the same key layout on both. Layout (a key, its lock and its write records share
one hash slot, so every script's keys live on one cluster node):

* logical key ``k`` → ``{prefix}:{{k}}`` holding the JSON text (a plain string);
* its lease → ``{prefix}:{{k}}:lock`` holding the holder's token;
* a record of each write recently applied to it →
  ``{prefix}:{{k}}:op:<operation id>`` (a short string, expiring after
  ``op_ttl`` seconds — :data:`OP_RECORD_TTL`, 60, or more with long timeouts);
* the format marker → ``{prefix}:{{tmy/format}}`` (``{"format": 1}``, written by
  ``open`` with SET NX; a newer format is refused);
* a leaderboard board ``b`` → ``{prefix}:rank:{{b}}`` (a sorted set: member →
  score) and ``{prefix}:rank-names:{{b}}`` (a hash: member → name), one slot.

The prefix is ``tmy`` unless the constructor or a ``?prefix=`` URL parameter
(which wins) says otherwise, so several deployments can share one database.

**Every write is applied at most once.** redis-py resends a command whose reply
did not arrive in time (Redis stalled past ``socket_timeout``, a connection cut
after the command ran), and Redis then runs every copy it received — a SHIFT
would hand out one item and silently drop the next. So each write (``update``,
``set``, ``delete``, ``commit``) is a script carrying an operation id; the
script records the id (with a TTL, next to the key) when it applies the write,
and a copy that finds the record applies nothing and returns what the first
copy did. A call that returns was applied exactly once; a call that raises
StoreError was applied once or not at all. Needs Redis ≥ 7.0 (a claim's ``SET … NX
GET``; ``ZMSCORE``, 6.2, in the memory index; ``KEEPTTL``, 6.0): ``open()`` reads
``INFO server`` and refuses an older server with a StoreError naming the version needed
(:mod:`~tmy.store.redis.version`).

The package, bottom up (each module's docstring says the rest):

* :mod:`~tmy.store.redis.scripts` — the Lua scripts and their arguments;
* :mod:`~tmy.store.redis.connection` — redis-py's connection, tuned; retries;
* :mod:`~tmy.store.redis.lanes` — URL options, the gate and its lanes, open/close,
  how failures surface;
* :mod:`~tmy.store.redis.cache` — the last raw value seen per key (the CAS guess);
* :mod:`~tmy.store.redis.group_commit` — ``update``: batched compare-and-set,
  a hot key's turn;
* :mod:`~tmy.store.redis.pipelined` — recorded writes (``set``/``delete`` and the
  compare-and-sets of different keys) queued while one is in flight, sent as one
  pipeline;
* :mod:`~tmy.store.redis.boards` — leaderboard boards (sorted sets);
* :mod:`~tmy.store.redis.snapshots` — ``snapshot`` (one Redis: one script, one
  point in time, up to a size; else SCAN, value and TTL read together per key)
  and ``restore`` (pipelined; board entries re-synced from their values);
* :mod:`~tmy.store.redis.store` — :class:`RedisStore`: values, recorded writes,
  fenced commits, locks;
* :mod:`~tmy.store.redis.cluster` — :class:`RedisClusterStore` and what differs.

Counting round-trips with ``INFO commandstats``: Redis counts the commands a
script runs as commands too. One ``update`` is one ``EVALSHA`` (inside it:
``SET NX`` of the write record, ``GET`` of the key's turn, ``GET`` and ``SET``
of the value); ``set`` and ``delete`` are one ``EVALSHA`` each (``GET`` of the
record, ``SET``/``DEL``, ``SET`` of the record); ``get``/``get_many`` are one
GET/MGET. ``open`` loads the scripts (one pipelined round-trip), reads the server's
version (``INFO server``) and checks the format marker (two more: SET NX, GET); after a Redis
restart a NOSCRIPT reply makes redis-py load a script again, once (a NOSCRIPT
reply means the script did not run).

Memory: each write leaves one small record key for ``op_ttl`` seconds, so
Redis holds about (writes per second × ``op_ttl``) records — about 100 bytes
each — on top of the data.
"""

from tmy.store.redis.cluster import RedisClusterStore
from tmy.store.redis.group_commit import TURN_AFTER, TURN_PX, TURN_WAIT
from tmy.store.redis.lanes import OP_RECORD_TTL
from tmy.store.redis.store import RedisStore

__all__ = [
    "OP_RECORD_TTL",
    "TURN_AFTER",
    "TURN_PX",
    "TURN_WAIT",
    "RedisClusterStore",
    "RedisStore",
]
