"""The Q&A step, its options, prompt authoring, history and the TESTONLY mock — through the engine.

Rules run in :class:`tmy.testing.Bot` (real engine, real SQLite store); the
model is either the TESTONLY mock (no llm config) or the fake provider on
loopback, whose request log shows exactly what was sent.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.llm_fake_provider import FakeProvider, Fault, Reply
from tests.support.llm_helpers import ASK, on, rules
from tmy.engine.keys import conversation_key
from tmy.llm.prompt import strip_tail
from tmy.message import Message
from tmy.store.base import MISSING
from tmy.testing import Bot

# -- the TESTONLY mock --------------------------------------------------------------------------


async def test_mock_is_the_default_and_derives_an_answer_from_the_input() -> None:
    async with Bot({"r.yaml": rules(ASK)}) as bot:
        reply = await bot.ask("t hello there")
        assert reply.text == "[TESTONLY mock · 0 earlier turns] You said: hello there"
        assert reply.steps[0].extra["llm"]["model"] == "TESTONLY"
        assert await bot.say("t hello there") == reply.text  # deterministic


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("returns: int", len("one two three")),
        ("returns: float", len("one two three") / 2),
        ("returns: bool", True),
        ("returns: list", ["one", "two", "three"]),
        ("returns: dict", {"answer": "one two three"}),
        ("returns: str", "[TESTONLY mock · 0 earlier turns] You said: one two three"),
        ("choices: [zero, two, four]", "two"),  # the first choice the question names
        ("choices: [7, 8]", 7),  # none named: the first
        (
            "output: {type: object, properties: {n: {type: integer, maximum: 5}}}",
            {"n": 5},
        ),
    ],
)
async def test_mock_derives_a_value_of_the_contracted_type(option: str, expected: Any) -> None:
    async with Bot({"r.yaml": rules(ASK + f"        {option}\n")}) as bot:
        reply = await bot.ask("t one two three")
        assert reply.error is None and reply.steps[0].result == expected
        assert await bot.say("t one two three") == reply.text  # deterministic


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
        assert reply.error == (  # no output contract: the answer itself was unusable (seed 000)
            "the model's answer was unusable after 2 attempts: the answer was empty"
        )
        assert "contract" not in reply.error
        assert reply.text.startswith("failed: ")
        assert len(reply.steps[0].extra["llm"]["calls"]) == 2


async def test_mock_fail_on_a_contract_step_is_a_contract_error() -> None:
    async with Bot({"r.yaml": rules(ASK + "        returns: int\n        retries: 1\n")}) as bot:
        reply = await bot.ask("t MOCK:FAIL")
        assert reply.error == (
            "the model's answer did not meet the output contract after 2 attempts: "
            "the answer was empty"
        )


async def test_mock_repair_on_a_judgement_is_true_after_one_retry() -> None:
    rules_text = """
rules:
  - id: j
    triggers: ["j *"]
    steps:
      - {plugin: ADJUST, input: "branch taken", when_llm: "is it so: {QUESTION}"}
      - {plugin: ADJUST, input: "?= STEP_RESULT or 'skipped'"}
"""
    async with Bot({"r.yaml": rules_text}) as bot:
        reply = await bot.ask("j MOCK:REPAIR")
        assert reply.error is None and reply.text == "branch taken"
        stats = reply.steps[0].extra["when_llm"]
        assert len(stats[0]["calls"]) == 2  # unusable first, then 1 once the hint is there


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


# -- step options ------------------------------------------------------------------------------


async def test_step_options_reach_the_request(provider: FakeProvider) -> None:
    steps = (
        ASK
        + """        system: "You serve {USER_NAME}."
        model: other
        temperature: 0.3
        max_tokens: 50
        stream: true
