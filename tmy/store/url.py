"""Turn a store URL from the config into a (not yet opened) store.

Accepted forms, SQLAlchemy style for SQLite so the URLs look familiar:

* ``sqlite:///data/tmy.db`` — three slashes: a path relative to ``base_dir``
  (the config's directory when the daemon calls this; the working directory
  otherwise);
* ``sqlite:////var/lib/tmy/tmy.db`` — four slashes: an absolute path;
* ``sqlite:///:memory:`` — a private in-memory database (tests, one-off runs);
* ``redis://[user:password@]host:port/db`` and ``rediss://…`` (TLS), with an
  optional ``?prefix=name`` for the key prefix (default ``tmy``);
* ``redis+cluster://[user:password@]host:port[,host2:port2…]/`` and
  ``rediss+cluster://…`` (TLS) for a Redis Cluster: one or more of its nodes
  (any one that answers is enough to find the rest), database 0 only, the same
  ``?prefix=``.

The SQLite path is taken literally (no ``~`` expansion, no percent-decoding)
and SQLite URLs take one query parameter only, ``?lease_ttl=<seconds>`` (any
other is refused, so a typo cannot silently pick another file). Every backend
reads ``?lease_ttl=``: the default length of ``Store.lock``'s leases (5 s),
i.e. how long a paused or dead holder can keep others waiting; tests set it
short.
"""

from __future__ import annotations

from pathlib import Path

from tmy.config.store import ACCEPTED, parse_store_url
from tmy.errors import ConfigError, StoreError
from tmy.store.base import Store
from tmy.store.codec import MAX_VALUE_BYTES
from tmy.store.leases import lease_ttl_option
from tmy.store.sqlite import SQLiteStore


def open_store(
    url: str, base_dir: Path | None = None, *, max_value_bytes: int = MAX_VALUE_BYTES
) -> Store:
    """The store ``url`` names, not yet opened (the caller awaits ``.open()``).

    ``max_value_bytes``: the largest encoded value it takes (``limits.max_value_bytes``).
    Raises ConfigError, listing the accepted forms, for anything else. The URL's
    syntax is :func:`tmy.config.store.parse_store_url`'s (the config checked it at
    load); this adds the SQLite file's place, the lease length and the Redis parse.
    """
    parsed = parse_store_url(url)
    if parsed.scheme == "sqlite":
        path = _sqlite_file(parsed.path, base_dir)
        if parsed.lease_ttl is None:
            return SQLiteStore(path, max_value_bytes=max_value_bytes)
        try:
            lease_ttl = lease_ttl_option(parsed.lease_ttl, url)
        except StoreError as exc:
            raise ConfigError(str(exc)) from None
        return SQLiteStore(path, lease_ttl=lease_ttl, max_value_bytes=max_value_bytes)
    # deferred: redis-py alone adds ~0.17 s to start-up, which a SQLite
    # deployment (the default) need not pay
    from tmy.store.redis import RedisClusterStore, RedisStore

    backend = RedisClusterStore if parsed.scheme.endswith("+cluster") else RedisStore
    try:
        return backend(url, max_value_bytes=max_value_bytes)
    except StoreError as exc:
        raise ConfigError(f"{exc}; {ACCEPTED}") from None


def _sqlite_file(path: str, base_dir: Path | None) -> Path | str:
    """The SQLite database a URL's path names: ``:memory:``, absolute, or below ``base_dir``."""
    if path == ":memory:":
        return path
    if path.startswith("/"):
        return Path(path)
    return (base_dir if base_dir is not None else Path.cwd()) / path
