"""The chat history never slides: requests extend each other exactly, and a full history folds.

A real chat-completions server on loopback (tests/support/llm_fake_provider.py)
records every request; the summary request of a fold is told apart by its
system prompt. Rules run in :class:`tmy.testing.Bot` (real engine, SQLite file).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import orjson

from tests.support.llm_fake_provider import Action, FakeProvider, Fault, Reply
from tests.support.llm_helpers import on
from tmy.engine.keys import conversation_key
from tmy.llm.fold import FOLD_ASK
from tmy.llm.runtime import runtime_of
from tmy.llm.usage import today, usage_of
from tmy.message import Message
from tmy.testing import Bot

RULES = """
rules:
  - id: chat
    triggers: ["chat *"]
    steps:
      - {plugin: LLM, system: "Be brief.", history: 3}
"""
TESTER = Message("", user="tester", platform="test")
FOLD_MARK = "Summarise the conversation below"


def is_fold(body: dict[str, Any]) -> bool:
    return body["messages"][0]["content"].startswith(FOLD_MARK)


def answering(summary: str, delay: float = 0.0) -> Any:
    """The provider's default: a JSON summary for a fold, the echo otherwise."""

    def default(body: dict[str, Any]) -> Action:
        if is_fold(body):
            return Reply(json.dumps({"summary": summary}), delay=delay)
        last = body["messages"][-1]["content"].split("\n")[-1]
        return Reply(f"echo: {last}", delay=delay)

    return default


def split(provider: FakeProvider) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the Q&A requests, the fold requests), each in the order sent."""
    seen = provider.seen()
    return [b for b in seen if not is_fold(b)], [b for b in seen if is_fold(b)]


def extends(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """``after`` starts with every message of ``before``, byte for byte, then its answer."""
    sent = len(before["messages"])
    answer = "echo: " + before["messages"][-1]["content"].split("\n")[-1]
    return (
        orjson.dumps(after["messages"][:sent]) == orjson.dumps(before["messages"])
        and after["messages"][sent] == {"role": "assistant", "content": answer}
        and len(after["messages"]) == sent + 2
    )


async def stored(bot: Bot, message: Message = TESTER) -> Any:
    return await bot.engine.services.store.get(conversation_key("llmhist", message))


async def test_requests_extend_each_other_until_the_fold_then_start_from_the_summary(
    provider: FakeProvider,
) -> None:
    provider.default = answering("Tester counted from one to four.")
    words = ["one", "two", "three", "four", "five", "six", "seven"]
    async with Bot({"r.yaml": RULES}, llm=on(provider)) as bot:
        replies = [await bot.ask(f"chat {w}") for w in words]
        assert all(r.error is None for r in replies)
        tally = runtime_of(bot.engine.services).tally  # this daemon's counts not written yet
        usage = await usage_of(bot.engine.services.store, TESTER, today(bot.engine.tz), tally)
        history = await stored(bot)
    asks, folds = split(provider)
    assert len(asks) == 7 and len(folds) == 1  # the fold happened once
    # requests 1..4 carry 0..3 turns, each the previous request exactly plus its answer
    for k in range(3):
        assert extends(asks[k], asks[k + 1]), k
    # request 5: the history had 4 turns (> history: 3): folded into one summary pair
    system = asks[0]["messages"][0]
    assert asks[4]["messages"][:3] == [
        system,
        {"role": "user", "content": FOLD_ASK},
        {"role": "assistant", "content": "Tester counted from one to four."},
    ]
    assert asks[4]["messages"][-1]["content"].endswith("\n\nfive") and len(asks[4]["messages"]) == 4
    assert extends(asks[4], asks[5]) and extends(asks[5], asks[6])
    # the summary request saw the four turns said (no time or sender lines), as data
    transcript = folds[0]["messages"][-1]["content"]
    assert transcript.splitlines() == [
        line for w in words[:4] for line in (f"user: {w}", f"assistant: echo: {w}")
    ]
    assert replies[4].steps[0].extra["llm"]["fold"]["calls"], "ask --json shows the fold"
    assert replies[4].steps[0].extra["llm"]["folded_turns"] == 4
    stats = replies[4].steps[0].extra["llm"]
    assert (stats["prompt_tokens"], stats["completion_tokens"]) == (20, 10)  # answer + fold
    assert usage["user"]["calls"] == 8  # seven answers and the summary, all counted
    assert [pair[0] for pair in history][:1] == [FOLD_ASK] and len(history) == 4


async def test_the_summary_pair_does_not_count_and_is_folded_into_the_next(
    provider: FakeProvider,
) -> None:
    summaries = iter(["First four.", "All eight."])

    def default(body: dict[str, Any]) -> Action:
        if is_fold(body):
            return Reply(json.dumps({"summary": next(summaries)}))
        return Reply("echo: " + body["messages"][-1]["content"].split("\n")[-1])

    provider.default = default
    async with Bot({"r.yaml": RULES}, llm=on(provider)) as bot:
        for i in range(1, 10):
            await bot.say(f"chat {i}")
    asks, folds = split(provider)
    assert len(folds) == 2
    # after the first fold: the summary and up to 3 turns (history: 3), then the next fold
    assert [len(b["messages"]) for b in asks] == [2, 4, 6, 8, 4, 6, 8, 10, 4]
    assert folds[1]["messages"][-1]["content"].splitlines()[:2] == [
        f"user: {FOLD_ASK}",
        "assistant: First four.",
    ]
    assert [m["content"] for m in asks[8]["messages"][1:3]] == [FOLD_ASK, "All eight."]


async def test_a_history_over_max_tokens_folds_too(provider: FakeProvider) -> None:
    provider.default = answering("Long questions were asked.")
    text = RULES.replace("history: 3", "history: 10")
    async with Bot({"r.yaml": text}, llm=on(provider, history={"max_tokens": 120})) as bot:
        for i in range(4):
            await bot.say(f"chat question number {i} " + "word " * 20)
    asks, folds = split(provider)
    assert len(folds) == 1
    assert asks[2]["messages"][1:3] == [
        {"role": "user", "content": FOLD_ASK},
        {"role": "assistant", "content": "Long questions were asked."},
    ]
    assert extends(asks[2], asks[3])


async def test_two_messages_at_once_lose_no_turn_and_fold_once(provider: FakeProvider) -> None:
    provider.default = answering("An earlier chat.", delay=0.05)
    async with Bot({"r.yaml": RULES}, llm=on(provider)) as bot:
        await asyncio.gather(bot.say("chat a"), bot.say("chat b"))
        assert sorted(p[1] for p in await stored(bot)) == ["echo: a", "echo: b"]
        await asyncio.gather(bot.say("chat c"), bot.say("chat d"))  # 4 turns: full
        assert len(await stored(bot)) == 4
        await asyncio.gather(bot.say("chat e"), bot.say("chat f"))  # both find it full
        history = await stored(bot)
    asks, folds = split(provider)
    assert len(folds) == 1
    # the one that waited for the other's fold sent the folded history, as the folder did
    for body in asks[-2:]:
        assert [m["content"] for m in body["messages"][1:3]] == [FOLD_ASK, "An earlier chat."]
        assert len(body["messages"]) == 4
    assert history[0] == [FOLD_ASK, "An earlier chat."]
    assert sorted(p[1] for p in history[1:]) == ["echo: e", "echo: f"]  # both turns kept


async def test_a_failed_summary_keeps_an_extract(provider: FakeProvider) -> None:
    def default(body: dict[str, Any]) -> Action:
        if is_fold(body):
            return Fault.http(400, "no summaries today")
        return Reply("echo: " + body["messages"][-1]["content"].split("\n")[-1])

    provider.default = default
    async with Bot({"r.yaml": RULES}, llm=on(provider)) as bot:
        for w in ("one", "two", "three", "four", "five"):
            await bot.say(f"chat {w}")
        history = await stored(bot)
    assert history[0][0] == FOLD_ASK
    assert history[0][1].startswith("user: one\nassistant: echo: one\n")
    assert history[0][1].endswith("user: four\nassistant: echo: four")
    assert len(history) == 2  # the extract, then the turn that folded


async def test_the_mock_folds_deterministically() -> None:
    text = RULES.replace("history: 3", "history: 1")
    async with Bot({"r.yaml": text}) as bot:
        await bot.say("chat one")
        await bot.say("chat two")
        assert await bot.say("chat three") == "[TESTONLY mock · 1 earlier turns] You said: three"
        history = await stored(bot)
    assert history[0][0] == FOLD_ASK and history[0][1].startswith("user: one")


async def test_step_summary_still_replaces_the_history(provider: FakeProvider) -> None:
    provider.default = answering("unused")
    text = (
        RULES
        + """
  - id: reset
    triggers: ["reset"]
    steps:
      - {plugin: ADJUST, input: "?= ['Start over.', 'OK.']", save: STEP_SUMMARY}