"""
    )
    config = on(provider)
    config["models"]["other"] = {"base_url": provider.base_url, "model": "other-id"}
    async with Bot({"r.yaml": rules(steps)}, llm=config) as bot:
        reply = await bot.ask("t hi", user_name="Ann")
        assert reply.text == "echo: hi" and reply.steps[0].extra["llm"]["model"] == "other"
    (body,) = provider.seen()
    assert (body["model"], body["temperature"], body["max_tokens"]) == ("other-id", 0.3, 50)
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"][0]["content"].endswith("\n\nYou serve Ann.")


async def test_model_settings_apply_when_the_step_sets_none(provider: FakeProvider) -> None:
    config = on(provider)
    config["models"]["fake"].update(temperature=0.2, max_tokens=99, headers={"X-Title": "tmy"})
    async with Bot({"r.yaml": rules(ASK)}, llm=config) as bot:
        await bot.say("t hi")
    (body,) = provider.seen()
    assert (body["temperature"], body["max_tokens"]) == (0.2, 99)
    assert provider.requests[0]["headers"]["X-Title"] == "tmy"


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
        await bot.say("chat other chat", chat="room-7")
        await bot.say("chat other platform", platform="irc")
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
    del bodies[5]  # the failed one

    def roles(body: dict[str, Any]) -> list[tuple[str, str]]:  # the question of a kept tail
        return [(m["role"], strip_tail(m["content"])) for m in body["messages"][1:-1]]

    assert roles(bodies[1]) == [("user", "one"), ("assistant", "echo: one")]
    # another user, another chat, another platform: each is another conversation
    assert roles(bodies[2]) == roles(bodies[3]) == roles(bodies[4]) == []
    assert roles(bodies[5]) == [("user", "What did we discuss?"), ("assistant", "Cats and dogs.")]
    assert roles(bodies[6]) == [
        ("user", "What did we discuss?"),
        ("assistant", "Cats and dogs."),
        ("user", "three"),
        ("assistant", "echo: three"),
    ]


async def test_request_prefix_is_byte_identical_across_turns(provider: FakeProvider) -> None:
    async with Bot({"r.yaml": CHAT}, llm=on(provider)) as bot:
        for word in ("first", "second", "third"):
            await bot.say(f"chat {word}")
        await bot.say("chat hello", user="zoe", user_name="Zoe")
    *bodies, zoe = provider.seen()
    for before, after in itertools.pairwise(bodies):
        # the whole earlier request, its tail included, then its answer and the new tail
        sent = len(before["messages"])
        assert orjson.dumps(after["messages"][:sent]) == orjson.dumps(before["messages"])
        assert after["messages"][sent:-1] == [
            {
                "role": "assistant",
                "content": "echo: " + (before["messages"][-1]["content"].split("\n")[-1]),
            }
        ]
        assert orjson.dumps(after["tools"]) == orjson.dumps(before["tools"])
    # system + tools are the same bytes for every turn and every user
    assert orjson.dumps([zoe["messages"][0], zoe["tools"]]) == orjson.dumps(
        [bodies[0]["messages"][0], bodies[0]["tools"]]
    )
    # the dynamic tail: time, who is asking, then the question
    tail = bodies[-1]["messages"][-1]["content"].split("\n")
    assert tail[0].startswith("Time: ") and tail[1:] == [
        "From: tester (chat private:tester on test)",
        "",
        "third",
    ]
    assert zoe["messages"][-1]["content"].split("\n")[1:] == [
        "From: Zoe (id zoe) (chat private:zoe on test)",
        "",
        "hello",
    ]
    assert "Time:" not in bodies[-1]["messages"][0]["content"]


async def test_history_zero_is_stateless(provider: FakeProvider) -> None:
    text = CHAT.replace("history: 10", "history: 0")
    async with Bot({"r.yaml": text}, llm=on(provider)) as bot:
        await bot.say("chat one")
        await bot.say("chat two")
    assert len(provider.seen()[1]["messages"]) == 2


# -- a step without tools: one request, no tool loop (tmy.llm.exchange.converse) -----------------

LLM_STEP = """      - plugin: LLM
        system: "Be brief."
        history: 2
        temperature: 0.3
        messages: [{user: "2+2?"}, {assistant: "4"}]
"""
PLAIN_AND_GENERAL = f"""
rules:
  - id: plain
    triggers: ["plain *"]
    steps:
{LLM_STEP}  - id: general
    triggers: ["general *"]
    steps:
{LLM_STEP}        permissions: ["*"]   # no tools to permit: the same requests must go out
"""


def _same_parts(reply: Any) -> dict[str, Any]:
    """What the two steps' replies must share (latencies differ)."""

    def timeless(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: timeless(v) for k, v in value.items() if k != "latency_ms"}
        return [timeless(v) for v in value] if isinstance(value, list) else value

    return {"text": reply.text, "error": reply.error, "stats": timeless(reply.steps[0].extra)}


