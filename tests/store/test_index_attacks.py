"""Reproductions of faults found by attacking the store's lexical index, memory on top of it,
claims and the LLM usage tally (issue 24 review). Each is ``xfail(strict=True)``: the fixer
removes the mark once the fault is gone (a strict xfail that passes fails the suite)."""

from __future__ import annotations

import asyncio
import random
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tmy.errors import StoreError
from tmy.explain import explain
from tmy.memory import entries
from tmy.memory.runtime import memory_of
from tmy.memory.uses import Uses
from tmy.message import Message
from tmy.store import open_store
from tmy.store.textindex import IndexDoc
from tmy.testing import Bot

RULES = """
rules:
  - {id: remember, triggers: ["remember *"], steps: [{plugin: REMEMBER}]}
  - {id: note, triggers: ["note *"], steps: [{plugin: REMEMBER, scope: chat}]}
  - {id: forget, triggers: ["forget *"], steps: [{plugin: FORGET}]}
  - {id: ai, triggers: ["ai *"], steps: [{plugin: LLM, system: "You are tmy.", memory: 6}]}
"""


async def test_sqlite_failed_first_put_does_not_merge_two_namespaces(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'ix.db'}")
    await store.open()
    try:
        await store.index_put("warm", [IndexDoc("w", {"w": 1})])
        db = store._conn()  # the disk fills up: no page beyond those the file has
        (pages,) = db.execute("PRAGMA page_count").fetchone()
        db.execute(f"PRAGMA max_page_count = {pages}")
        big = IndexDoc("x", {f"t{i}": 1 for i in range(2000)})
        with pytest.raises(StoreError, match="full"):  # ann's first REMEMBER fails
            await store.index_put("mem/user/t/ann", [big])
        db.execute("PRAGMA max_page_count = 1073741823")  # space again
        await store.index_put("mem/user/t/bob", [IndexDoc("b1", {"secret": 1})])
        await store.index_put("mem/user/t/ann", [IndexDoc("a1", {"mine": 1})])
        assert (await store.index_search("mem/user/t/ann", ["secret"])).docs == {}
        assert (await store.index_search("mem/user/t/bob", ["mine"])).docs == {}
    finally:
        await store.close()


async def test_sqlite_namespace_usable_after_a_failed_first_put(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'ix.db'}")
    await store.open()
    try:
        with pytest.raises(StoreError):
            await store.index_put("kb/faq", [IndexDoc("x", {"t": 1}, length=2**63)])
        await store.index_put("kb/faq", [IndexDoc("ok", {"t": 1})])
        assert list((await store.index_search("kb/faq", ["t"])).docs) == ["ok"]
    finally:
        await store.close()


@pytest.mark.redis
async def test_redis_lowest_of_a_term_held_by_9000_documents(redis_store_url: str) -> None:
    store = open_store(redis_store_url)
    await store.open()
    try:
        docs = [IndexDoc(f"d{i}", {"#o:me": 1}, order=float(i)) for i in range(9000)]
        await store.index_put("mem/chat/t/g", docs)
        assert await store.index_lowest("mem/chat/t/g", 1, term="#o:me") == [("d0", 0.0)]
    finally:
        await store.close()


@pytest.mark.parametrize("user", ["a\nb", "/" * 200])
async def test_memory_for_users_whose_key_the_index_refuses(tmp_path: Path, user: str) -> None:
    async with Bot({"m.yaml": RULES}, store=f"sqlite:///{tmp_path / 'm.db'}") as bot:
        store = bot.engine.services.store
        old = {"id": "old1", "text": "my cat is called Mimi", "scope": "user", "user": user,
               "chat": "private:x", "platform": "test", "created": 1e9, "importance": 3,
               "enabled": True, "uses": 0, "used": 0}  # fmt: skip
        await store.set(entries.user_key("test", user), [old])
        assert "Mimi" in await bot.say("ai what is my cat called", user=user)
        assert await bot.say("forget cat", user=user) == "OK, I forgot: my cat is called Mimi"
        assert (await bot.say("remember I live in Rome", user=user)).startswith("OK")


@pytest.mark.slow
async def test_uses_noted_before_a_clean_stop_are_written(tmp_path: Path) -> None:
    path = tmp_path / "uses.db"
    store = open_store(f"sqlite:///{path}")
    await store.open()
    other = sqlite3.connect(path, isolation_level=None)
    try:
        entry, _, _ = await entries.add(store, Message("x", user="ann", platform="test"), "my cat")
        owner = entries.user_key("test", "ann")
        uses = Uses()
        uses.note(owner, {entry["id"]}, time.time())
        other.execute("BEGIN IMMEDIATE")  # another process writes for half a second
        asyncio.get_running_loop().call_later(1.5, lambda: other.execute("COMMIT"))
        async with uses.writing(store):
            await asyncio.sleep(1.3)  # the flusher (at 1 s) waits for the lock: stop now
        (stored,) = await entries.owner_entries(store, owner)
        assert stored["uses"] == 1
    finally:
        other.close()
        await store.close()


