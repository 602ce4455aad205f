"""The Q&A step, the scenes, contracts, history and the TESTONLY mock — through the engine.

Rules run in :class:`tmy.testing.Bot` (real engine, real SQLite store); the
model is either the TESTONLY mock (no llm config) or the fake provider on
loopback, whose request log shows exactly what was sent.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from llm_fake_provider import FakeProvider, Fault, Reply

from tmy.engine.variables import conversation_key
from tmy.message import Message
from tmy.store.base import MISSING
from tmy.testing import Bot


@pytest.fixture
async def provider() -> AsyncIterator[FakeProvider]:
    async with FakeProvider() as fake:
        yield fake


def on(provider: FakeProvider, **extra: Any) -> dict[str, Any]:
    return {
        "models": {"fake": {"base_url": provider.base_url, "model": "fake"}},
        "backoff_base": 0.001,
        **extra,
    }


def rules(steps: str, *, intent: str = "", extra: str = "") -> str:
    head = f"    intent: {intent}\n" if intent else ""
    return f"""
rules:
  - id: t
    triggers: ["t *"]
    on_error: "failed: {{STEP_ERROR}}"
{head}    steps:
{steps}
{extra}"""


ASK = """      - plugin: LLM
"""


# -- the TESTONLY mock --------------------------------------------------------------------------


async def test_mock_is_the_default_and_derives_an_answer_from_the_input() -> None:
    async with Bot({"r.yaml": rules(ASK)}) as bot:
        reply = await bot.ask("t hello there")
        assert reply.text == "[TESTONLY mock · 0 earlier turns] You said: hello there"
        assert reply.steps[0].extra["llm"]["model"] == "TESTONLY"
        assert await bot.say("t hello there") == reply.text  # deterministic


async def test_mock_response_command() -> None:
    async with Bot({"r.yaml": rules(ASK)}) as bot:
        assert await bot.say("t MOCK:RESPONSE:exactly this, please") == "exactly this, please"


async def test_mock_response_is_checked_by_the_contract() -> None:
    steps = ASK + "        returns: dict\n        save: parsed\n"
    async with Bot({"r.yaml": rules(steps)}) as bot:
        reply = await bot.ask('t MOCK:RESPONSE:{"a": [1, 2]}')
        assert json.loads(reply.text) == {"a": [1, 2]}
        reply = await bot.ask("t MOCK:RESPONSE:not json at all")
        assert "did not meet the output contract after 3 attempts" in reply.error
        assert "not valid JSON" in reply.error


async def test_mock_fail_exhausts_the_retries() -> None:
    async with Bot({"r.yaml": rules(ASK + "        retries: 1\n")}) as bot:
        reply = await bot.ask("t MOCK:FAIL")
        assert reply.error == (
            "the model's answer did not meet the output contract after 2 attempts: "
            "the answer was empty"
        )
        assert reply.text.startswith("failed: ")
        assert len(reply.steps[0].extra["llm"]["calls"]) == 2


async def test_mock_repair_succeeds_once_the_retry_hint_is_there() -> None:
    async with Bot({"r.yaml": rules(ASK + "        returns: int\n")}) as bot:
        reply = await bot.ask("t MOCK:REPAIR")
        assert reply.error is None and reply.text == str(len("MOCK:REPAIR"))
        stats = reply.steps[0].extra["llm"]
        assert stats["repairs"] == 1 and len(stats["calls"]) == 2


async def test_mock_true_and_false_drive_when_llm() -> None:
    steps = """      - plugin: ADJUST
        input: "ran"
        when_llm: "the user wants it"
"""
    async with Bot({"r.yaml": rules(steps)}) as bot:
        assert await bot.say("t MOCK:TRUE") == "ran"
        reply = await bot.ask("t MOCK:FALSE")
        assert reply.text == "MOCK:FALSE" and reply.steps[0].skipped
        assert reply.steps[0].extra["when_llm"][0]["verdict"] is False


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


async def test_output_yaml_on_the_mock() -> None:
    steps = (
        ASK
        + """        format: yaml
        output:
          type: object
          properties: {title: {type: string}, tags: {type: array, items: {type: string}}}
          required: [title, tags]
"""
    )
    async with Bot({"r.yaml": rules(steps)}) as bot:
        reply = await bot.ask("t a poem")
        assert reply.error is None
        assert reply.steps[0].result == {"title": "a poem", "tags": ["a poem"]}


# -- prompt authoring -------------------------------------------------------------------------


async def test_structured_system_messages_merge_and_few_shot(provider: FakeProvider) -> None:
    steps = (
        ASK
        + """        system:
          - background: "You are an expert translator of academic papers."
          - "Prefer accuracy."
          - content: "Use the field's terms."
            notes: ["Check the reference format."]
        messages:
          - user: "猫"
          - assistant: "cat"
        context: false
