"""Seed 004, the executor interface, sentence by sentence (and DESIGN.md "The executor interface").

Each test names the seed paragraph it covers. Persistent behaviour runs on both
stores (``store_url``); everything else on the harness's SQLite default.
"""

from __future__ import annotations

import json
import textwrap
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tmy.message import Message, Reply
from tmy.testing import Bot

PLUGINS = """
from tmy.errors import ExecutorError

async def fail(value, cfg, ctx):
    raise ExecutorError(f"failed on {value!r}")

async def to_bytes(value, cfg, ctx):
    return str(value).encode("utf-8")

async def kind(value, cfg, ctx):
    return f"{type(value).__name__}:{value!r}"

def register(registry):
    for name, run, takes in [("FAIL", fail, None), ("BYTES", to_bytes, None),
                             ("KIND", kind, None), ("STR_KIND", kind, str)]:
        registry.add(name, run, takes=takes)
"""


@pytest.fixture(scope="module")
def plugins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("seed004-plugins")
    (folder / "seed004_plugins.py").write_text(PLUGINS, encoding="utf-8")
    return folder


def chain(*steps: str, trigger: str | list[str] = "go*", head: str = "", on_error: str = "") -> str:
    """Rules text: ``head`` (variables), then rule ``r`` whose steps are flow-style YAML maps."""
    extra = f"    on_error: {on_error!r}\n" if on_error else ""
    body = "".join(f"      - {step}\n" for step in steps)
    triggers = json.dumps([trigger] if isinstance(trigger, str) else trigger)
    rule = f"rules:\n  - id: r\n    triggers: {triggers}\n{extra}    steps:\n{body}"
    return textwrap.dedent(head).strip() + "\n" + rule


def bot(rules: str, plugins: Path, store: str | None = None, **settings: Any) -> Bot:
    return Bot({"seed.yaml": textwrap.dedent(rules)}, plugins=plugins, store=store, **settings)


async def ask(rules: str, plugins: Path, text: str, **kw: Any) -> Reply:
    async with bot(rules, plugins) as b:
        return await b.ask(text, **kw)


# -- A. 组织输入 (input) -----------------------------------------------------------------


async def test_task_cfg_values_are_constants_or_expressions(plugins: Path) -> None:
    rules = chain(
        '{plugin: KIND, input: [1, "two"]}',
        '{plugin: KIND, input: "q={QUESTION}"}',
        '{plugin: KIND, input: "?= len(QUESTION) * 2"}',
        trigger="go *",
    )
    reply = await ask(rules, plugins, "go abc")
    assert [s.result for s in reply.steps] == ["list:[1, 'two']", "str:'q=abc'", "int:6"]


async def test_mode1_empty_input_and_INPUT_take_STEP_RESULT(plugins: Path) -> None:
    rules = chain(
        "{plugin: ADJUST, input: [1, 2]}",
        "{plugin: KIND}",
        '{plugin: ADJUST, input: "", INPUT: ""}',
    )
    reply = await ask(rules, plugins, "go")
    assert reply.steps[1].input == [1, 2]
    assert reply.steps[2].input == "list:[1, 2]"
    assert reply.text == "list:[1, 2]"


async def test_bytes_are_decoded_for_an_executor_that_takes_str(plugins: Path) -> None:
    rules = chain(
        "{plugin: BYTES}",
        "{plugin: STR_KIND}",
        '{plugin: BYTES, input: "{QUESTION}"}',
        "{plugin: KIND}",
        trigger="b *",
    )
    reply = await ask(rules, plugins, "b 你好")
    assert reply.steps[1].result == "str:'你好'"
    assert reply.steps[3].result == "bytes:" + repr("你好".encode())  # others get bytes as is


async def test_star_remainder_is_the_pre_input_in_STEP_RESULT_and_QUESTION(plugins: Path) -> None:
    rules = chain(
        "{plugin: KIND}",
        '{plugin: ADJUST, input: "{STEP_RESULT}|{QUESTION}"}',
        trigger="echo *",
    )
    reply = await ask(rules, plugins, "echo  Hello World ")
    assert reply.steps[0].result == "str:'Hello World'"
    assert reply.text == "str:'Hello World'|Hello World"


