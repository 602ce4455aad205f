"""Audit of issue 2 (the core rule engine): what the rest of the suite leaves open.

Tests pin behaviour nothing else covers: the shipped samples end to end on both
stores, a Redis outage seen from the engine, a list mode computed on a local list;
and one test per defect the audit found (hostile input, aliasing, load-time checks),
each failing before its fix.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from tmy import logs
from tmy.adapters.http import HttpAdapter
from tmy.errors import ConfigError, EvalError, RuleErrors
from tmy.executors import default_registry
from tmy.rulebook.loader import load_sources
from tmy.store import open_store
from tmy.testing import Bot
from tmy.values.compiled import compile_value

REPO = Path(__file__).resolve().parent.parent


def rules(text: str) -> dict[str, str]:
    return {"audit.yaml": textwrap.dedent(text)}


def samples(store: str) -> Bot:
    return Bot(REPO / "rules", plugins=REPO / "plugins", store=store)


# -- issue item 10: every sample in rules/basics.yaml does its job, on both stores ---------


async def test_every_sample_feature_works_on_both_stores(store_url: str) -> None:
    ann: dict[str, Any] = {"user": "ann", "user_name": "Ann"}
    async with samples(store_url) as bot:
        jokes = await bot.var("jokes")  # rotating list: LOOPBACK on a global, stored
        assert [await bot.say("joke", user=u) for u in "abcd"] == [*jokes, jokes[0]]
        assert await bot.var("jokes") == [*jokes[1:], jokes[0]]
        assert await bot.say("hello", **ann) == "Hello Ann, this is visit number 1."
        assert await bot.say("hi", **ann) == "Hello Ann, this is visit number 2."
        assert await bot.var("visits", user="bob") == 0  # per user
        assert await bot.say("echo  Hello There ") == "Hello There"  # prefix + QUESTION
        bare = await bot.ask("echo")
        assert (bare.error, bare.text) == ("nothing to echo", "Say something after 'echo'.")
        assert await bot.say("parity 7") == "7 is odd"  # when: branch
        assert await bot.say("parity 8") == "8 is even"
        assert (await bot.ask("parity x")).text == "'x' is not a whole number."
        assert await bot.say("note buy milk", **ann) == "Noted for Ann: buy milk"  # nested global
        assert await bot.var("notes") == {"ann": {"last": "buy milk"}}
        assert await bot.say("recall", user="ann") == "Your last note: buy milk"
        nothing = await bot.ask("recall", user="bob")
        assert nothing.text == "You have no note yet."
        assert "ann" not in (nothing.error or "")  # no other user's id in the error
        guard = await bot.ask("todo add", user="ann")  # STEP_ERROR guard
        assert (guard.error, guard.text) == ("say what to add", "Cannot add: say what to add.")
        assert await bot.say("todo add eggs", user="ann") == 'Added. ["eggs"]'
        assert await bot.say("todo next", user="ann") == "Next: eggs"  # SHIFT, per user
        assert (await bot.ask("todo next", user="ann")).text == "Your todo list is empty."
        status = await bot.say("status", **ann)  # PRE_ANSWER accumulation with ADJUST
        assert status.startswith("user: Ann\nvisits: 2\njokes in rotation: [")
        assert status.endswith(" (via test)") and "\ntime: " in status
        assert await bot.say("shout hey") == "HEY!!!"  # the example plugin
        assert await bot.say("many thanks", chat="g1") == (  # suffix trigger, chat scope
            "You're welcome! Thanks in this chat so far: 1."
        )
        assert (await bot.say("Thank you", chat="g1")).endswith("so far: 2.")
        assert (await bot.say("thanks", chat="g2")).endswith("so far: 1.")


# -- quality bar: Redis down mid-way, then back ----------------------------------------------


@pytest.mark.redis
async def test_redis_outage_fails_runs_clearly_and_recovers(redis_server: Any) -> None:
    server = redis_server()
    async with samples(server.url) as bot:
        assert await bot.say("hello", user="ann") == "Hello ann, this is visit number 1."
        server.stop(kill=True)
        down = await bot.ask("hello", user="ann")
        assert down.error is not None and "redis" in down.error
        assert down.text.startswith("Sorry, something went wrong")
        assert await bot.say("echo still serving") == "still serving"  # needs no store
        server.start()  # same port, no persistence: the counter starts again
        assert await bot.say("hello", user="ann") == "Hello ann, this is visit number 1."


# -- seed 004 mode 3: an expression computing the list mode, on a local list -------------------


COMPUTED = [("POPUP", "z", ["x", "y"]), ("LOOPFRONT", "z", ["z", "x", "y"])]


@pytest.mark.parametrize(("mode", "member", "after"), COMPUTED)
async def test_expression_computes_a_list_mode_on_a_local_list(
    mode: str, member: str, after: list[str]
) -> None:
    text = """
    rules:
      - id: r
        triggers: ["go *"]
        steps:
          - {plugin: ADJUST, input: [x, y, z], save: lst}
          - {plugin: ADJUST, input: "?= QUESTION.upper()", INPUT: lst}
          - {plugin: ADJUST, input: "?= [STEP_RESULT, lst]"}
    """
    async with Bot(rules(text)) as bot:
        assert (await bot.ask(f"go {mode.lower()}")).steps[2].result == [member, after]


# -- defects the audit found (each failed before its fix) ----------------------------------


def test_repeated_squaring_is_refused_like_a_huge_power() -> None:
    # each level doubles the digits; 12 levels already take minutes of blocked event loop
    squares = "[c*c for c in [b*b for b in [a*a for a in [9**9999]]]][0] > 0"
    with pytest.raises(EvalError):
        compile_value("?= " + squares).evaluate({})


async def test_a_lone_surrogate_in_a_message_is_answered_over_http(tmp_path: Path) -> None:
    logs.configure("info", tmp_path / "tmy.log")  # the daemon's default level
    try:
        async with samples(f"sqlite:///{tmp_path / 'h.db'}") as bot:
            adapter = HttpAdapter("127.0.0.1:0")
            await adapter.start(bot.engine.handle)
            try:
                async with httpx.AsyncClient(timeout=30) as client:
                    url = f"http://127.0.0.1:{adapter.port}/v1/messages"
                    body = b'{"text": "echo \\ud800"}'  # valid JSON: an escaped lone surrogate
                    got = await client.post(
                        url, content=body, headers={"Content-Type": "application/json"}
                    )
            finally:
                await adapter.stop()
        assert got.status_code == 200 and got.json()["rule"] == "echo"
    finally:
        logs.configure("warning")


BOOM = """
rules:
  - id: boom
    triggers: [boom]
    steps: [{plugin: ADJUST, input: "?= 1 / 0"}]
