"""How many commands one recall sends to Redis (issue 24, goal 3): the index is searched in
one script for every owner (the sender's, the chat's, the global entries), while the owner
keys are read; then the chosen entries are read in one MGET. Counted by a private
redis-server itself (INFO commandstats), not by a mock: a script's own commands are
counted there too, as ``hmget``, ``zcard`` …, and are allowed as long as they are read-only."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tmy.config.memory import RecallSpec
from tmy.memory import layout
from tmy.memory.recall import recall
from tmy.message import Message
from tmy.testing import Bot

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import memory_data

RULES = """
rules:
  - {id: ai, triggers: ["ai *"], steps: [{plugin: LLM, system: "You are tmy.", memory: 6}]}
"""
INSIDE_SEARCH = {"hmget", "zcard", "zrange", "zrevrange", "zmscore", "zinterstore", "del"}
"""What the SEARCH script runs (``del``: its scratch intersection key)."""


def command_calls(admin: Any) -> dict[str, int]:
    stats = admin.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    return {k: v for k, v in calls.items() if k not in {"info", "config|resetstat"}}


async def load(store: Any, texts: list[str]) -> None:
    owner = layout.user_key("test", "ann")
    start = time.time() - len(texts)  # one a second, up to now: recency ≈ 1
    items = [
        {"id": f"e{i:06d}", "text": t, "scope": "user", "user": "ann", "chat": "private:ann",
         "platform": "test", "created": start + i, "importance": 3, "enabled": True, "uses": 0,
         "used": 0}
        for i, t in enumerate(texts)
    ]  # fmt: skip
    for e in items:
        await store.set(layout.doc_key(owner, e["id"]), e)
    await store.index_put(owner, [layout.index_doc(e) for e in items])


@pytest.mark.redis
@pytest.mark.slow
async def test_a_recall_sends_one_search_script_and_two_mgets(redis_server: Any) -> None:
    server = redis_server()
    admin = server.client()
    try:
        llm = {"memory": {"max_entries": 20_000}}
        async with Bot({"m.yaml": RULES}, store=f"{server.url}?prefix=rt", llm=llm) as bot:
            await load(bot.engine.services.store, memory_data.entries(1_000))
            for question, answer in memory_data.QUERIES:
                msg = Message(question, user="ann", platform="test")
                spec = RecallSpec(max=6)
                await recall(bot.engine.services, msg, spec, question)  # loads the script
                admin.config_resetstat()
                found = await recall(bot.engine.services, msg, spec, question)
                assert answer in [s.item["text"] for s in found.entries], question
                calls = command_calls(admin)
                # three owners searched by one EVALSHA; the owner keys (and the chat's
                # conversation keys) by one MGET, sent with it; the entries by one more
                assert calls.pop("evalsha") == 1, question
                assert calls.pop("mget") == 2, question
                assert set(calls) <= INSIDE_SEARCH, (question, calls)
    finally:
        admin.close()