async def test_mode2_INPUT_is_a_variable_position(plugins: Path) -> None:
    rules = chain(
        "{plugin: ADJUST, input: [first, second]}",
        '{plugin: ADJUST, INPUT: "STEP_RESULT[0]"}',
        '{plugin: ADJUST, INPUT: "user_info[name]"}',
        '{plugin: ADJUST, input: "{STEP_RESULT}!"}',
        head="variables: {user_info: {scope: user, default: {name: Ann}}}",
    )
    reply = await ask(rules, plugins, "go")
    assert [s.result for s in reply.steps[1:]] == ["first", "Ann", "Ann!"]


SEED_EXAMPLE = chain(
    "{plugin: ADJUST, input: {list: [w0], list_size: 1}, save: words}",
    "{plugin: ADJUST, input: 0, save: 'words[list_size]', when: \"?= not QUESTION\"}",
    '{plugin: ADJUST, input: "(no words)", save: EMPTY_STR}',
    "{plugin: ADJUST, INPUT: \"?= 'words[list][0]' if {words[list_size]!r} else 'EMPTY_STR'\"}",
)


@pytest.mark.parametrize(("question", "expected"), [("go full", "w0"), ("go", "(no words)")])
async def test_mode2_INPUT_expression_computes_the_position(
    plugins: Path, question: str, expected: str
) -> None:
    assert (await ask(SEED_EXAMPLE, plugins, question)).text == expected


LIST_MODES = [
    # mode, member taken, list afterwards
    ("SHIFT", "a", ["b", "c"]),
    ("POPUP", "c", ["a", "b"]),
    ("LOOPBACK", "a", ["b", "c", "a"]),
    ("LOOPFRONT", "c", ["c", "a", "b"]),
]


@pytest.mark.parametrize(("mode", "member", "after"), LIST_MODES)
async def test_mode3_list_modes_on_a_local_list_last_for_this_run(
    plugins: Path, mode: str, member: str, after: list[str]
) -> None:
    rules = chain(
        "{plugin: ADJUST, input: {items: [a, b, c]}, save: box}",
        f'{{plugin: ADJUST, input: {mode}, INPUT: "box[items]"}}',
        "{plugin: ADJUST, input: \"?= [STEP_RESULT, box['items']]\"}",
    )
    async with bot(rules, plugins) as b:
        assert (await b.ask("go")).steps[2].result == [member, after]
        assert (await b.ask("go")).steps[2].result == [member, after]  # a fresh list each run


@pytest.mark.parametrize(("mode", "member", "after"), LIST_MODES)
async def test_mode3_list_modes_on_a_persistent_list_are_stored(
    plugins: Path, store_url: str, mode: str, member: str, after: list[str]
) -> None:
    rules = chain(
        f"{{plugin: ADJUST, input: {mode}, INPUT: jokes, when: \"?= QUESTION == 'g'\"}}",
        f'{{plugin: ADJUST, input: {mode}, INPUT: "queue[todo]", when: "?= QUESTION == \'u\'"}}',
        trigger="go *",
        head="""
        variables:
          jokes: {scope: global, default: [a, b, c]}
          queue: {scope: user, default: {todo: [a, b, c]}}
        """,
    )
    async with bot(rules, plugins, store_url) as b:
        assert await b.say("go g", user="ann") == member
        assert await b.var("jokes") == after
        assert await b.say("go u", user="ann") == member
        assert await b.var("queue[todo]", user="ann") == after
        assert await b.var("queue[todo]", user="bob") == ["a", "b", "c"]
    async with bot(rules, plugins, store_url) as b:  # a new engine on the same store
        assert await b.var("jokes") == after


