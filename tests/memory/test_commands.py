"""The memory extension's commands, ``memory`` and ``dialog``: the CLI form and the chat form
(``Invocation.compact``), their text and their JSON data, on the app given."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import tmy.llm
import tmy.memory
from tmy.app import App
from tmy.command import CommandError, Invocation, parse_words
from tmy.config import Settings
from tmy.memory.commands import DIALOG, MEMORY
from tmy.memory.dialog import dialog_key
from tmy.message import Message

RULES = 'rules: [{id: r, triggers: ["remember *"], steps: [{plugin: REMEMBER}]}]'
ROOT = Message("", user="root", is_admin=True)
ANN = Message("", user="ann")


@pytest.fixture
async def app() -> AsyncIterator[App]:
    settings = Settings(plugins=Path("/nonexistent"), store="sqlite:///:memory:")
    extensions = (tmy.llm.EXTENSION, tmy.memory.EXTENSION)
    async with App(settings, extensions=extensions, rule_texts={"r.yaml": RULES}) as a:
        await a.engine.handle(Message("remember my cat is called Mimi", user="ann"))
        await a.engine.handle(Message("remember I live in Berlin", user="bob"))
        yield a


def _cli(app: App, who: Message = ANN, **args: object) -> Invocation:
    full = {"action": "list", "id": None, "all": False, "dialog": False, "json": False, "out": None}
    return Invocation({**full, **args}, who, "cli", app, app.settings)


def _chat(app: App, command: object, text: str, who: Message = ROOT) -> Invocation:
    return Invocation(parse_words(command, text), who, "chat", app, app.settings, compact=True)


async def test_cli_list_text_json_and_all(app: App) -> None:
    mine = await MEMORY.run(_cli(app, action="list"))
    assert "[user console:ann] my cat is called Mimi" in mine.text and "Berlin" not in mine.text
    assert [e["text"] for e in mine.data] == ["my cat is called Mimi"]
    every = await MEMORY.run(_cli(app, action="list", all=True, json=True))
    assert json.loads(every.text) == every.data
    assert sorted(e["text"] for e in every.data) == ["I live in Berlin", "my cat is called Mimi"]
    with pytest.raises(CommandError, match="memory takes list, del, export"):
        await MEMORY.run(_cli(app, action="show"))  # HTTP args are not checked by argparse


async def test_cli_del_and_export(app: App, tmp_path: Path) -> None:
    exported = await MEMORY.run(_cli(app, action="export"))
    assert set(exported.data) == {"mem/user/console/ann", "mem/user/console/bob"}
    assert json.loads(exported.text) == exported.data
    out = tmp_path / "mem.json"
    written = await MEMORY.run(_cli(app, action="export", out=str(out)))
    assert written.text == "" and json.loads(out.read_text()) == exported.data
    entry_id = exported.data["mem/user/console/ann"][0]["id"]
    gone = await MEMORY.run(_cli(app, action="del", id=entry_id))
    assert (gone.text, gone.code) == (f"deleted {entry_id}: my cat is called Mimi", 0)
    assert gone.data["id"] == entry_id
    again = await MEMORY.run(_cli(app, action="del", id=entry_id))
    assert (again.text, again.ok, again.code) == (f"no memory entry {entry_id!r}", False, 1)
    bare = await MEMORY.run(_cli(app, action="del"))
    assert (bare.text, bare.ok, bare.code) == ("memory del needs an entry id", False, 2)
    assert (await MEMORY.run(_cli(app, action="list"))).text == "(no memory entries)"


async def test_chat_form(app: App) -> None:
    shown = await MEMORY.run(_chat(app, MEMORY, "ann"))
    assert "my cat is called Mimi" in shown.text and "Berlin" not in shown.text
    assert (await MEMORY.run(_chat(app, MEMORY, ""))).text == "(no memory entries)"  # root's own
    entry_id = shown.data[0]["id"]
    gone = await MEMORY.run(_chat(app, MEMORY, f"del {entry_id}"))
    assert gone.text == f"deleted {entry_id}: my cat is called Mimi"
    assert (await MEMORY.run(_chat(app, MEMORY, f"del {entry_id}"))).text == (
        f"no memory entry {entry_id!r}"
    )
    with pytest.raises(CommandError, match="usage: memory del ID"):
        await MEMORY.run(_chat(app, MEMORY, "del"))
    with pytest.raises(CommandError, match="usage: memory"):
        await MEMORY.run(_chat(app, MEMORY, "ann bob"))


async def test_dialog_lists_and_clears(app: App) -> None:
    summary = {"text": "asked about the cat", "chat": "private:ann", "created": 0}
    await app.store.set(dialog_key("console", "ann"), [summary])
    shown = await DIALOG.run(_chat(app, DIALOG, "ann"))
    assert shown.text.startswith("dialogue summaries of console:ann:\n")
    assert shown.text.endswith("[private:ann] asked about the cat")
    assert shown.data == {"platform": "console", "user": "ann", "summaries": [summary]}
    mine = await DIALOG.run(_chat(app, DIALOG, ""))
    assert mine.text == "dialogue summaries of console:root:\n(no dialogue summaries)"
    cli = await DIALOG.run(Invocation({"target": None, "other": None}, ANN, "cli", app, None))
    assert cli.text == shown.text  # the same on the CLI (an addition there)
    one = await DIALOG.run(_chat(app, DIALOG, "clear ann"))
    assert one.text == "dialogue summaries of console:ann cleared (1 key)"
    assert one.data == {"cleared": 1, "platform": "console", "user": "ann"}
    every = await DIALOG.run(_chat(app, DIALOG, "clear"))
    assert every.text == "every dialogue summary cleared (0 users)"
    with pytest.raises(CommandError, match="usage: dialog clear"):
        await DIALOG.run(_chat(app, DIALOG, "clear a b"))
    with pytest.raises(CommandError, match="usage: memory"):
        await DIALOG.run(_chat(app, DIALOG, "ann bob"))