"""


async def test_a_bad_error_reply_is_refused_at_start_or_never_raises() -> None:
    try:
        async with Bot(rules(BOOM), error_reply="Oops {NOPE}") as bot:
            reply = await bot.ask("boom")
    except ConfigError:
        return  # refused at start: fine
    assert reply.error is not None


async def test_a_list_mode_on_a_local_copy_leaves_the_global_alone() -> None:
    text = """
    variables:
      jokes: {scope: global, default: [a, b, c]}
    rules:
      - id: r
        triggers: [go]
        steps:
          - {plugin: ADJUST, input: "{jokes}", save: box}
          - {plugin: ADJUST, input: SHIFT, INPUT: box}
          - {plugin: ADJUST, INPUT: jokes}
    """
    async with Bot(rules(text)) as bot:
        assert await bot.var("jokes") == ["a", "b", "c"]
        assert (await bot.ask("go")).steps[2].result == ["a", "b", "c"]  # got ["b", "c"]


async def test_when_that_reads_the_steps_INPUT_loads_and_runs_or_is_refused() -> None:
    text = """
    variables:
      jokes: {scope: global, default: [a, b]}
    rules:
      - id: r
        triggers: [go]
        steps:
          - {plugin: ADJUST, INPUT: jokes, input: "n={INPUT}", when: "?= len(INPUT) > 1"}
    """
    try:
        async with Bot(rules(text)) as bot:
            reply = await bot.ask("go")
    except RuleErrors:
        return  # refused at load time: fine
    assert reply.error is None  # got "undefined variable 'INPUT'"


def test_a_yaml_alias_bomb_is_a_rule_error_with_file_and_line() -> None:
    levels = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcde", "bcdef", strict=True):  # 9**6 = 531,441 strings when expanded
        levels.append(f"{name}: &{name} [{','.join([f'*{prev}'] * 9)}]")
    text = "variables:\n  x:\n    default:\n" + "".join(f"      {v}\n" for v in levels)
    with pytest.raises(RuleErrors, match=r"bomb\.yaml:\d+"):
        load_sources([(Path("bomb.yaml"), text)], default_registry())


async def test_an_empty_list_or_map_saved_to_STEP_ERROR_is_no_error() -> None:
    text = """
    rules:
      - id: r
        triggers: [go]
        steps:
          - {plugin: ADJUST, input: [], save: STEP_ERROR}
          - {plugin: ADJUST, input: {}, save: STEP_ERROR}
          - {plugin: ADJUST, input: ok}
    """
    async with Bot(rules(text)) as bot:
        assert await bot.say("go") == "ok"  # README: a *non-empty* result ends the run


async def test_a_computed_list_mode_without_INPUT_is_an_error() -> None:
    text = """
    rules:
      - id: r
        triggers: [go]
        steps: [{plugin: ADJUST, input: "?= 'SH' + 'IFT'"}]
    """
    async with Bot(rules(text)) as bot:
        reply = await bot.ask("go")
    assert reply.error is not None and "INPUT" in reply.error  # got the answer "SHIFT"


async def test_a_templated_option_of_the_wrong_type_is_a_clear_error() -> None:
    text = """
    variables:
      jokes: {scope: global, default: [a]}
    rules:
      - id: r
        triggers: [go]
        steps: [{plugin: UPPER, input: x, suffix: "{jokes}"}]
    """
    async with Bot(rules(text), plugins=REPO / "plugins") as bot:
        reply = await bot.ask("go")
    assert reply.error is None or "suffix" in reply.error  # got a TypeError from the plugin


def test_a_bad_format_spec_is_a_load_time_error() -> None:
    text = "rules:\n  - id: r\n    triggers: [go]\n    steps:\n"
    text += '      - {plugin: ADJUST, input: "{STEP_RESULT:>>>>}"}\n'
    with pytest.raises(RuleErrors, match=r"fmt\.yaml:5"):
        load_sources([(Path("fmt.yaml"), text)], default_registry())


def test_the_sqlite_url_help_says_where_relative_paths_go(tmp_path: Path) -> None:
    relative = open_store("sqlite:///rel.db")
    assert relative.path == Path.cwd() / "rel.db"  # type: ignore[attr-defined]
    with pytest.raises(ConfigError) as refused:
        open_store("sqlite://x.db")
    assert "config directory" not in str(refused.value)