async def test_mode3_two_runs_walk_a_persistent_list(plugins: Path, store_url: str) -> None:
    rules = chain(
        "{plugin: ADJUST, input: LOOPFRONT, INPUT: jokes}",
        head="variables: {jokes: {scope: global, default: [a, b, c]}}",
    )
    async with bot(rules, plugins, store_url) as b:
        assert [await b.say("go") for _ in range(4)] == ["c", "b", "a", "c"]
        assert await b.var("jokes") == ["c", "a", "b"]


async def test_mode3_an_expression_may_compute_the_list_mode(plugins: Path) -> None:
    rules = chain(
        "{plugin: ADJUST, input: \"?= 'SHIFT' if QUESTION == 'first' else 'POPUP'\", INPUT: jokes}",
        trigger="take *",
        head="variables: {jokes: {scope: global, default: [a, b, c, d]}}",
    )
    async with bot(rules, plugins) as b:
        assert await b.say("take first") == "a"
        assert await b.say("take last") == "d"
        assert await b.var("jokes") == ["b", "c"]


@pytest.mark.parametrize(
    ("setup", "hint"),
    [
        ("{plugin: ADJUST, input: 'not a list', save: v}", "needs a list"),
        ("{plugin: ADJUST, input: {k: 1}, save: v}", "needs a list"),
        ("{plugin: ADJUST, input: [], save: v}", "empty"),
    ],
)
async def test_mode3_error_when_INPUT_is_not_a_list_or_is_empty(
    plugins: Path, setup: str, hint: str
) -> None:
    rules = chain(
        setup,
        "{plugin: ADJUST, input: SHIFT, INPUT: v}",
        "{plugin: ADJUST, input: never}",
        on_error="oops: {STEP_ERROR}",
    )
    reply = await ask(rules, plugins, "go")
    assert reply.error is not None and hint in reply.error
    assert reply.text == f"oops: {reply.error}"
    assert len(reply.steps) == 2  # the chain stopped


async def test_mode3_empty_persistent_list_is_an_error_and_stays_empty(
    plugins: Path, store_url: str
) -> None:
    rules = chain(
        "{plugin: ADJUST, input: POPUP, INPUT: pool}",
        head="variables: {pool: {scope: global, default: []}}",
    )
    async with bot(rules, plugins, store_url) as b:
        reply = await b.ask("go")
        assert reply.error is not None and "empty" in reply.error
        assert await b.var("pool") == []


async def test_mode4_other_input_is_used_as_is_with_INPUT_bound_as_a_temporary(
    plugins: Path,
) -> None:
    rules = chain(
        '{plugin: ADJUST, input: "first: {INPUT}", INPUT: "jokes[0]"}',
        '{plugin: ADJUST, input: "?= INPUT * 2", INPUT: price}',
        "{plugin: ADJUST, input: \"?= len(INPUT)\", INPUT: \"?= 'jokes' if price else 'x'\"}",
        '{plugin: ADJUST, input: "plain"}',
        head="""
        variables:
          jokes: {scope: global, default: [a, b]}
          price: {scope: global, default: 21}
        """,
    )
    async with bot(rules, plugins) as b:
        reply = await b.ask("go")
        assert [s.result for s in reply.steps] == ["first: a", 42, 2, "plain"]
        assert await b.var("jokes") == ["a", "b"]  # reading through INPUT changes nothing
        assert await b.var("price") == 21


# -- B. 组织输出 (output) ----------------------------------------------------------------


async def test_result_goes_to_STEP_RESULT_whatever_its_type(plugins: Path) -> None:
    rules = chain(
        "{plugin: ADJUST, input: {a: [1, 2]}}",
        "{plugin: ADJUST, input: \"?= STEP_RESULT['a'][1] + 1\"}",
    )
    reply = await ask(rules, plugins, "go")
    assert reply.steps[0].result == {"a": [1, 2]}
    assert reply.text == "3"


async def test_an_error_puts_its_message_as_str_into_STEP_ERROR(plugins: Path) -> None:
    rules = chain(
        "{plugin: FAIL}",
        trigger="go *",
        on_error="E[{STEP_ERROR}]",
    )
    reply = await ask(rules, plugins, "go now")
    assert reply.error == "failed on 'now'"
    assert reply.text == "E[failed on 'now']"
    assert reply.steps[0].error == "failed on 'now'"


