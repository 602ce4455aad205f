"""The chat switch (tmy.engine.switch): stored per chat, read through a short cache."""

from __future__ import annotations

from pathlib import Path

from tmy.engine.switch import ChatSwitch, off_key
from tmy.message import Message
from tmy.store import open_store


async def test_off_and_on_are_stored_and_cached(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    await store.open()
    try:
        one, other = ChatSwitch(store), ChatSwitch(store)  # two daemons on one store
        msg = Message("", user="ann", chat="g/1", platform="test")
        assert one.cached(msg) is None  # nothing known yet
        assert await one.is_off(msg) is False
        assert one.cached(msg) is False
        await one.set(msg, True)
        assert one.cached(msg) is True and await one.is_off(msg) is True
        assert await other.is_off(msg) is True  # read from the store
        assert await store.get(off_key(msg)) == {"by": "test:ann"}
        assert off_key(msg).startswith("off/test/")
        await one.set(msg, False)
        assert await one.is_off(msg) is False
        elsewhere = Message("", user="ann", chat="g2", platform="test")
        assert await one.is_off(elsewhere) is False
    finally:
        await store.close()
