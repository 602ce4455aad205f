"""``store:``: the store URL's syntax, checked once at load.

The config layer knows the forms a store URL takes (the scheme, and for SQLite
the path and its one query parameter); :func:`tmy.store.open_store` reuses
:func:`parse_store_url` and adds what needs the store package: the SQLite path
read against a directory, the ``?lease_ttl=`` value, a Redis URL's own parse.
So a typo in ``store:`` is refused at load, with the key and the line, not when
the store opens.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl

from tmy.errors import ConfigError

REDIS_SCHEMES = ("redis", "rediss", "redis+cluster", "rediss+cluster")
SCHEMES = ("sqlite", *REDIS_SCHEMES)
ACCEPTED = (
    "accepted store URLs: sqlite:///relative/path.db (relative to where tmy is started), "
    "sqlite:////absolute/path.db, sqlite:///:memory:, redis://host:6379/0, rediss://host:6380/0, "
    "redis+cluster://host1:6379,host2:6379/ (a Redis Cluster; rediss+cluster:// for TLS) "
    "— e.g. store: sqlite:///data/tmy.db"
)


@dataclass(frozen=True, slots=True)
class StoreURL:
    """A store URL taken apart: ``scheme`` (lower case) and, for SQLite, ``path`` as
    written after ``sqlite:///`` (``data/tmy.db`` relative, ``/var/…`` absolute,
    ``:memory:``) and the raw ``?lease_ttl=`` value (None without one)."""

    url: str
    scheme: str
    path: str = ""
    lease_ttl: str | None = None


def parse_store_url(url: object) -> StoreURL:
    """``url`` taken apart; ConfigError, listing the accepted forms, for anything else."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(f"invalid store URL {url!r}; {ACCEPTED}")
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    if scheme == "sqlite":
        rest, lease_ttl = _sqlite_options(url, rest)
        return StoreURL(url, scheme, _sqlite_path(url, rest), lease_ttl)
    if scheme in REDIS_SCHEMES:
        return StoreURL(url, scheme)
    raise ConfigError(f"unsupported store URL scheme {scheme!r} in {url!r}; {ACCEPTED}")


def _sqlite_options(url: str, rest: str) -> tuple[str, str | None]:
    """Split ``?lease_ttl=`` off a SQLite URL's rest (the only query parameter it takes)."""
    if "#" in rest or "?" not in rest:
        return rest, None
    rest, _, query = rest.partition("?")
    pairs = parse_qsl(query, keep_blank_values=True)
    if not pairs or any(k != "lease_ttl" for k, _ in pairs):
        raise ConfigError(
            f"SQLite URLs take no query parameters but ?lease_ttl=<seconds>: {url!r}; {ACCEPTED}"
        )
    return rest, pairs[-1][1]


def _sqlite_path(url: str, rest: str) -> str:
    """The path after ``sqlite:///`` ("/x" -> "x" relative, "//x" -> "/x" absolute)."""
    if not rest.startswith("/") or rest == "/":
        raise ConfigError(
            f"invalid SQLite URL {url!r}: use three slashes and a path (sqlite:///data/tmy.db) "
            f"or four for an absolute path (sqlite:////var/lib/tmy/tmy.db); {ACCEPTED}"
        )
    if "?" in rest or "#" in rest:
        raise ConfigError(f"SQLite URLs take no query parameters: {url!r}; {ACCEPTED}")
    return rest[1:]
