"""``explain``: the real bot, real SQLite files, a real HTTP server on loopback.

Each test explains a message against real rules and checks what a rule author
reads: the first line, the candidates and why the winner won, the near misses,
the steps, and that a dry run changes nothing anywhere (store, upstream).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

import tmy.cli
import tmy.explain  # registers the command (the lead adds the import to tmy/cli.py)
from tmy.explain import explain, explain_text, message_for
from tmy.llm import runtime_of
from tmy.message import Message
from tmy.rulebook.loader import load_sources
from tmy.store.base import MISSING
from tmy.store.overlay import OverlayStore
from tmy.testing import Bot

RULES = """
variables:
  visits: {scope: user, default: 0}
  queue: {scope: global, default: ["a", "b", "c"]}
rules:
  - id: joke
    triggers: ["joke *", "joke"]
    steps:
      - {id: count, plugin: ADJUST, input: "?= visits + 1", save: visits}
      - {id: take, plugin: ADJUST, input: SHIFT, INPUT: queue}
      - {id: never, plugin: ADJUST, input: "no", when: "?= visits > 1000"}
  - id: jokes_long
    triggers: ["*joke please*"]
    steps: [{plugin: ADJUST, input: "long"}]
  - id: vip
    priority: 5
    admin_only: true
    triggers: ["joke*"]
    steps: [{plugin: ADJUST, input: "vip joke"}]
  - id: dm
    private: true
    triggers: ["secret"]
    steps: [{plugin: ADJUST, input: "psst"}]
  - id: addressed
    mention: true
    triggers: ["status"]
    steps: [{plugin: ADJUST, input: "all good"}]
  - id: Shout
    case_sensitive: true
    triggers: ["HELLO"]
    steps: [{plugin: ADJUST, input: "HI"}]
  - id: twin_a
    triggers: ["*tea*"]
    steps: [{plugin: ADJUST, input: "a"}]
  - id: twin_b
    triggers: ["*tea*"]
    steps: [{plugin: ADJUST, input: "b"}]
"""

SESSION_RULES = """
rules:
  - id: chat
    triggers: ["let's talk"]
    session: 120
    steps: [{plugin: ADJUST, input: "heard: {QUESTION}"}]
  - id: ping
    triggers: ["ping"]
    steps: [{plugin: ADJUST, input: "pong"}]
"""


def bot(rules: str = RULES, **settings: Any) -> Bot:
    return Bot({"main.yaml": rules}, **settings)


def by_rule(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["rule"]: r for r in rows}


# -- matched --------------------------------------------------------------------------------


async def test_matched_message_names_the_winner_and_why_each_other_candidate_lost() -> None:
    async with bot() as b:
        ex = await explain(b.engine, message_for("Joke please now", user="ann"))
        out = ex.render()
        data = ex.as_dict()
    assert out.splitlines()[0].startswith("matched rule 'joke' by trigger 'joke *'")
    assert data["matched"] == "joke" and data["reason"] is None
    assert data["normalised"] == "Joke please now" and data["folded"] == "joke please now"
    rows = data["candidates"]
    # the engine's order: priority, kind, literal length, file order
    assert [r["rule"] for r in rows] == ["vip", "joke", "jokes_long"]
    c = by_rule(rows)
    assert c["vip"]["refused"] == "it answers admins only (admin_only)"
    assert c["vip"]["why"].startswith("refused:") and not c["vip"]["won"]
    assert c["joke"]["won"] and c["joke"]["QUESTION"] == "please now"
    assert c["jokes_long"]["why"] == "a contains trigger ranks below prefix"
    assert {"kind", "priority", "literal_length", "file", "line"} <= set(c["joke"])
    assert "refused: it answers admins only (admin_only)" in out


async def test_why_the_winner_won_priority_length_and_file_order() -> None:
    rules = """
rules:
  - {id: short, triggers: ["ab*"], steps: [{plugin: ADJUST, input: s}]}
  - {id: long, triggers: ["abc*"], steps: [{plugin: ADJUST, input: l}]}
  - {id: high, priority: 1, triggers: ["*z*"], steps: [{plugin: ADJUST, input: h}]}
  - {id: first, triggers: ["*tea*"], steps: [{plugin: ADJUST, input: f}]}
  - {id: second, triggers: ["*tea*"], steps: [{plugin: ADJUST, input: s}]}