"""
    )
    async with Bot({"r.yaml": text}, llm=on(provider)) as bot:
        for w in ("one", "two", "three", "four"):
            await bot.say(f"chat {w}")
        await bot.say("reset")
        await bot.say("chat five")
        assert await stored(bot) == [["Start over.", "OK."], [await _tail(provider), "echo: five"]]
    _, folds = split(provider)
    assert folds == []  # the summary a rule set took the full history's place: no fold


async def _tail(provider: FakeProvider) -> str:
    return str(provider.seen()[-1]["messages"][-1]["content"])


async def test_concurrent_conversations_read_their_histories_together(
    provider: FakeProvider, store_url: str
) -> None:
    """Fifty conversations starting at once: their history reads are joined (one
    get_many per loop turn, tmy.store.joined), and each still gets its own history."""
    from tmy.metrics import REGISTRY

    def get_manys() -> float:
        value = REGISTRY.get_sample_value("tmy_store_op_seconds_count", {"op": "get_many"})
        return value or 0.0

    provider.default = lambda body: Reply(f"seen {len(body['messages'])}")
    async with Bot({"r.yaml": RULES}, store=store_url, llm=on(provider)) as bot:
        users = [f"u{i}" for i in range(50)]
        await asyncio.gather(*(bot.ask("chat first", user=u) for u in users))
        before = get_manys()
        replies = await asyncio.gather(*(bot.ask("chat second", user=u) for u in users))
        reads = get_manys() - before
    assert all(r.text == "seen 4" for r in replies)  # system, the first turn's pair, the ask
    assert reads < 10, reads  # not one per conversation
