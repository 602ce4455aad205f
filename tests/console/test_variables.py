"""The console's Variables page: its data (keys by scope, a value as a bounded structure)
and the page on a served daemon (browse, view, edit with the declared type checked,
delete, escaping, JSON)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.console import console_daemon, logged_in
from tests.support.log_helpers import read_log
from tmy.console.valueview import SHOW_ALL_CHARS, SHOW_NODES, _Budget, shape, value_view
from tmy.console.variables import (
    Holder,
    browse_data,
    holder_of,
    parse_key,
)
from tmy.rulebook.model import VariableDecl
from tmy.store.board_keys import escape_key_part
from tmy.testing import Bot

RULES = """
variables:
  greeting: {scope: global, default: "hello"}
  motto: {scope: global, default: "be kind"}
  jokes: {scope: chat, default: []}
  profile: {scope: user, default: {}}
  visits: {scope: user, default: 0}
rules:
  - id: greet
    triggers: [hi]
    steps: [{plugin: ADJUST, input: "{greeting}!"}]
  - id: visit
    triggers: [visit]
    steps:
      - {plugin: ADJUST, input: "?= visits + 1", save: visits}
      - {plugin: ADJUST, input: "?= jokes + ['j']", save: jokes}
"""


def test_keys_parse_into_scope_owner_and_name() -> None:
    assert parse_key("var/global/greeting") == (Holder("global"), "greeting")
    assert parse_key("var/chat/onebot/group%2F5/jokes") == (
        Holder("chat", "onebot", chat="group/5"),
        "jokes",
    )
    assert parse_key("var/user/test/a%25b/visits") == (Holder("user", "test", user="a%b"), "visits")
    assert parse_key("var/chat/onebot/jokes") is None
    assert parse_key("hist/x/y/z") is None


def test_holder_of_fields_checks_what_each_scope_needs() -> None:
    assert holder_of({"scope": "chat", "platform": "p", "chat": "c", "user": "u"}) == Holder(
        "chat", "p", chat="c"
    )
    assert holder_of({}) == Holder("global")
    with pytest.raises(ValueError, match="platform and user"):
        holder_of({"scope": "user", "platform": "p"})
    with pytest.raises(ValueError, match="scope is one of"):
        holder_of({"scope": "everyone"})
    who = Holder("chat", "onebot", chat="group:5").who()
    assert (who.platform, who.chat) == ("onebot", "group:5")
    assert Holder("user", "test", user="ann").who().user == "ann"


def test_a_big_value_is_cut_to_the_budget_and_show_all_gives_it_whole() -> None:
    big = [{"n": i, "text": "x" * 40} for i in range(60_000)]  # ~4 MB of JSON
    decl = VariableDecl("big", "global", [], "r.yaml", 1)
    view = value_view(big, decl, show_all=False)
    assert view["bytes"] > 3_000_000 and view["truncated"]
    assert view["json"] is None and view["edit"] is None  # no 4 MB textarea before "show all"
    tree = view["tree"]
    assert tree["t"] == "list" and tree["more"] > 59_000
    shown = sum(1 + len(item[1]["items"]) for item in tree["items"])
    assert shown <= SHOW_NODES + 1
    whole = value_view(big, decl, show_all=True)
    assert whole["tree"] is None and json.loads(whole["json"]) == big
    assert whole["declared_type"] == "list"
    assert whole["edit"] is None and not whole["editable"]  # too big for one request


def test_show_all_is_cut_to_the_cap_as_the_start_of_the_whole_text() -> None:
    big = {f"k{i}": ["é" * 30, i, 1.5, None, True] for i in range(40_000)}  # ~2.6 MB
    decl = VariableDecl("big", "global", {}, "r.yaml", 1)
    whole = value_view(big, decl, show_all=True)
    assert json.loads(whole["json"]) == big and whole["json_cut"] == 0
    assert whole["json"] == json.dumps(big, ensure_ascii=False, indent=2), "orjson's text"
    cut = value_view(big, decl, show_all=True, cap=1000)
    assert cut["json"] == whole["json"][:1000]
    assert cut["json_cut"] == len(whole["json"]) - 1000


def test_structures_keep_their_shape_and_long_strings_are_cut() -> None:
    tree = shape({"a": [1, True, None], "b": {"c": "x" * 5000}}, _Budget(100))
    assert tree["t"] == "map"
    (ka, a), (kb, b) = tree["items"]
    assert (ka, kb) == ("a", "b")
    assert [n["t"] for _, n in a["items"]] == ["int", "bool", "null"]
    leaf = b["items"][0][1]
    assert leaf["t"] == "str" and leaf["cut"] == 3000 and len(leaf["v"]) == 2000
    small = value_view("hi", VariableDecl("g", "global", "", "r.yaml", 1), show_all=False)
    assert not small["truncated"] and small["edit"] == "hi"  # a str edits as its text


async def test_browse_lists_each_scope_with_values_filter_and_pages() -> None:
    async with Bot({"r.yaml": RULES}) as bot:
        for user in ("ann", "bob"):
            await bot.say("visit", user=user, chat="group:1")
        await bot.say("visit", user="ann", chat="group:2")
        store, rulebook = bot.app.store, bot.engine.rulebook
        assert store is not None
        await store.set("var/global/retired", 5)  # a declaration since removed
        glob = await browse_data(store, rulebook, "global")
        assert [r["name"] for r in glob["rows"]] == ["greeting", "motto", "retired"]
        by_name = {r["name"]: r for r in glob["rows"]}
        assert by_name["greeting"]["stored"] is False and by_name["greeting"]["value"] == "hello"
        assert by_name["retired"]["declared"] is False
        assert {d["name"]: d["type"] for d in glob["declared"]}["jokes"] == "list"
        chats = await browse_data(store, rulebook, "chat")
        assert [(r["chat"], r["value"]) for r in chats["rows"]] == [
            ("group:1", '["j","j"]'),
            ("group:2", '["j"]'),
        ]
        users = await browse_data(store, rulebook, "user", q="ANN")
        assert [(r["user"], r["value"]) for r in users["rows"]] == [("ann", 2)]
        assert users["rows"][0]["link"] == {
            "scope": "user",
            "name": "visits",
            "platform": "test",
            "user": "ann",
        }
        for i in range(250):
            await store.set(f"var/user/test/u{i:03}/visits", i)
        paged: dict[str, Any] = await browse_data(store, rulebook, "user", page_no=3)
        assert (paged["total"], paged["pages"], paged["page"]) == (252, 3, 3)
        assert len(paged["rows"]) == 52
        with pytest.raises(ValueError):
            await browse_data(store, rulebook, "nowhere")


# -- the page on a served daemon ---------------------------------------------------------------


async def test_edit_changes_the_next_answer_and_a_wrong_type_is_refused_as_vars_set_does(
    log_file: Path,
) -> None:
    async with console_daemon({"r.yaml": RULES}) as daemon, logged_in(daemon) as admin:
        listed = await admin.get("variables")
        assert listed.status_code == 200 and "greeting" in listed.text
        data = await admin.json("variables", scope="global")
        assert [r["name"] for r in data["rows"]] == ["greeting", "motto"]
        view = await admin.json("variables/view", scope="global", name="greeting")
        assert view["tree"] == {"t": "str", "v": "hello", "cut": 0}

        saved = await admin.post("variables/set", {"scope": "global", "name": "greeting",
                                                   "value": "howdy"})  # fmt: skip
        assert saved.status_code == 303
        assert saved.headers["Location"] == "/console/variables/view?scope=global&name=greeting"
        assert (await daemon.push("hi")).text == "howdy!"

        await daemon.push("visit", user="ann", chat="group:1")
        ann = {"scope": "user", "platform": "test", "user": "ann", "name": "visits"}
        refused = await admin.post("variables/set", {**ann, "value": "lots"})
        assert refused.status_code == 400
        assert "visits is declared as int" in refused.text and "lots" in refused.text
        assert await daemon.var("visits", user="ann") == 1
        forced = await admin.post("variables/set", {**ann, "value": "7 --force"})
        assert forced.status_code == 400 and await daemon.var("visits", user="ann") == 1
        assert (await admin.post("variables/set", {**ann, "value": "7"})).status_code == 303
        assert await daemon.var("visits", user="ann") == 7
        wrong_scope = await admin.post("variables/set", {**ann, "scope": "global"})
        assert wrong_scope.status_code == 400 and "scope user" in wrong_scope.text

        gone = await admin.post("variables/del", {"scope": "global", "name": "greeting"})
        assert gone.status_code == 303
        assert (await daemon.push("hi")).text == "hello!"
    changes = [e for e in read_log(log_file) if e.get("event") == "console.change"]
    assert [c["what"] for c in changes] == ["variables.set", "variables.set", "variables.del"]
    assert {(c["role"], c["client"]) for c in changes} == {("admin", "127.0.0.1")}
    assert all("howdy" not in json.dumps(c) for c in changes)  # values are not logged


async def test_viewer_reads_but_cannot_change_and_a_change_needs_the_csrf_token() -> None:
    async with console_daemon({"r.yaml": RULES}) as daemon:
        async with logged_in(daemon, viewer=True) as viewer:
            page = await viewer.get("variables/view", params={"name": "greeting"})
            assert page.status_code == 200 and "<textarea" not in page.text
            change = {"scope": "global", "name": "greeting", "value": "x"}
            assert (await viewer.post("variables/set", change)).status_code == 403
            assert (await viewer.post("variables/del", change)).status_code == 403
        async with logged_in(daemon) as admin:
            bare = await admin.post("variables/set", {**change, "csrf": None})
            assert bare.status_code == 403
        assert (await daemon.push("hi")).text == "hello!"


@pytest.mark.slow
async def test_values_render_as_text_and_a_4_mb_value_is_cut_with_show_all() -> None:
    async with console_daemon({"r.yaml": RULES}) as daemon, logged_in(daemon) as admin:
        evil = "<script>alert(1)</script>"
        await daemon.push("visit", user=evil, chat=evil)
        store = daemon.app.store
        assert store is not None
        big = [{"n": i, "text": "x" * 40} for i in range(60_000)]
        chat_key = f"var/chat/test/{escape_key_part(evil)}/jokes"
        await store.set(chat_key, [evil, *big])
        listed = await admin.get("variables", params={"scope": "chat"})
        assert evil not in listed.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in listed.text
        where = {"scope": "chat", "platform": "test", "chat": evil, "name": "jokes"}
        cut = await admin.get("variables/view", params=where)
        assert cut.status_code == 200 and evil not in cut.text
        assert "Show all" in cut.text and "<textarea" not in cut.text
        assert len(cut.text) < 400_000  # the first items, not 4 MB
        whole = await admin.get("variables/view", params={**where, "all": "1"})
        assert whole.status_code == 200 and evil not in whole.text
        assert SHOW_ALL_CHARS < len(whole.text) < 2 * SHOW_ALL_CHARS  # cut, with a download
        assert "<textarea" not in whole.text and "use <code>vars set</code>" in whole.text
        assert "more characters are not shown." in whole.text
        assert "download=1" in whole.text and "Download the whole value (JSON)" in whole.text
        data = await admin.json("variables/view", **where)
        assert data["truncated"] and data["bytes"] > 3_000_000 and data["json"] is None
        all_data = await admin.json("variables/view", **where, all="1")
        assert json.loads(all_data["json"]) == [evil, *big] and all_data["json_cut"] == 0
        download = await admin.get("variables/view", params={**where, "download": "1"})
        assert download.status_code == 200 and download.json() == [evil, *big]
        assert download.headers["content-type"].startswith("application/json")
        assert download.headers["content-disposition"] == 'attachment; filename="jokes.json"'

        medium = [{"n": i, "text": "言葉 <&>"} for i in range(20_000)]  # ~550 kB, sent multipart
        text = json.dumps(medium, ensure_ascii=False)
        form = {k: v for k, v in where.items()}
        saved = await admin.post("variables/set", form, files={"value": (None, text)})
        assert saved.status_code == 303, saved.text
        assert await store.get(chat_key) == medium
        edit = await admin.get("variables/view", params={**where, "all": "1"})
        assert "<textarea" in edit.text and "言葉 &lt;&amp;&gt;" in edit.text
        user_page = await admin.get("variables", params={"scope": "user"})
        assert evil not in user_page.text