@pytest.mark.parametrize("scope", ["local", "persistent"])
async def test_save_stores_the_result_at_a_nested_position_too(
    plugins: Path, store_url: str, scope: str
) -> None:
    rules = chain(
        '{plugin: ADJUST, input: v, save: "some_var[attr1][8][attr2]"}',
        '{plugin: ADJUST, input: "{some_var[attr1][8][attr2]}|{STEP_RESULT}|{some_var}"}',
        head="variables: {some_var: {scope: chat, default: {}}}" if scope != "local" else "",
    )
    async with bot(rules, plugins, store_url) as b:
        assert await b.say("go", chat="g") == 'v|v|{"attr1": {"8": {"attr2": "v"}}}'
        if scope == "persistent":
            assert await b.var("some_var", chat="g") == {"attr1": {"8": {"attr2": "v"}}}
            assert await b.var("some_var", chat="other") == {}


async def test_empty_save_saves_nothing(plugins: Path) -> None:
    rules = chain('{plugin: ADJUST, input: new, save: ""}', head="variables: {keep: {default: s}}")
    async with bot(rules, plugins) as b:
        assert await b.say("go") == "new"
        assert await b.var("keep") == "s"


async def test_save_replaces_old_values_whatever_their_type(plugins: Path, store_url: str) -> None:
    rules = chain(
        '{plugin: ADJUST, input: now a string, save: "v[a]"}',
        '{plugin: ADJUST, input: 5, save: "v[s][deeper]"}',
        '{plugin: ADJUST, input: [x], save: "v[new][level]"}',
        '{plugin: ADJUST, input: y, save: "v[new][level][1]"}',
        '{plugin: ADJUST, input: 7, save: v, when: "{QUESTION}"}',
        trigger="go *",
        head="variables: {v: {scope: global, default: {a: [1, 2], s: text}}}",
    )
    async with bot(rules, plugins, store_url) as b:
        await b.say("go")
        expected = {"a": "now a string", "s": {"deeper": 5}, "new": {"level": ["x", "y"]}}
        assert await b.var("v") == expected
        await b.say("go whole")
        assert await b.var("v") == 7


async def test_save_to_STEP_ERROR_ends_the_run(plugins: Path) -> None:
    rules = chain(
        "{plugin: ADJUST, input: \"?= 'too long' if len(QUESTION) > 5 else ''\", save: STEP_ERROR}",
        '{plugin: ADJUST, input: "ok {QUESTION}"}',
        trigger="say *",
        on_error="refused: {STEP_ERROR}",
    )
    async with bot(rules, plugins) as b:
        assert await b.say("say hi") == "ok hi"  # an empty value does not stop anything
        reply = await b.ask("say far too long")
        assert (reply.error, reply.text) == ("too long", "refused: too long")
        assert len(reply.steps) == 1


# -- C. 跨执行体的变量控制 (run locals) ------------------------------------------------------


async def test_MAGIC_is_set_before_the_steps_and_works_in_conditions(plugins: Path) -> None:
    rules = chain(
        '{plugin: ADJUST, input: "[{MAGIC}]"}',
        '{plugin: ADJUST, input: "formal {STEP_RESULT}", when: "?= MAGIC == \'hello\'"}',
        trigger=["hello*", "hi"],
    )
    async with bot(rules, plugins) as b:
        assert await b.say("hi") == "[hi]"
        assert await b.say("hello there") == "formal [hello]"


async def test_STEP_URI_uses_the_step_id_or_its_position(plugins: Path) -> None:
    rules = chain(
        '{id: fetch, plugin: ADJUST, input: "{STEP_URI}"}',
        '{plugin: ADJUST, input: "{STEP_RESULT} {STEP_URI}"}',
    )
    reply = await ask(rules, plugins, "go")
    assert reply.text == "r/fetch r/1"
    assert [s.uri for s in reply.steps] == ["r/fetch", "r/1"]


