"""memory.uses: noted recall uses are written, and kept when a write fails."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tmy.errors import StoreError
from tmy.memory import entries
from tmy.memory.uses import Uses
from tmy.message import Message
from tmy.store import open_store


async def test_uses_whose_write_failed_are_written_by_the_next_flush(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'uses.db'}"
    store = open_store(url)
    await store.open()
    entry, _, _ = await entries.add(store, Message("x", user="ann", platform="test"), "my cat")
    owner = entries.user_key("test", "ann")
    uses = Uses()
    uses.note(owner, {entry["id"]}, time.time())
    await store.close()
    with pytest.raises(StoreError):  # the store is gone for a moment
        await uses.flush(store)
    assert uses.pending(owner) == 1  # kept, not dropped
    uses.note(owner, {entry["id"]}, time.time())  # one more use meanwhile
    await store.open()
    try:
        await uses.flush(store)
        assert uses.pending() == 0
        (stored,) = await entries.owner_entries(store, owner)
        assert stored["uses"] == 2
    finally:
        await store.close()