"""
    async with bot(rules) as b:
        ex = (await explain(b.engine, message_for("abcd"))).as_dict()
        assert ex["matched"] == "long"
        assert by_rule(ex["candidates"])["short"]["why"] == "shorter literal (2 < 3 characters)"
        ex = (await explain(b.engine, message_for("tea z"))).as_dict()
        assert ex["matched"] == "high"
        assert by_rule(ex["candidates"])["first"]["why"] == "lower priority (0 < 1)"
        ex = (await explain(b.engine, message_for("tea"))).as_dict()
        assert ex["matched"] == "first"
        why = by_rule(ex["candidates"])["second"]["why"]
        assert why.startswith("later in file order (main.yaml:")


async def test_the_candidates_come_in_the_order_match_walks() -> None:
    async with bot() as b:
        index = b.engine.rulebook.index
        for text in ["joke", "Joke please", "tea joke please", "HELLO", "hello tea"]:
            first = index.explain_matches(text)[0]
            best = index.match(text)
            assert best is not None and first.rule is best.rule and first.trigger is best.trigger


# -- unmatched ------------------------------------------------------------------------------


async def test_unmatched_message_says_why_in_one_line() -> None:
    async with bot() as b:
        ex = await explain(b.engine, message_for("tell me a joke"))
        data = ex.as_dict()
        out = ex.render()
    first = out.splitlines()[0]
    assert first.startswith("no reply: no trigger matched 'tell me a joke'; nearest: rule")
    assert "'joke *' fires only when the message starts with 'joke'" in first or (
        "'joke' is an exact trigger" in first
    )
    assert data["matched"] is None and data["reason"] == first.removeprefix("no reply: ")
    assert data["candidates"] == [] and data["steps"] == []
    misses = {(m["rule"], m["trigger"]): m["why"] for m in data["near_misses"]}
    assert misses[("joke", "joke *")] == (
        "'joke *' fires only when the message starts with 'joke'; here it is at position 10"
    )
    assert (
        misses[("joke", "joke")] == "'joke' is an exact trigger: the whole message must be 'joke'"
    )


async def test_prefix_needs_a_space_and_case_differences_are_near_misses() -> None:
    async with bot() as b:
        data = (await explain(b.engine, message_for("jokes"))).as_dict()
        assert data["matched"] == "vip" or data["matched"] is None
        misses = {(m["rule"], m["trigger"]): m["why"] for m in data["near_misses"]}
        assert misses[("joke", "joke *")] == (
            "'joke *' needs 'joke' followed by a space or the end of the message, not 's'"
        )
        data = (await explain(b.engine, message_for("Hello"))).as_dict()
        assert data["matched"] is None
        assert data["reason"].endswith(
            "nearest: rule 'Shout': 'HELLO' is case_sensitive and the message has 'Hello'"
        )
        # the same word as written fires it
        assert (await explain(b.engine, message_for("HELLO"))).matched == "Shout"


async def test_a_short_literal_inside_another_word_is_not_reported() -> None:
    rules = """
rules:
  - {id: hi, triggers: ["hi"], steps: [{plugin: ADJUST, input: x}]}
"""
    async with bot(rules) as b:
        data = (await explain(b.engine, message_for("this is history"))).as_dict()
        assert data["near_misses"] == []
        assert data["reason"] == "no trigger matched 'this is history'"
        data = (await explain(b.engine, message_for("oh hi there"))).as_dict()
        assert [m["rule"] for m in data["near_misses"]] == ["hi"]


# -- filtered -------------------------------------------------------------------------------


async def test_filtered_by_private() -> None:
    async with bot() as b:
        ex = await explain(b.engine, message_for("secret", chat="g1", private=False))
        data = ex.as_dict()
        out = ex.render()
    assert out.splitlines()[0] == "no reply: rule 'dm' matched but it answers private chats only"
    assert data["matched"] is None
    assert data["candidates"][0]["refused"] == "it answers private chats only"
    assert data["near_misses"][0] == {
        "rule": "dm",
        "trigger": "secret",
        "why": "its filters refuse the message: it answers private chats only",
        "file": "main.yaml",
        "line": data["near_misses"][0]["line"],
    }


async def test_filtered_by_admin_only_and_admitted_for_an_admin() -> None:
    rules = """
rules:
  - {id: vip, admin_only: true, triggers: ["vip"], steps: [{plugin: ADJUST, input: ok}]}
