"""The console's Memory page: its data (entries per user and searched, the users with
summaries, what recall returns without writing anything) and the page on a served
daemon (search, delete, clear, recall, escaping, JSON)."""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.console import console_daemon, logged_in
from tests.support.log_helpers import read_log
from tmy.console.memory import dialog_users, entry_rows, recall_data, summary_rows
from tmy.memory import dialog, entries
from tmy.message import Message
from tmy.testing import Bot

RULES = "rules:\n  - {id: hi, triggers: [hi], steps: [{plugin: ADJUST, input: hey}]}\n"


def _entry(i: str, text: str, user: str, scope: str = "user", **more: object) -> dict:
    return {"id": i, "text": text, "scope": scope, "user": user, "platform": "test",
            "chat": f"private:{user}", "created": 1_700_000_000.0 + int(i, 16),
            "importance": 3, "enabled": True, "uses": 0, **more}  # fmt: skip


def test_entries_are_kept_per_user_searched_and_newest_first() -> None:
    listed = [
        _entry("1", "my cat is called Mimi", "ann"),
        _entry("2", "I like TEA", "ann", enabled=False),
        _entry("3", "cats are fine", "bob", scope="chat", chat="group:1"),
    ]
    rows = entry_rows(listed, q="cat")
    assert [r["id"] for r in rows] == ["3", "1"]
    assert rows[0]["chat"] == "group:1" and rows[1]["chat"] == ""
    anns = entry_rows(listed, user="test:ann")
    assert [(r["id"], r["enabled"]) for r in anns] == [("2", False), ("1", True)]
    assert entry_rows(listed, user="test:ann", q="tea")[0]["text"] == "I like TEA"
    assert (
        summary_rows([{"text": "a", "created": 1}, {"text": "b", "created": 2}])[0]["text"] == "b"
    )


async def test_dialog_users_and_recall_from_a_real_store() -> None:
    async with Bot({"r.yaml": RULES}) as bot:
        store = bot.app.store
        assert store is not None
        ann = Message("", user="a/nn", chat="group:1", platform="test")
        mine = _entry("a", "my cat is called Mimi", "a/nn")
        await store.set(entries.user_key("test", "a/nn"), [mine])
        office = _entry("b", "the office opens at nine", "bob", scope="global")
        await store.set(entries.GLOBAL_KEY, [office])
        now = time.time()
        summary = {"text": "we spoke about cats", "chat": "group:1", "created": now,
                   "platform": "test", "user": "a/nn"}  # fmt: skip
        await store.set(dialog.dialog_key("test", "a/nn"), [summary])
        assert await dialog_users(store) == ["test:a/nn"]

        services = bot.engine.services
        fields = {"query": "what is my cat called", "platform": "test", "user": "a/nn",
                  "chat": "group:1"}  # fmt: skip
        found = await recall_data(services, fields)
        assert found is not None and found["error"] == ""
        assert [e["id"] for e in found["entries"]] == ["a"]
        assert "Mimi" in found["block"] and "we spoke about cats" in found["block"]
        assert found["considered"] == 2 and found["chat"] == ann.chat
        stored = await store.get(entries.user_key("test", "a/nn"))
        assert stored[0]["uses"] == 0  # looking counts no use
        none = await recall_data(services, {**fields, "query": "weather", "dialogue": "0"})
        assert none is not None and none["entries"] == [] and none["block"] == ""
        assert await recall_data(services, {"query": "  "}) is None


# -- the page on a served daemon ---------------------------------------------------------------

REMEMBERING = 'rules: [{id: r, triggers: ["remember *"], steps: [{plugin: REMEMBER}]}]'
EVIL = "<script>alert(1)</script>"


async def test_the_page_lists_searches_recalls_and_deletes(log_file: Path) -> None:
    async with console_daemon({"r.yaml": REMEMBERING}) as daemon:
        await daemon.push("remember my cat is called Mimi", user="ann")
        await daemon.push("remember I live in Berlin", user="bob")
        await daemon.push(f"remember my name is {EVIL}", user=EVIL)
        store = daemon.app.store
        assert store is not None
        summary = {"text": f"talked about cats with {EVIL}", "chat": "private:ann",
                   "created": time.time(), "platform": "test", "user": "ann"}  # fmt: skip
        await store.set(dialog.dialog_key("test", "ann"), [summary])
        async with logged_in(daemon) as admin:
            page = await admin.get("memory")
            assert page.status_code == 200 and "my cat is called Mimi" in page.text
            assert EVIL not in page.text and "&lt;script&gt;" in page.text
            data = await admin.json("memory")
            assert data["total"] == 3 and "test:ann" in data["users"]
            cats = await admin.json("memory", q="CAT")
            assert [e["text"] for e in cats["entries"]] == ["my cat is called Mimi"]
            anns = await admin.json("memory", who="test:ann")
            assert [e["owner"] for e in anns["entries"]] == ["test:ann"]
            assert [s["text"] for s in anns["summaries"]] == [summary["text"]]
            shown = await admin.get("memory", params={"who": "test:ann"})
            assert "talked about cats with &lt;script&gt;" in shown.text

            asked = {"query": "what is my cat called", "platform": "test", "user": "ann"}
            recalled = await admin.json("memory", **asked)
            assert [e["text"] for e in recalled["recall"]["entries"]] == ["my cat is called Mimi"]
            assert "Mimi" in recalled["recall"]["block"]
            html = await admin.get("memory", params=asked)
            assert "The block the request would carry" in html.text
            as_bob = await admin.json("memory", **{**asked, "user": "bob"})
            assert as_bob["recall"]["entries"] == []  # recall is by who asks, never another's

            (mimi,) = cats["entries"]
            gone = await admin.post("memory/del", {"id": mimi["id"], "who": "test:ann"})
            assert gone.status_code == 303
            assert gone.headers["Location"] == "/console/memory?who=test%3Aann"
            again = await admin.json("memory", **asked)
            assert again["recall"]["entries"] == [] and again["total"] == 2
            missing = await admin.post("memory/del", {"id": mimi["id"]})
            assert missing.status_code == 404 and "no memory entry" in missing.text
            cleared = await admin.post("memory/clear", {"who": "test:ann"})
            assert cleared.status_code == 303
            assert (await admin.json("memory", who="test:ann"))["summaries"] == []
        async with logged_in(daemon, viewer=True) as viewer:
            page = await viewer.get("memory")
            assert page.status_code == 200 and "Delete" not in page.text
            some = (await viewer.json("memory"))["entries"][0]["id"]
            assert (await viewer.post("memory/del", {"id": some})).status_code == 403
            assert (await viewer.json("memory"))["total"] == 2
    changes = [e for e in read_log(log_file) if e.get("event") == "console.change"]
    assert [(c["what"], c["role"]) for c in changes] == [
        ("memory.del", "admin"),
        ("memory.clear_summaries", "admin"),
    ]
