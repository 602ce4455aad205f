"""Scenes (general, branch, loop) and output contracts, with their retry hints — through the engine.

Rules run in :class:`tmy.testing.Bot` (real engine, real SQLite store); the
model is either the TESTONLY mock (no llm config) or the fake provider on
loopback, whose request log shows exactly what was sent.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.llm_fake_provider import FakeProvider, Reply
from tests.support.llm_helpers import ASK, on, rules
from tmy.testing import Bot

# -- scenes --------------------------------------------------------------------------------------


async def test_general_scene_prompt_intent_and_temperature(provider: FakeProvider) -> None:
    steps = ASK + '        system: "Be brief."\n'
    async with Bot({"r.yaml": rules(steps, intent="help with cooking")}, llm=on(provider)) as bot:
        await bot.say("t how long to boil an egg?")
    body = provider.seen()[0]
    assert body["temperature"] == 0.7
    assert body["messages"][0] == {
        "role": "system",
        "content": (
            "You are a helpful assistant in a chat. Answer in the language of the question.\n\n"
            "Be brief.\n\nIntent: help with cooking"
        ),
    }


async def test_system_prompt_order_scene_intent_hint_constraint(provider: FakeProvider) -> None:
    steps = ASK + '        system: "Count carefully."\n        returns: int\n'
    provider.script("fake", [Reply("many"), Reply("7")])
    config = on(provider, scene_prompts={"general": "You are the counting bot."})
    async with Bot({"r.yaml": rules(steps, intent="count things")}, llm=config) as bot:
        reply = await bot.ask("t how many legs has a spider, minus one?")
        assert reply.error is None and reply.steps[0].result == 7
    first, second = provider.seen()
    scene, system, intent = "You are the counting bot.", "Count carefully.", "Intent: count things"
    constraint = "Output format: int. Reply with one integer only (digits, no words, no units)."
    hint = (
        "Retry hint: Your previous answer was rejected: the answer 'many' is not an integer. "
        "Answer again, following the output format exactly."
    )
    assert first["messages"][0]["content"] == "\n\n".join([scene, system, intent, constraint])
    assert second["messages"][0]["content"] == "\n\n".join(
        [scene, system, intent, hint, constraint]
    )
    assert first["messages"][1:] == second["messages"][1:]  # only the system prompt changed
    assert first["temperature"] == second["temperature"] == 0.7  # the general scene's


async def test_branch_scene_runs_or_skips_the_step(provider: FakeProvider) -> None:
    steps = """      - plugin: ADJUST
        input: "weather step ran"
        when_llm: "the message asks about the weather"
"""
    provider.script("fake", [Reply("1"), Reply("0")])
    custom = {"scene_prompts": {"branch": "Judge strictly."}}
    async with Bot(
        {"r.yaml": rules(steps, intent="a weather bot")}, llm=on(provider, **custom)
    ) as bot:
        assert await bot.say("t rain tomorrow?") == "weather step ran"
        reply = await bot.ask("t tell me a joke")
        assert reply.text == "tell me a joke" and reply.steps[0].skipped
    judge = provider.seen()[0]
    assert judge["temperature"] == 0.1
    system = judge["messages"][0]["content"]
    assert system.startswith("Judge strictly.\n\nIntent: a weather bot\n\nOutput format: 1-or-0")
    assert judge["messages"][1]["content"] == (
        "Condition: the message asks about the weather\n\nContent:\nrain tomorrow?"
    )


async def test_branch_scene_ambiguous_answer_retries_with_a_hint(provider: FakeProvider) -> None:
    steps = """      - plugin: ADJUST
        input: "ran"
        when_llm: "it is a greeting"
"""
    provider.script("fake", [Reply("Probably yes"), Reply("1.")])
    async with Bot({"r.yaml": rules(steps)}, llm=on(provider)) as bot:
        assert await bot.say("t hi") == "ran"
    first, second = provider.seen()
    assert "Retry hint:" not in first["messages"][0]["content"]
    hinted = second["messages"][0]["content"]
    assert (
        "Retry hint: Your previous answer was rejected: the answer 'Probably yes' is neither"
        in (hinted)
    )
    assert hinted.index("Retry hint:") < hinted.index("Output format: 1-or-0")


async def test_branch_scene_keeps_ambiguous_then_errors(provider: FakeProvider) -> None:
    steps = """      - plugin: ADJUST
        when_llm: {condition: "it is a greeting", retries: 1}