@pytest.mark.slow
@pytest.mark.redis
async def test_a_huge_cjk_question_costs_the_index_a_bounded_number_of_lookups(
    redis_server: Callable[..., Any],
) -> None:
    server = redis_server()
    rnd = random.Random(1)
    question = "".join(chr(rnd.randint(0x4E00, 0x9FFF)) for _ in range(19_000))
    async with Bot({"m.yaml": RULES}, store=server.url) as bot:
        await bot.say("remember 我最喜欢的水果是芒果", user="ann")
        client = server.client()
        client.config_resetstat()
        await bot.say("ai " + question, user="ann")
        zcard = client.info("commandstats").get("cmdstat_zcard", {}).get("calls", 0)
        client.close()
    assert zcard <= 3 * 1024


async def test_a_dry_run_explain_counts_no_use_in_the_real_store(tmp_path: Path) -> None:
    async with Bot({"m.yaml": RULES}, store=f"sqlite:///{tmp_path / 'm.db'}") as bot:
        store = bot.engine.services.store
        await bot.say("remember my cat is called Mimi", user="ann")
        msg = Message("ai what is my cat called", user="ann", platform="test", chat="private:ann")
        ex = await explain(bot.engine, msg)
        assert "Mimi" in ex.reply["text"]  # recalled in the dry run
        await memory_of(bot.engine.services).uses.flush(store)
        (entry,) = await entries.owner_entries(store, entries.user_key("test", "ann"))
        assert entry["uses"] == 0


async def _vm_steps(store: Any, call: Any) -> int:
    """SQLite VM instructions (in thousands) the store's connection runs for ``call``."""
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    db = store._conn()
    db.set_progress_handler(count, 1000)
    try:
        await call
    finally:
        db.set_progress_handler(None, 1000)
    return steps[0]


@pytest.mark.slow
async def test_sqlite_remove_costs_the_same_in_a_big_namespace(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'ix.db'}")
    await store.open()
    ns = "mem/user/t/ann"

    def docs(start: int, n: int) -> list[IndexDoc]:
        return [IndexDoc(f"d{i}", {f"w{i}_{j}": 1 for j in range(5)}) for i in range(start, n)]

    try:
        await store.index_put(ns, docs(0, 200))
        small = await _vm_steps(store, store.index_remove(ns, ["d0"]))
        for start in range(200, 20_000, 5_000):
            await store.index_put(ns, docs(start, min(start + 5_000, 20_000)))
        big = await _vm_steps(store, store.index_remove(ns, ["d1"]))
        assert big <= 3 * max(small, 1)
    finally:
        await store.close()


_PUT_ONE = """
import asyncio, sys
from tmy.store import open_store
from tmy.store.textindex import IndexDoc

async def main(url, doc):
    store = open_store(url)
    await store.open()
    await store.index_put("mem/user/t/ann", [IndexDoc(doc, {"cat": 1})])
    print(hex(id(store)))
    await store.close()

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


@pytest.mark.slow
@pytest.mark.redis
async def test_redis_index_writes_of_two_processes_are_both_applied(
    redis_store_url: str, tmp_path: Path
) -> None:
    if shutil.which("setarch") is None:
        pytest.skip("needs setarch (to start both processes without address randomisation)")
    script = tmp_path / "put_one.py"
    script.write_text(_PUT_ONE)
    root = str(Path(__file__).resolve().parents[2])
    env = {"PYTHONPATH": root, "PYTHONHASHSEED": "0"}  # the same allocations in both
    ids = []
    for doc in ("first", "second"):
        done = subprocess.run(
            ["setarch", "-R", sys.executable, str(script), redis_store_url, doc],
            capture_output=True, text=True, timeout=60, cwd=root, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.strip())
    if ids[0] != ids[1]:
        pytest.skip(f"the two processes' stores got different addresses ({ids})")
    store = open_store(redis_store_url)
    await store.open()
    try:
        hits = await store.index_search("mem/user/t/ann", ["cat"])
        assert sorted(hits.docs) == ["first", "second"]
    finally:
        await store.close()


@pytest.mark.slow
async def test_forget_finds_the_senders_note_in_a_busy_chat(tmp_path: Path) -> None:
    llm = {"memory": {"max_entries": 5000}}
    async with Bot({"m.yaml": RULES}, store=f"sqlite:///{tmp_path / 'm.db'}", llm=llm) as bot:
        await bot.say("note my cat is called Mimi", user="bob", chat="g")
        for i in range(250):
            await bot.say(f"note cat fact {i}", user=f"u{i}", chat="g")
        assert await bot.say("forget cat", user="bob", chat="g") == (
            "OK, I forgot: my cat is called Mimi"
        )