"""
    )
    async with Bot({"r.yaml": rules(steps)}, llm=on(provider)) as bot:
        await bot.say("t 狗")
    messages = provider.seen()[0]["messages"]
    assert messages[0]["content"].endswith(
        "You are an expert translator of academic papers.\n\nPrefer accuracy.\n"
        "Use the field's terms.\n\nNotes:\n* Check the reference format."
    )
    assert messages[1:] == [
        {"role": "user", "content": "猫"},
        {"role": "assistant", "content": "cat"},
        {"role": "user", "content": "狗"},
    ]


async def test_jinja_template_renders_the_question_in_a_sandbox(tmp_path: Path) -> None:
    (tmp_path / "ask.j2").write_text("Translate for {{ USER }}: {{ input | upper }}\n")
    (tmp_path / "evil.j2").write_text("{{ input.__class__.__mro__[1].__subclasses__() }}")
    (tmp_path / "r.yaml").write_text("""
rules:
  - id: tr
    triggers: ["tr *"]
    steps:
      - {plugin: LLM, template: ask.j2, context: false}
  - id: evil
    triggers: ["evil *"]
    steps:
      - {plugin: LLM, template: evil.j2}
""")
    async with Bot(tmp_path) as bot:
        assert await bot.say("tr bonjour") == (
            "[TESTONLY mock · 0 earlier turns] You said: Translate for tester: BONJOUR"
        )
        reply = await bot.ask("evil x")
        assert reply.error is not None and "evil.j2" in reply.error


# -- history and STEP_SUMMARY ---------------------------------------------------------------------

CHAT = """
rules:
  - id: chat
    triggers: ["chat *"]
    steps:
      - {plugin: LLM, history: 10, tools: [lookup]}
  - id: lookup
    triggers: ["lookup *"]
    tool:
      description: "Look a word up."
      parameters: {type: object, properties: {w: {type: string}}}
    steps:
      - {plugin: ADJUST, input: "definition"}
  - id: summarise
    triggers: ["summarise"]
    steps:
      - plugin: ADJUST
        input: "?= ['What did we discuss?', 'Cats and dogs.']"
        save: STEP_SUMMARY
      - {plugin: ADJUST, input: "noted"}
"""


async def test_history_is_kept_per_conversation_and_replaced_by_step_summary(
    provider: FakeProvider,
) -> None:
    async with Bot({"r.yaml": CHAT}, llm=on(provider)) as bot:
        await bot.say("chat one")
        await bot.say("chat two")
        await bot.say("chat other user", user="someone-else")
        await bot.say("summarise")
        provider.script("fake", [Fault.http(400, "rejected")])
        assert (await bot.ask("chat lost")).error is not None  # a failed Q&A keeps the summary
        await bot.say("chat three")
        await bot.say("chat four")
        store = bot.engine.services.store
        assert (
            await store.get(
                conversation_key("summary", Message("", user="tester", platform="test"))
            )
            is MISSING
        )
    bodies = provider.seen()
    del bodies[3]  # the failed one
    roles = lambda body: [(m["role"], m["content"]) for m in body["messages"][1:-1]]  # noqa: E731
    assert roles(bodies[1]) == [("user", "one"), ("assistant", "echo: one")]
    assert roles(bodies[2]) == []  # another user: another conversation
    assert roles(bodies[3]) == [("user", "What did we discuss?"), ("assistant", "Cats and dogs.")]
    assert roles(bodies[4]) == [
        ("user", "What did we discuss?"),
        ("assistant", "Cats and dogs."),
        ("user", "three"),
        ("assistant", "echo: three"),
    ]


async def test_request_prefix_is_byte_identical_across_turns(provider: FakeProvider) -> None:
    async with Bot({"r.yaml": CHAT}, llm=on(provider)) as bot:
        for word in ("first", "second", "third"):
            await bot.say(f"chat {word}")
    bodies = provider.seen()
    for before, after in itertools.pairwise(bodies):
        stable = len(before["messages"]) - 1  # all but the dynamic tail
        assert orjson.dumps(after["messages"][:stable]) == orjson.dumps(before["messages"][:stable])
        assert orjson.dumps(after["tools"]) == orjson.dumps(before["tools"])
        assert after["messages"][-1]["content"].startswith("Time: ")


async def test_history_is_bounded_by_turns_and_tokens(provider: FakeProvider) -> None:
    text = CHAT.replace("history: 10", "history: 2")
    async with Bot({"r.yaml": text}, llm=on(provider, history={"max_tokens": 12})) as bot:
        for word in ("a", "b", "c", "a-much-longer-question-that-costs-tokens"):
            await bot.say(f"chat {word}")
        await bot.say("chat end")
    asks = [
        [m["content"] for m in b["messages"][1:-1] if m["role"] == "user"] for b in provider.seen()
    ]
    assert asks[3] == ["b", "c"]  # two turns
    assert asks[4] == []  # the long turn alone is over 12 tokens


async def test_history_zero_is_stateless(provider: FakeProvider) -> None:
    text = CHAT.replace("history: 10", "history: 0")
    async with Bot({"r.yaml": text}, llm=on(provider)) as bot:
        await bot.say("chat one")
        await bot.say("chat two")
    assert len(provider.seen()[1]["messages"]) == 2
