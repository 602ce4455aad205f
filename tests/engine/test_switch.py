"""The chat switch (tmy.engine.switch): stored per chat, read through a short cache."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

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


class _Counting:
    """The real store, counting the reads that reach it."""

    def __init__(self, store: Any) -> None:
        self.store, self.reads = store, []

    async def get_many(self, keys: list[str]) -> list[Any]:
        self.reads.append(list(keys))
        return await self.store.get_many(keys)

    async def get(self, key: str) -> Any:
        self.reads.append([key])
        return await self.store.get(key)


async def test_lookups_of_one_loop_turn_are_one_read(tmp_path: Path) -> None:
    """20 chats not seen yet, asked at once: one get_many, each its own verdict."""
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    await store.open()
    try:
        msgs = [Message("", user="ann", chat=f"g{i}", platform="test") for i in range(20)]
        await ChatSwitch(store).set(msgs[3], True)
        counted = _Counting(store)
        switch = ChatSwitch(counted)  # type: ignore[arg-type]
        verdicts = await asyncio.gather(*(switch.is_off(m) for m in [*msgs, msgs[3]]))
        assert verdicts == [i == 3 for i in range(20)] + [True]
        assert len(counted.reads) == 1 and len(counted.reads[0]) == 20
        assert [switch.cached(m) for m in msgs] == [i == 3 for i in range(20)]
    finally:
        await store.close()


async def test_a_cancelled_first_asker_leaves_the_others_answered(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    await store.open()
    try:
        a, b = (Message("", user="ann", chat=c, platform="test") for c in ("ga", "gb"))
        await ChatSwitch(store).set(b, True)
        switch = ChatSwitch(store)
        first = asyncio.ensure_future(switch.is_off(a))
        second = asyncio.ensure_future(switch.is_off(b))
        await asyncio.sleep(0)  # both asked; the first waits for the turn to end
        first.cancel()
        assert await second is True
        with pytest.raises(asyncio.CancelledError):
            await first
    finally:
        await store.close()
