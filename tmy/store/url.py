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
from urllib.parse import parse_qsl

from tmy.errors import ConfigError, StoreError
from tmy.store.base import Store
from tmy.store.codec import MAX_VALUE_BYTES
from tmy.store.leases import lease_ttl_option
from tmy.store.sqlite import SQLiteStore

_ACCEPTED = (
    "accepted store URLs: sqlite:///relative/path.db (relative to where tmy is started), "
    "sqlite:////absolute/path.db, sqlite:///:memory:, redis://host:6379/0, rediss://host:6380/0, "
    "redis+cluster://host1:6379,host2:6379/ (a Redis Cluster; rediss+cluster:// for TLS) "
    "— e.g. store: sqlite:///data/tmy.db"
)


def open_store(
    url: str, base_dir: Path | None = None, *, max_value_bytes: int = MAX_VALUE_BYTES
) -> Store:
    """The store ``url`` names, not yet opened (the caller awaits ``.open()``).

    ``max_value_bytes``: the largest encoded value it takes (``limits.max_value_bytes``).
    Raises ConfigError, listing the accepted forms, for anything else.
    """
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(f"invalid store URL {url!r}; {_ACCEPTED}")
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    if scheme == "sqlite":
        rest, lease_ttl = _sqlite_options(url, rest)
        path = _sqlite_path(url, rest, base_dir)
        if lease_ttl is None:
            return SQLiteStore(path, max_value_bytes=max_value_bytes)
        return SQLiteStore(path, lease_ttl=lease_ttl, max_value_bytes=max_value_bytes)
    if scheme in ("redis", "rediss", "redis+cluster", "rediss+cluster"):
        # deferred: redis-py alone adds ~0.17 s to start-up, which a SQLite
        # deployment (the default) need not pay
        from tmy.store.redis import RedisClusterStore, RedisStore

        backend = RedisClusterStore if scheme.endswith("+cluster") else RedisStore
        try:
            return backend(url, max_value_bytes=max_value_bytes)
        except StoreError as exc:
            raise ConfigError(f"{exc}; {_ACCEPTED}") from None
    raise ConfigError(f"unsupported store URL scheme {scheme!r} in {url!r}; {_ACCEPTED}")


def _sqlite_options(url: str, rest: str) -> tuple[str, float | None]:
    """Split ``?lease_ttl=`` off a SQLite URL's rest (the only query parameter it takes)."""
    if "#" in rest or "?" not in rest:
        return rest, None
    rest, _, query = rest.partition("?")
    pairs = parse_qsl(query, keep_blank_values=True)
    if not pairs or any(k != "lease_ttl" for k, _ in pairs):
        raise ConfigError(
            f"SQLite URLs take no query parameters but ?lease_ttl=<seconds>: {url!r}; {_ACCEPTED}"
        )
    try:
        return rest, lease_ttl_option(pairs[-1][1], url)
    except StoreError as exc:
        raise ConfigError(str(exc)) from None


def _sqlite_path(url: str, rest: str, base_dir: Path | None) -> Path | str:
    if not rest.startswith("/") or rest == "/":
        raise ConfigError(
            f"invalid SQLite URL {url!r}: use three slashes and a path (sqlite:///data/tmy.db) "
            f"or four for an absolute path (sqlite:////var/lib/tmy/tmy.db); {_ACCEPTED}"
        )
    if "?" in rest or "#" in rest:
        raise ConfigError(f"SQLite URLs take no query parameters: {url!r}; {_ACCEPTED}")
    path = rest[1:]  # sqlite:/// + path: "/x" -> "x" relative, "//x" -> "/x" absolute
    if path == ":memory:":
        return path
    if path.startswith("/"):
        return Path(path)
    return (base_dir if base_dir is not None else Path.cwd()) / path