async def test_STEP_ERROR_is_reset_for_each_step_and_continue_goes_on(plugins: Path) -> None:
    rules = chain(
        "{plugin: FAIL, input: x, on_error: continue}",
        '{plugin: ADJUST, input: "[{STEP_ERROR}]"}',
    )
    reply = await ask(rules, plugins, "go")
    assert reply.steps[0].error == "failed on 'x'"
    assert (reply.error, reply.text) == (None, "[]")


async def test_a_failing_step_stops_the_chain_by_default(plugins: Path) -> None:
    rules = chain(
        "{plugin: FAIL, input: x}",
        "{plugin: ADJUST, input: never}",
    )
    reply = await ask(rules, plugins, "go")
    assert [s.uri for s in reply.steps] == ["r/0"]
    assert reply.error == "failed on 'x'"
    # the default reply keeps the detail out of the chat; reply.error and the log have it
    assert reply.text == "Sorry, something went wrong."


async def test_when_false_skips_the_step(plugins: Path) -> None:
    rules = chain(
        '{plugin: ADJUST, input: big, when: "?= int(QUESTION) > 10"}',
        '{plugin: ADJUST, input: "{STEP_RESULT}!", when: "{QUESTION}"}',
        trigger="n *",
    )
    async with bot(rules, plugins) as b:
        assert await b.say("n 50") == "big!"
        small = await b.ask("n 5")
        assert small.text == "5!"
        assert small.steps[0].skipped
        assert (await b.ask("n 0")).text == "0"  # "0" is false


async def test_PRE_and_POST_ANSWER_wrap_the_result_and_accumulate(plugins: Path) -> None:
    rules = chain(
        '{plugin: ADJUST, input: "{PRE_ANSWER}[one]", save: PRE_ANSWER}',
        '{plugin: ADJUST, input: "{PRE_ANSWER}[two] ", save: PRE_ANSWER}',
        '{plugin: ADJUST, input: " (end)", save: POST_ANSWER}',
        "{plugin: ADJUST, input: body}",
    )
    async with bot(rules, plugins) as b:
        assert await b.say("go") == "[one][two] body (end)"
        assert await b.say("go") == "[one][two] body (end)"  # locals start empty each run


async def test_STEP_SUMMARY_is_kept_for_this_conversation(plugins: Path) -> None:
    rules = chain(
        '{plugin: ADJUST, input: ["{QUESTION}", short], save: STEP_SUMMARY, when: "{QUESTION}"}',
        '{plugin: ADJUST, input: "not a pair", save: STEP_SUMMARY, when: "?= MAGIC == \'bad\'"}',
        trigger=["sum*", "bad"],
    )
    async with bot(rules, plugins) as b:
        here = Message("", user="ann", chat="g1", platform="test")
        assert await b.engine.summary_for(here) is None
        await b.say("sum a very long question", user="ann", chat="g1")
        assert await b.engine.summary_for(here) == ["a very long question", "short"]
        await b.say("bad", user="ann", chat="g1")  # not an [ask, answer] pair: ignored
        await b.say("sum", user="ann", chat="g1")  # no STEP_SUMMARY this time
        assert await b.engine.summary_for(here) == ["a very long question", "short"]
        other = Message("", user="bob", chat="g1", platform="test")
        assert await b.engine.summary_for(other) is None


async def test_who_and_where_locals(plugins: Path) -> None:
    rules = chain(
        '{plugin: ADJUST, input: "{USER}|{USER_NAME}|{CHAT}|{PLATFORM}|{TEXT}"}',
        '{plugin: ADJUST, input: "{NOW}"}',
        trigger="who*",
    )
    async with bot(rules, plugins, timezone="Asia/Shanghai") as b:
        reply = await b.ask(" who am I ", user="u1", user_name="Ann", chat="g1", platform="qq")
        assert reply.steps[0].result == "u1|Ann|g1|qq| who am I "  # TEXT: as sent
        now = datetime.fromisoformat(reply.text)
        assert now.utcoffset() == timedelta(hours=8)
        private = await b.ask("who", user="u2")
        assert private.steps[0].result == "u2|u2|private:u2|test|who"