"""
    async with bot(rules, admins=frozenset({"test:boss"})) as b:
        ex = await explain(b.engine, message_for("vip", user="ann", platform="test"))
        assert ex.headline == "no reply: rule 'vip' matched but it answers admins only (admin_only)"
        ex = await explain(b.engine, message_for("vip", user="boss", platform="test"))
        assert ex.matched == "vip" and ex.reply["text"] == "ok"
        assert ex.message["admin"] is True


async def test_filtered_by_mention_in_a_group() -> None:
    async with bot() as b:
        ex = await explain(b.engine, message_for("status", chat="g1", private=False))
        assert ex.headline == (
            "no reply: rule 'addressed' matched but in groups it answers only when the bot "
            "is mentioned or replied to (mention)"
        )
        ex = await explain(b.engine, message_for("status", chat="g1", private=False, mention=True))
        assert ex.matched == "addressed" and ex.reply["text"] == "all good"


# -- sessions, the chat switch, cooldowns ----------------------------------------------------


async def test_a_message_captured_by_a_session() -> None:
    async with bot(SESSION_RULES) as b:
        before = await explain(b.engine, message_for("how are you", user="ann", platform="test"))
        assert before.matched is None
        assert (await b.say("let's talk", user="ann")).startswith("heard")
        ex = await explain(b.engine, message_for("how are you", user="ann", platform="test"))
        out = ex.render()
        data = ex.as_dict()
        assert out.splitlines()[0].startswith(
            "matched rule 'chat' through its open session (no trigger matched)"
        )
        assert data["via"] == "session" and data["session"] == {"rule": "chat", "exists": True}
        assert data["reply"]["text"] == "heard: how are you"
        # a trigger still wins over the session, and explain says that the session lost
        ex = await explain(b.engine, message_for("ping", user="ann", platform="test"))
        assert ex.matched == "ping"
        assert ex.near_misses[0]["rule"] == "chat" and ex.near_misses[0]["trigger"] == "<session>"
        assert (
            "a message that hits a trigger goes to that trigger's rule" in ex.near_misses[0]["why"]
        )
        # a dry run opens the session in its overlay only: bob still has none afterwards
        bob = {"user": "bob", "platform": "test"}
        opened = await explain(b.engine, message_for("let's talk", **bob))
        assert opened.writes == {"session/test/private:bob/bob": "chat"}
        assert (await explain(b.engine, message_for("how are you", **bob))).matched is None


async def test_chat_switched_off() -> None:
    async with bot() as b:
        msg = Message("", user="ann", chat="g1", platform="test", private=False)
        await b.engine.switch.set(msg, True)
        ex = await explain(
            b.engine, message_for("joke", user="ann", chat="g1", platform="test", private=False)
        )
        assert ex.headline.startswith("no reply: the bot is switched off in this chat")
        assert "rule 'joke' would answer otherwise" in ex.headline
        assert ex.steps == [] and ex.as_dict()["matched"] == "joke"
        assert ex.as_dict()["ran"] is False
        assert ex.near_misses[0]["rule"] == "joke"
        real = await explain(
            b.engine,
            message_for("joke", user="ann", chat="g1", platform="test", private=False),
            run=True,
        )
        assert real.headline == ex.headline and real.reply == {"text": "", "error": None}
        assert await b.var("visits", user="ann") == 0  # nothing ran


async def test_cooldown_is_reported() -> None:
    rules = """
rules:
  - id: slow
    triggers: ["slow"]
    cooldown: {seconds: 60, reply: "wait {COOLDOWN_LEFT} s"}
    steps: [{plugin: ADJUST, input: "done"}]
