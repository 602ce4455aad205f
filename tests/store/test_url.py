"""open_store (tmy/store/url.py): the value limit a store is given, and what it can commit."""

from __future__ import annotations

from pathlib import Path

import pytest

from tmy.errors import ValueRefused
from tmy.store import open_store
from tmy.store.metered import metered
from tmy.store.overlay import OverlayStore


async def test_each_store_keeps_its_own_value_limit(tmp_path: Path) -> None:
    small = open_store(f"sqlite:///{tmp_path / 'a.db'}", max_value_bytes=20)
    default = metered(open_store(f"sqlite:///{tmp_path / 'b.db'}"))
    await small.open()
    await default.open()
    try:
        value = "y" * 30
        with pytest.raises(ValueRefused, match=r"limits\.max_value_bytes is 20\)"):
            await small.set("k", value)
        with pytest.raises(ValueRefused):
            await small.commit([("k", value, None)])
        with pytest.raises(ValueRefused):
            await small.update("k", lambda _: (value, None))
        await default.set("k", value)  # the other store's limit does not reach it
        assert await default.get("k") == value
        assert default.max_value_bytes == 4 * 1024 * 1024
        overlay = OverlayStore(small)  # a dry run refuses what the real store would
        assert overlay.max_value_bytes == 20
        with pytest.raises(ValueRefused):
            await overlay.set("k", value)
    finally:
        await small.close()
        await default.close()


def test_the_limit_reaches_the_redis_backends_without_io() -> None:
    assert open_store("redis://h/0", max_value_bytes=7).max_value_bytes == 7
    assert open_store("redis+cluster://h:7000/", max_value_bytes=9).max_value_bytes == 9


def test_only_a_cluster_commits_one_slot_at_a_time(tmp_path: Path) -> None:
    sqlite = open_store(f"sqlite:///{tmp_path / 'c.db'}")
    assert sqlite.one_slot_commits is False
    assert metered(open_store("redis://h/0")).one_slot_commits is False
    assert metered(open_store("redis+cluster://h:7000/")).one_slot_commits is True
    assert OverlayStore(sqlite).one_slot_commits is False
