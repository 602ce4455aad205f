"""The oldest Redis tmy runs on, checked when a store opens.

Redis 7.0: a claim is one ``SET key token NX PX ms GET`` (``NX`` with ``GET``
came in 7.0), and the lexical index's scripts call ``ZMSCORE`` (6.2). An older
server accepted ``open()`` and then failed those calls at their first use (a
claim, the first recall); it is refused at ``open()`` instead, naming the version
needed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tmy.errors import StoreError

MIN_VERSION = (7, 0)


def _versions(info: Any) -> Iterator[str]:
    """Every ``redis_version`` in an ``INFO server`` reply (a cluster's: one per node)."""
    if isinstance(info, dict):
        if "redis_version" in info:
            yield str(info["redis_version"])
        else:
            for value in info.values():
                yield from _versions(value)


def check_version(info: Any, where: str) -> None:
    """StoreError when a server of ``info`` (``INFO server``) is older than
    :data:`MIN_VERSION`; a reply without a version (a look-alike server) is let be."""
    for version in _versions(info):
        try:
            parts = tuple(int(p) for p in version.split(".")[:2])
        except ValueError:
            continue
        if parts < MIN_VERSION:
            need = ".".join(map(str, MIN_VERSION))
            raise StoreError(
                f"{where}: Redis {version} is too old: tmy needs Redis ≥ {need} "
                "(SET … NX GET for claims, ZMSCORE for memory's index)"
            )