"""
    async with bot(rules) as b:
        if not hasattr(b.engine, "cooldown_left"):
            pytest.skip("the engine has no cooldown_left yet")
        msg = {"user": "ann", "platform": "test"}
        first = await explain(b.engine, message_for("slow", **msg))
        assert first.matched == "slow" and first.ran and first.reply["text"] == "done"
        assert any(k.startswith("cooldown/slow") for k in first.writes or {})  # overlay only
        assert await b.say("slow", user="ann") == "done"
        ex = await explain(b.engine, message_for("slow", **msg))
        assert ex.headline.startswith("no run: rule 'slow' is cooling down (")
        assert ex.headline.endswith("s left): it answers its cooldown reply instead")
        assert ex.as_dict()["ran"] is False and ex.steps == []
        real = await explain(b.engine, message_for("slow", **msg), run=True)
        assert real.headline == ex.headline
        assert real.reply["text"].startswith("wait ") and real.steps == []


# -- the dry run changes nothing ----------------------------------------------------------------


async def test_dry_run_keeps_writes_in_the_overlay_and_the_store_unchanged(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'real.db'}"
    async with bot(store=store) as b:
        assert await b.say("joke", user="ann") == "a"
        real = b.engine.services.store
        before = {k: await real.get(k) for k in await real.keys("")}
        ex = await explain(b.engine, message_for("joke", user="ann", platform="test"))
        after = {k: await real.get(k) for k in await real.keys("")}
        assert after == before
        assert await b.var("visits", user="ann") == 1
        assert await b.var("queue") == ["b", "c"]
        # the explanation shows the run as it would happen, and what it would write
        steps = {s["uri"]: s for s in ex.as_dict()["steps"]}
        assert steps["joke/count"]["result"] == 2
        assert steps["joke/take"]["input"] == "b"
        assert steps["joke/never"]["skipped"] is True
        assert steps["joke/never"]["skip_reason"] == "when: '?= visits > 1000' was false"
        assert ex.writes == {"var/global/queue": ["c"], "var/user/test/ann/visits": 2}
        assert ex.reply == {"text": "b", "error": None}
        out = ex.render()
        assert "joke/never [ADJUST] skipped: when: '?= visits > 1000' was false" in out
        assert "var/user/test/ann/visits = 2" in out
        # --run changes the store for real
        real_ex = await explain(
            b.engine, message_for("joke", user="ann", platform="test"), run=True
        )
        assert real_ex.dry_run is False and real_ex.reply["text"] == "b"
        assert await b.var("visits", user="ann") == 2
        assert await b.var("queue") == ["c"]


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A real HTTP server on loopback that records every request it receives."""
    seen: list[dict[str, Any]] = []

    async def hook(request: web.Request) -> web.Response:
        seen.append({"method": request.method, "body": await request.text()})
        return web.json_response({"temp": 21})

    app = web.Application()
    app.router.add_route("*", "/weather/{city}", hook)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


async def test_http_step_is_shown_not_sent_and_sent_with_run(
    upstream: tuple[str, list[dict[str, Any]]],
) -> None:
    base, seen = upstream
    rules = f"""
rules:
  - id: weather
    triggers: ["weather *"]
    steps:
      - plugin: HTTP
        url: "{base}/weather/{{QUESTION}}?api_key=k-123456789&units=metric"
        method: POST
        headers: {{Authorization: "Bearer sk-secret-value-1", X-Trace: "{{USER}}"}}
        json: {{city: "{{QUESTION}}"}}
      - {{plugin: ADJUST, input: "?= STEP_RESULT.get('temp', 'unknown')"}}
"""
    async with bot(rules) as b:
        ex = await explain(b.engine, message_for("weather Paris", user="ann", platform="test"))
        assert seen == []  # the dry run sent nothing
        data = ex.as_dict()
        step = data["steps"][0]
        assert step["plugin"] == "HTTP"
        (sent,) = step["would_send"]
        assert sent["kind"] == "http" and sent["method"] == "POST"
        assert sent["url"].startswith(f"{base}/weather/Paris?")
        assert sent["url"] == f"{base}/weather/Paris?api_key=***&units=metric"
        assert sent["headers"]["authorization"] == "***"
        assert sent["headers"]["x-trace"] == "ann"
        assert sent["body"] == {"city": "Paris"}
        assert step["result"]["dry_run"] is True
        assert data["reply"]["text"] == "unknown"
        assert "sk-secret-value-1" not in json.dumps(data)
        out = ex.render()
        assert f"would send: POST {base}/weather/Paris?" in out
        # --run sends it for real and shows the real result
        real = await explain(
            b.engine, message_for("weather Paris", user="ann", platform="test"), run=True
        )
        assert len(seen) == 1 and json.loads(seen[0]["body"]) == {"city": "Paris"}
        assert real.reply["text"] == "21" and real.steps[0]["result"] == {"temp": 21}
        assert "would_send" not in real.steps[0]


async def test_llm_step_is_answered_by_the_mock_and_its_request_shown() -> None:
    rules = """
rules:
  - id: ask
    triggers: ["ask *"]
    steps:
      - {plugin: LLM, system: "Answer briefly."}
"""
    async with bot(rules) as b:
        ex = await explain(b.engine, message_for("ask MOCK:RESPONSE:forty-two", platform="test"))
        data = ex.as_dict()
        (sent,) = data["steps"][0]["would_send"]
        assert sent["kind"] == "llm" and sent["method"] == "POST"
        assert sent["url"] == "TESTONLY" and sent["model"] == "TESTONLY"
        messages = sent["body"]["messages"]
        assert messages[0]["role"] == "system" and "Answer briefly." in messages[0]["content"]
        assert "MOCK:RESPONSE:forty-two" in messages[-1]["content"]
        assert data["reply"] == {"text": "forty-two", "error": None}
        # usage counters and history went to the overlay, not the store
        real = b.engine.services.store
        assert [k for k in await real.keys("") if not k.startswith("lock")] == []