"""
    provider.default = lambda body: Reply("I cannot say")
    async with Bot({"r.yaml": rules(steps)}, llm=on(provider)) as bot:
        reply = await bot.ask("t hi")
        assert reply.error.startswith(
            "when_llm: the model's answer did not meet the output "
            "contract after 2 attempts: the answer 'I cannot say'"
        )
    assert len(provider.seen()) == 2


async def test_mock_fail_in_the_branch_scene_is_an_error() -> None:
    steps = """      - plugin: ADJUST
        when_llm: "anything"
"""
    async with Bot({"r.yaml": rules(steps)}) as bot:
        reply = await bot.ask("t MOCK:FAIL")
        assert reply.error is not None and reply.error.startswith("when_llm: ")
        assert len(reply.steps[0].extra["when_llm"][0]["calls"]) == 3


async def test_loop_scene_repeats_while_the_model_says_1() -> None:
    text = """
variables:
  queue: {scope: user, default: ["MOCK:TRUE", "MOCK:TRUE", "MOCK:FALSE", "left over"]}
rules:
  - id: drain
    triggers: ["drain"]
    steps:
      - plugin: ADJUST
        input: SHIFT
        INPUT: queue
        while_llm: "there is more work"
"""
    async with Bot({"r.yaml": text}) as bot:
        reply = await bot.ask("drain")
        assert reply.text == "MOCK:FALSE"
        assert await bot.var("queue") == ["left over"]
        record = reply.steps[0]
        assert record.extra["loops"] == 3 and len(record.extra["while_llm"]) == 3
        assert all(j["scene"] == "loop" for j in record.extra["while_llm"])


async def test_loop_scene_against_a_provider(provider: FakeProvider) -> None:
    steps = """      - plugin: ADJUST
        input: "?= STEP_RESULT + '+'"
        while_llm: "the text is still short"
"""
    provider.script("fake", [Reply("1"), Reply("1"), Reply("0")])
    config = on(provider, scene_prompts={"loop": "Decide about looping."})
    config["models"]["fake"]["temperature"] = 0.9  # judgements still use 0.1
    async with Bot({"r.yaml": rules(steps, intent="grow a text")}, llm=config) as bot:
        reply = await bot.ask("t x")
        assert reply.error is None and reply.text == "x+++"
        assert reply.steps[0].extra["loops"] == 3
    judgements = provider.seen()
    assert len(judgements) == 3
    for n, body in enumerate(judgements, start=1):
        assert body["temperature"] == 0.1
        assert body["messages"][0]["content"] == (
            "Decide about looping.\n\nIntent: grow a text\n\n"
            "Output format: 1-or-0. Reply with exactly one character: 1 (yes) or 0 (no)."
        )
        assert body["messages"][1]["content"] == (
            f"Condition: the text is still short\nRuns so far: {n}\n\nContent:\nx{'+' * n}"
        )


async def test_loop_scene_stops_at_max_loops() -> None:
    steps = """      - plugin: ADJUST
        input: "MOCK:TRUE again"
        while_llm: "keep going"
        max_loops: 4
"""
    async with Bot({"r.yaml": rules(steps)}) as bot:
        reply = await bot.ask("t go")
        assert reply.error is None
        assert reply.steps[0].extra["loops"] == 4 and reply.steps[0].extra["loops_capped"]
        assert len(reply.steps[0].extra["while_llm"]) == 3


# -- contracts ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "answer", "expected"),
    [
        ("returns: int", " 42. ", 42),
        ("returns: float", "3.5", 3.5),
        ("returns: bool", "False", False),
        ("returns: list", 'Here: ```json\n["a", "b"]\n```', ["a", "b"]),
        ("returns: dict", '{"k": 1}', {"k": 1}),
        ("returns: str", "  plain  ", "plain"),
        ('choices: ["red", "green"]', "Green.", "green"),
        ("choices: [1, 2, 3]", "2", 2),  # the choice as the rule wrote it: an int
    ],
)
async def test_returns_and_choices_parse_the_answer(
    provider: FakeProvider, option: str, answer: str, expected: Any
) -> None:
    steps = ASK + f"        {option}\n        save: got\n"
    provider.script("fake", [Reply(answer)])
    async with Bot({"r.yaml": rules(steps)}, llm=on(provider)) as bot:
        reply = await bot.ask("t q")
        assert reply.error is None
        assert reply.steps[0].result == expected
    system = provider.seen()[0]["messages"][0]["content"]
    assert "Output format:" in system


async def test_output_schema_forces_json_and_repairs(provider: FakeProvider) -> None:
    steps = (
        ASK
        + """        output:
          type: object
          properties:
            translation: {type: string}
            confidence: {type: number, minimum: 0, maximum: 1}
          required: [translation, confidence]
