"""memory.uses: noted recall uses are written, and kept when a write fails."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tmy.cron.buffered import run_buffered
from tmy.errors import StoreError
from tmy.memory import entries
from tmy.memory.runtime import memory_of
from tmy.memory.uses import Uses
from tmy.message import Message
from tmy.store import open_store
from tmy.testing import Bot


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


RULES = """
rules:
  - {id: remember, triggers: ["remember *"], steps: [{plugin: REMEMBER}]}
  - {id: ai, triggers: ["ai *"], steps: [{plugin: LLM, system: "You are tmy.", memory: 6}]}
"""


async def test_a_scheduled_runs_recall_counts_its_use_in_the_writes_it_commits(
    tmp_path: Path,
) -> None:
    """A scheduled run works on a buffer committed with it: its recall's use goes there (as
    before use counts were batched), not to the app's batch, nor lost."""
    async with Bot({"m.yaml": RULES}, store=f"sqlite:///{tmp_path / 'm.db'}") as bot:
        await bot.say("remember my cat is called Mimi", user="ann")
        rule = next(r for r in bot.engine.rulebook.rules if r.id == "ai")
        msg = Message("what is my cat called", user="ann", platform="test", chat="private:ann")
        reply, writes, _, index_writes = await run_buffered(
            bot.engine, rule, msg, "what is my cat called", {}
        )
        assert "Mimi" in reply.text
        (entry,) = [v for k, v, _ in writes if k.startswith("mem/e/")]
        assert entry["uses"] == 1
        assert [name for name, _ in index_writes] == ["index_order"]
        assert memory_of(bot.engine.services).uses.pending() == 0