async def test_a_configured_model_is_never_called_by_a_dry_run(
    upstream: tuple[str, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, seen = upstream
    monkeypatch.setenv("EXPLAIN_TEST_KEY", "sk-explain-test-0123456789")
    llm = {
        "default": "real",
        "models": {
            "real": {
                "base_url": f"{base}/weather/v1",
                "model": "gpt-test",
                "api_key_env": "EXPLAIN_TEST_KEY",
            }
        },
    }
    rules = """
rules:
  - id: ask
    triggers: ["ask *"]
    steps: [{plugin: LLM}]
"""
    async with bot(rules, llm=llm) as b:
        ex = await explain(b.engine, message_for("ask MOCK:RESPONSE:mocked", platform="test"))
        assert seen == []
        (sent,) = ex.steps[0]["would_send"]
        assert sent["url"] == f"{base}/weather/v1/chat/completions"
        assert sent["model"] == "real" and sent["body"]["model"] == "gpt-test"
        assert sent["headers"]["authorization"] == "***"
        assert ex.reply == {"text": "mocked", "error": None}
        assert "sk-explain-test" not in json.dumps(ex.as_dict())
        assert "(the TESTONLY mock answered it here)" in ex.render()
        # the real engine's model is untouched
        assert runtime_of(b.engine.services).config.models["real"].base_url.startswith(base)


async def test_a_failing_step_and_the_steps_after_it() -> None:
    rules = """
rules:
  - id: broken
    triggers: ["broken"]
    on_error: "no: {STEP_ERROR}"
    steps:
      - {id: boom, plugin: ADJUST, input: "?= 1 / 0"}
      - {id: after, plugin: ADJUST, input: "never"}
"""
    async with bot(rules) as b:
        ex = await explain(b.engine, message_for("broken"))
    steps = {s["uri"]: s for s in ex.steps}
    assert "division by zero" in steps["broken/boom"]["error"]
    assert steps["broken/after"]["ran"] is False
    assert steps["broken/after"]["skip_reason"].startswith(
        "not reached: the run ended at broken/boom"
    )
    assert ex.headline.startswith("matched rule 'broken' by trigger 'broken'; the run failed:")
    assert ex.reply["text"].startswith("no: ")


async def test_an_admin_command_is_not_a_rule() -> None:
    async with bot(admins=frozenset({"test:boss"})) as b:
        ex = await explain(b.engine, message_for(".tmy off", user="boss", platform="test"))
        assert ex.headline == "no reply: an admin command (.tmy …): it never reaches the rules"
        ex = await explain(b.engine, message_for(".tmy off", user="ann", platform="test"))
        assert ex.headline.endswith("you are not an admin, so it gets no reply at all")
        assert await b.engine.switch.is_off(Message("", user="boss", platform="test")) is False


async def test_explain_text_for_the_admin_command() -> None:
    async with bot() as b:
        admin = Message(".tmy explain joke", user="boss", platform="test", is_admin=True)
        out = await explain_text(b.engine, admin, "joke")
        assert out.splitlines()[0].startswith("matched rule 'vip' by trigger 'joke*'")
        assert "reply: 'vip joke'" in out
        out = await explain_text(b.engine, admin, "Hello")
        assert out.splitlines()[0].startswith("no reply: no trigger matched 'Hello'")
        assert await explain_text(b.engine, admin, "  ") == "usage: explain TEXT"


# -- the command line -----------------------------------------------------------------------


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "main.yaml").write_text(RULES)
    return folder


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = tmy.cli.main(["explain", *args])
    return code, capsys.readouterr().out


def test_cli_text_and_json(
    rules_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = f"sqlite:///{tmp_path / 'cli.db'}"
    common = ["--rules", str(rules_dir), "--store", store, "--user", "ann", "--platform", "test"]
    code, out = cli(capsys, "joke", *common)
    assert code == 0
    assert out.splitlines()[0].startswith("matched rule 'joke' by trigger 'joke'")
    assert "normalised: 'joke'" in out and "candidates (best first" in out
    code, out = cli(capsys, "joke", *common, "--json")
    assert code == 0
    data = json.loads(out)
    assert {
        "text", "normalised", "matched", "reason", "candidates", "near_misses", "steps",
        "reply", "dry_run",
    } <= set(data)  # fmt: skip
    assert data["dry_run"] is True and data["matched"] == "joke"
    assert set(data["candidates"][0]) >= {
        "rule", "trigger", "kind", "priority", "literal_length", "file", "line", "won",
        "refused",
    }  # fmt: skip
    assert set(data["steps"][0]) >= {"uri", "plugin", "input", "result", "error", "ms", "skipped"}
    assert data["reply"] == {"text": "a", "error": None}
    # a group message without a mention, JSON: the reason is one line, nothing matched
    code, out = cli(capsys, "status", *common, "--group", "--json")
    data = json.loads(out)
    assert data["matched"] is None and "\n" not in data["reason"]
    assert "mention" in data["reason"]
    code, out = cli(capsys, "status", *common, "--group", "--mention")
    assert out.startswith("matched rule 'addressed'")
    # --run changes the store: the next dry run sees the list one shorter
    cli(capsys, "joke", *common, "--run")
    code, out = cli(capsys, "joke", *common, "--json")
    assert json.loads(out)["reply"]["text"] == "b"


def test_cli_private_and_group_are_exclusive(
    rules_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        tmy.cli.main(["explain", "x", "--private", "--group", "--rules", str(rules_dir)])
    capsys.readouterr()


# -- the overlay store on both backends ----------------------------------------------------------


async def test_overlay_reads_through_and_never_writes(store: Any) -> None:
    await store.set("k/a", {"n": 1})
    await store.set("k/b", [1, 2])
    await store.set("k/gone", "x")
    o = OverlayStore(store)
    assert await o.get("k/a") == {"n": 1}
    await o.set("k/a", {"n": 2})
    assert await o.update("k/b", lambda v: (v[1:], v[0])) == 1
    assert await o.delete("k/gone") is True
    assert await o.delete("k/never") is False
    await o.set("k/new", "fresh", ttl=60)
    await o.set("k/short", 1, ttl=0.5)  # long enough to be listed on a loaded machine
    assert await o.get_many(["k/a", "k/b", "k/gone", "k/new", "k/x"]) == [
        {"n": 2}, [2], MISSING, "fresh", MISSING,
    ]  # fmt: skip
    assert await o.keys("k/") == ["k/a", "k/b", "k/new", "k/short"]
    time.sleep(0.55)
    assert await o.get("k/short") is MISSING
    assert await o.keys("k/") == ["k/a", "k/b", "k/new"]
    # a value no store can hold is refused here too
    with pytest.raises(Exception, match="cannot store"):
        await o.set("k/bad", {1, 2})
    # reads hand out copies
    got = await o.get("k/a")
    got["n"] = 99
    assert await o.get("k/a") == {"n": 2}
    async with o.lock("k/a", wait=1):
        pass
    assert o.written() == {"k/a": {"n": 2}, "k/b": [2], "k/gone": MISSING,
                           "k/never": MISSING, "k/new": "fresh"}  # fmt: skip
    # the real store is untouched
    assert await store.get("k/a") == {"n": 1}
    assert await store.get("k/b") == [1, 2]
    assert await store.get("k/gone") == "x"
    assert await store.get("k/new") is MISSING
    await o.close()
    assert await o.get("k/a") == {"n": 1}


async def test_overlay_lock_times_out_locally(store: Any) -> None:
    o = OverlayStore(store)
    async with o.lock("k/l", wait=1):
        with pytest.raises(Exception, match="still held"):
            async with o.lock("k/l", wait=0.05):
                pass
    # the real store's lease was never taken
    async with store.lock("k/l", wait=0.1):
        pass


# -- the index ------------------------------------------------------------------------------


def test_near_misses_of_regex_case_sensitive_triggers() -> None:
    from tmy.app import build_registry
    from tmy.config import Settings

    rules = """
rules:
  - id: cs
    case_sensitive: true
    triggers: ["re:^Order (?P<QUESTION>\\\\d+)$"]
    steps: [{plugin: ADJUST, input: x}]
"""
    book = load_sources([(Path("r.yaml"), rules)], build_registry(Settings(plugins=Path("none"))))
    misses = book.index.near_misses("order 42")
    assert [m.rule.id for m in misses] == ["cs"]
    assert "case_sensitive" in misses[0].why and "'order 42'" in misses[0].why
    assert book.index.near_misses("Order 42") == []