"""
    )
    provider.script(
        "fake",
        [Reply('{"translation": "Hallo"}'), Reply('{"translation": "Hallo", "confidence": 0.9}')],
    )
    async with Bot({"r.yaml": rules(steps)}, llm=on(provider)) as bot:
        reply = await bot.ask("t hello")
        assert reply.error is None
        assert reply.steps[0].result == {"translation": "Hallo", "confidence": 0.9}
        assert reply.steps[0].extra["llm"]["repairs"] == 1
    first, second = provider.seen()
    assert first["response_format"] == {"type": "json_object"}
    assert '"required": [\n    "translation"' in first["messages"][0]["content"]
    assert "'confidence' is a required property" in second["messages"][0]["content"]


@pytest.mark.parametrize("how", ["json_object", "json_schema", "none"])
async def test_how_json_is_forced_is_the_models_choice(provider: FakeProvider, how: str) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    steps = ASK + f"        output: {json.dumps(schema)}\n"
    config = on(provider)
    config["models"]["fake"]["response_format"] = how
    provider.script("fake", [Reply('{"n": 3}')])
    async with Bot({"r.yaml": rules(steps)}, llm=config) as bot:
        assert (await bot.ask("t n?")).steps[0].result == {"n": 3}
    expected = {
        "json_object": {"type": "json_object"},
        "json_schema": {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}},
        "none": None,
    }[how]
    assert provider.seen()[0].get("response_format") == expected


async def test_output_schema_gives_up_with_a_clear_error(provider: FakeProvider) -> None:
    steps = ASK + "        output: {type: object, required: [n]}\n        retries: 1\n"
    provider.default = lambda body: Reply("no JSON here")
    async with Bot({"r.yaml": rules(steps)}, llm=on(provider)) as bot:
        reply = await bot.ask("t hi")
        assert reply.error == (
            "the model's answer did not meet the output contract after 2 "
            "attempts: the answer is not valid JSON: 'no JSON here'"
        )
    assert len(provider.seen()) == 2


YAML_OUTPUT = """        format: yaml
        output:
          type: object
          properties: {title: {type: string}, tags: {type: array, items: {type: string}}}
          required: [title, tags]
"""


async def test_output_yaml_on_the_mock() -> None:
    steps = ASK + YAML_OUTPUT
    async with Bot({"r.yaml": rules(steps)}) as bot:
        reply = await bot.ask("t a poem")
        assert reply.error is None
        assert reply.steps[0].result == {"title": "a poem", "tags": ["a poem"]}


async def test_output_yaml_is_parsed_validated_and_repaired(provider: FakeProvider) -> None:
    steps = ASK + YAML_OUTPUT + "        save: poem\n"
    provider.script(
        "fake",
        [
            Reply("title: [unclosed"),  # not YAML
            Reply("```yaml\ntitle: Rain\n```"),  # YAML, but no tags
            Reply("```yaml\ntitle: Rain\ntags: [weather, sad]\n```"),
        ],
    )
    async with Bot({"r.yaml": rules(steps)}, llm=on(provider)) as bot:
        reply = await bot.ask("t a poem")
        assert reply.error is None
        assert reply.steps[0].result == {"title": "Rain", "tags": ["weather", "sad"]}
        assert reply.steps[0].extra["llm"]["repairs"] == 2
    first, second, third = provider.seen()
    assert "response_format" not in first  # YAML is asked for in words, not forced as JSON
    assert "Output format: YAML." in first["messages"][0]["content"]
    assert "the answer is not valid YAML" in second["messages"][0]["content"]
    assert "'tags' is a required property" in third["messages"][0]["content"]
