"""store.redis.version: a Redis older than 7.0 is refused at open()."""

from __future__ import annotations

import pytest

from tmy.errors import StoreError
from tmy.store import open_store
from tmy.store.redis.version import check_version


def test_an_old_redis_is_refused_naming_the_version_needed() -> None:
    with pytest.raises(StoreError, match=r"Redis 6\.2\.14 is too old: tmy needs Redis ≥ 7\.0"):
        check_version({"redis_version": "6.2.14", "redis_mode": "standalone"}, "redis x")
    cluster = {"n1:7000": {"redis_version": "7.2.4"}, "n2:7001": {"redis_version": "6.0.9"}}
    with pytest.raises(StoreError, match=r"6\.0\.9"):
        check_version(cluster, "redis cluster x")


def test_a_new_enough_or_unknown_server_is_accepted() -> None:
    for info in ({"redis_version": "7.0.0"}, {"redis_version": "8.0.2"}, {}, {"x": {"y": 1}}):
        check_version(info, "redis x")
    check_version({"redis_version": "255.255.255"}, "redis x")


@pytest.mark.redis
@pytest.mark.parametrize("backend", ["redis", pytest.param("cluster", marks=pytest.mark.slow)])
async def test_the_test_servers_open(request: pytest.FixtureRequest, backend: str) -> None:
    store = open_store(request.getfixturevalue(f"{backend}_store_url"))
    await store.open()  # the version read passes
    try:
        await store.set("v", 1)
        assert await store.get("v") == 1
    finally:
        await store.close()