async def test_a_plain_step_sends_what_the_general_way_sends(provider: FakeProvider) -> None:
    """A step without tools sends one request per attempt (converse skips the tool loop):
    the same requests, answers, details, history and folds as the same step with
    ``permissions:`` but no tools to permit, turn after turn."""
    async with Bot({"r.yaml": PLAIN_AND_GENERAL}, llm=on(provider)) as bot:
        bot.engine.pin_now("2026-11-26T12:00:00+00:00")  # both sides' tails say the same time
        for turn in range(4):  # history: 2 — the fourth turn folds the first three
            got = {}
            for rule in ("plain", "general"):  # one user each: a conversation each
                seen = len(provider.seen())
                reply = await bot.ask(f"{rule} question {turn}", user=f"u-{rule}")
                sent = (_same_parts(reply), provider.seen()[seen:])
                got[rule] = json.dumps(sent).replace(f"u-{rule}", "u-someone")
            assert got["plain"] == got["general"], turn
            assert "question" in got["plain"] and "u-someone" in got["plain"]
        stored = []
        for rule in ("plain", "general"):
            key = conversation_key("llmhist", Message("", user=f"u-{rule}", platform="test"))
            history = await bot.engine.services.store.get(key)
            assert history is not MISSING
            stored.append(json.dumps(history).replace(f"u-{rule}", "u-someone"))
        assert stored[0] == stored[1]


async def test_a_plain_step_re_asks_an_empty_answer_with_the_retry_hint() -> None:
    """An empty answer to a step without tools is re-asked with converse's retry hint, as
    for the same step with ``permissions:`` (same calls, repairs and errors)."""
    text = PLAIN_AND_GENERAL.replace("history: 2", "history: 0")
    async with Bot({"r.yaml": text}) as bot:
        for ask in ("MOCK:REPAIR", "MOCK:FAIL"):
            plain = _same_parts(await bot.ask(f"plain {ask}"))
            general = _same_parts(await bot.ask(f"general {ask}"))
            assert plain == general
            assert plain["stats"]["llm"]["repairs"] == (1 if ask == "MOCK:REPAIR" else 2)
        assert plain["error"] == (
            "the model's answer was unusable after 3 attempts: the answer was empty"
        )


@pytest.mark.parametrize("images", ["{}", '"?= {}"'])
async def test_an_empty_picture_map_is_refused(provider: FakeProvider, images: str) -> None:
    """``images: {}`` asks for pictures as ``images.wanted`` reads it (the general way
    refuses it: no URL), though the map is falsy."""
    rules_text = ASK + f"        images: {images}\n"
    provider.script("fake", [Reply("hello")])
    seeing = {"base_url": provider.base_url, "model": "fake", "vision": True}
    async with Bot({"r.yaml": rules(rules_text)}, llm={"models": {"fake": seeing}}) as bot:
        reply = await bot.ask("t hi")
        assert reply.error is not None and "picture 1" in reply.error, (reply.error, reply.text)


async def test_a_computed_negative_retries_sends_nothing(provider: FakeProvider) -> None:
    provider.script("fake", [Reply("hello")])
    text = rules(ASK + '        retries: "?= 0 - 1"\n')
    async with Bot({"r.yaml": text}, llm=on(provider)) as bot:
        reply = await bot.ask("t hi")
        assert reply.error is not None, reply.text
    assert provider.seen() == []  # as before: no attempt at all


async def test_now_a_rule_saved_reaches_the_prompt_as_it_is(provider: FakeProvider) -> None:
    text = """
rules:
  - id: t
    triggers: ["t *"]
    steps:
      - {plugin: ADJUST, input: 0, save: NOW}
      - {plugin: LLM, input: "{QUESTION}"}
"""
    provider.script("fake", [Reply("ok")])
    async with Bot({"r.yaml": text}, llm=on(provider)) as bot:
        assert (await bot.ask("t hi")).error is None
    assert provider.seen()[0]["messages"][-1]["content"].startswith("Time: 0\n")
