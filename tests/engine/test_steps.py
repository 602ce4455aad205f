"""How a run goes step by step: list modes, STEP_ERROR, when:, on_error, reply and value limits,
store outages — through the real engine (tmy.testing.Bot)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from tmy.errors import ConfigError, RuleErrors
from tmy.testing import Bot

# -- from test_audit_issue2.py (issue 2 audit: each failed before its fix)


REPO = Path(__file__).resolve().parents[2]


def rules(text: str) -> dict[str, str]:
    return {"audit.yaml": textwrap.dedent(text)}


VISITS = """
variables:
  visits: {scope: user, default: 0}
rules:
  - id: visits
    triggers: [hello]
    steps:
      - {plugin: ADJUST, input: "?= visits + 1", save: visits}
      - {plugin: ADJUST, input: "Hello {USER_NAME}, this is visit number {visits}."}
  - id: echo
    triggers: ["echo *"]
    steps:
      - {plugin: ADJUST}
"""


@pytest.mark.redis
async def test_redis_outage_fails_runs_clearly_and_recovers(redis_server: Any) -> None:
    server = redis_server()
    async with Bot(rules(VISITS), store=server.url) as bot:
        assert await bot.say("hello", user="ann") == "Hello ann, this is visit number 1."
        server.stop(kill=True)
        down = await bot.ask("hello", user="ann")
        assert down.error is not None and "redis" in down.error
        assert down.text.startswith("Sorry, something went wrong")
        assert await bot.say("echo still serving") == "still serving"  # needs no store
        server.start()  # same port, no persistence: the counter starts again
        assert await bot.say("hello", user="ann") == "Hello ann, this is visit number 1."


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


# -- from test_bughunt.py (a bug hunt: each failed before its fix)


async def test_handle_never_raises_on_a_result_json_cannot_render() -> None:
    rules = """
    rules:
      - id: t
        triggers: ["t"]
        steps:
          - plugin: ADJUST
            input: "?= {(1, 2): 'pair'}"
    """
    async with Bot({"t.yaml": textwrap.dedent(rules)}) as bot:
        reply = await bot.ask("t")  # must not raise
        assert reply.rule == "t"


# -- from test_hardening_access.py (issue 7 hardening: who may do what, what a caller may send)


GROW_RULES = """
variables:
  notes: {scope: global, default: []}
rules:
  - id: note
    triggers: ["note *"]
    steps:
      - {plugin: ADJUST, input: "?= notes + [QUESTION]", save: notes}
      - {plugin: ADJUST, input: "noted"}
  - id: count
    triggers: [count]
    steps:
      - {plugin: ADJUST, input: "?= len(notes)"}
"""


async def test_a_value_too_big_for_the_store_is_refused_and_nothing_is_lost() -> None:
    async with Bot({"g.yaml": GROW_RULES}, max_value_bytes=50_000) as bot:
        chunk = "x" * 15_000
        for _ in range(3):
            assert (await bot.ask(f"note {chunk}")).error is None
        refused = await bot.ask(f"note {chunk}")
        assert "max_value_bytes" in refused.error and "50,000" in refused.error
        assert (await bot.say("count")) == "3"  # the stored list is intact


# -- from test_review_issue7.py (review of the issue 7 hardening: attacks that still got through)


ON_ERROR_RULES = """
rules:
  - id: big
    triggers: ["big *"]
    on_error: "Could not answer: {STEP_RESULT}"
    steps:
      - {plugin: ADJUST, input: "{QUESTION}{QUESTION}{QUESTION}{QUESTION}{QUESTION}"}
"""


async def test_an_on_error_text_is_bounded_like_the_reply() -> None:
    async with Bot({"b.yaml": ON_ERROR_RULES}, max_reply_chars=50_000) as bot:
        reply = await bot.ask("big " + "x" * 19_000)
    assert reply.error is not None and "max_reply_chars" in reply.error
    assert len(reply.text) <= 50_000, f"a {len(reply.text):,}-character reply went out"
