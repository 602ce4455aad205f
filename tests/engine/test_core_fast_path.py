"""The engine's one-frame FAQ way (Engine._planned, ConstantPlan.run) answers, logs, counts
and traces exactly as the general way does.

Real rules, real SQLite stores, logging into a real buffer; nothing of tmy is mocked (the
chat-switch gate and the observers below are callers' own objects, as an embedding
application would pass them).
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.engines import engine_of
from tests.support.gate import Gate
from tmy import logs, metrics, redact
from tmy.engine.core import LAST_RESORT_REPLY, Engine
from tmy.engine.switch import ChatSwitch
from tmy.engine.tracing import log_run
from tmy.executors import default_registry
from tmy.logs import PREVIEW, get_logger, preview
from tmy.message import Message, Reply, StepRecord
from tmy.rulebook.loader import load_sources
from tmy.rulebook.model import Rulebook
from tmy.rulebook.triggers import Match
from tmy.store import Store, open_store
from tmy.testing import Bot
from tmy.types import answer_of

FAQ = "We open at 9"

RULES = f"""
rules:
  - id: faq
    triggers: ["hours", "when open*"]
    steps:
      - {{plugin: ADJUST, input: "{FAQ}"}}
  - id: three
    triggers: ["three *"]
    steps:
      - {{plugin: ADJUST, input: "one"}}
      - {{plugin: ADJUST, input: [1, 2]}}
      - {{plugin: ADJUST, input: "three"}}
  - id: echo
    triggers: ["echo *"]
    steps:
      - {{plugin: ADJUST, input: "{{QUESTION}}"}}
"""

REGEX_RULES = """
rules:
  - id: ping
    triggers: [ping]
    steps:
      - {plugin: ADJUST, input: pong}
  - id: alternation
    triggers: ["re:^(a|aa)+$"]
    steps:
      - {plugin: ADJUST, input: "all a"}
"""

FILTERED_RULES = f"""
rules:
  - id: faq
    triggers: ["hours"]
    platforms: [test]
    steps:
      - {{plugin: ADJUST, input: "{FAQ}"}}
  - id: other
    triggers: ["other *"]
    steps:
      - {{plugin: ADJUST, input: "o"}}
"""


pytestmark = pytest.mark.usefixtures("nothing_bound")  # as in a daemon: conftest.py


@pytest.fixture
async def shared(store_url: str) -> AsyncIterator[Store]:
    """A store on each backend (SQLite, Redis): the one two daemons share."""
    opened = open_store(store_url)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


def load(text: str) -> Rulebook:
    return load_sources([(Path("rules.yaml"), text)], default_registry())


def make_engine(store: Store, rules: str = RULES, **kw: Any) -> Engine:
    return engine_of(rules, store, **kw)


def events(buffer: io.BytesIO) -> list[dict[str, Any]]:
    logs.flush()
    return [orjson.loads(x) for x in buffer.getvalue().splitlines() if x.strip()]


def raw_lines(buffer: io.BytesIO, event: str) -> list[bytes]:
    logs.flush()
    needle = f'"event":"{event}"'.encode()
    return [x for x in buffer.getvalue().splitlines() if needle in x]


_STAMP = re.compile(rb'"timestamp":"[^"]*"')


# == lines logged while the FAQ way runs carry the message's trace id ========================


async def test_a_regex_timeout_warning_carries_the_messages_trace_id(
    store: Store, log_buffer: io.BytesIO
) -> None:
    """(It failed at 790c653.) trigger.regex_timeout is logged by the index lookup, which now runs
    in Engine._planned before the trace id is bound (no trace_id on the warning; before
    acfc4d6 it had the message's, so ``tmy trace <id>`` showed why the message went
    unanswered). Identical warnings without an id are also folded by the repeat limiter."""
    engine = make_engine(store, REGEX_RULES)
    attack = "a" * 80 + "!"
    reply = await engine.handle(Message(attack, user="mallory", platform="test"))
    assert reply.rule is None
    found = [e for e in events(log_buffer) if e["event"] == "trigger.regex_timeout"]
    assert found, "the abandoned pattern is logged"
    assert found[0].get("trace_id") == reply.trace_id


async def test_an_observer_runs_with_the_messages_trace_id_bound(store: Store) -> None:
    """(It failed at 790c653.) The engine's observer (the web console's feed) is called from the
    FAQ way with no trace id bound any more: a line it logs (the feed's own
    ``console.feed_failed``, or any callback's) no longer names the message's trace id."""
    engine = make_engine(store)
    seen: list[tuple[str, str | None]] = []
    engine.observer = lambda event: seen.append((event["event"], logs.TRACE.get()))
    answered = await engine.handle(Message("hours", user="u1", chat="g1", platform="test"))
    missed = await engine.handle(Message("nothing here", user="u1", chat="g1", platform="test"))
    assert answered.text == FAQ and missed.rule is None
    assert seen == [("run.done", answered.trace_id), ("message.unmatched", missed.trace_id)]


async def test_a_line_an_observer_logs_names_the_trace_id(
    store: Store, log_buffer: io.BytesIO
) -> None:
    """(It failed at 790c653.) the user-visible form of the test above."""
    engine = make_engine(store)
    log = get_logger("tmy.review")
    engine.observer = lambda event: log.warning("review.observed", what=event["event"])
    reply = await engine.handle(Message("hours", user="u1", chat="g1", platform="test"))
    (observed,) = [e for e in events(log_buffer) if e["event"] == "review.observed"]
    assert observed.get("trace_id") == reply.trace_id


# == any chat-switch gate of the protocol, not only a ChatSwitch =============================


class _Switch:
    """A caller's own chat switch, as tmy.engine.gates.ChatSwitchGate describes one (its two
    methods): every chat on, but ``off``."""

    def __init__(self, off: set[str]) -> None:
        self.off = off

    def cached(self, message: Message) -> bool | None:
        return message.chat in self.off

    async def is_off(self, message: Message) -> bool:
        return message.chat in self.off


async def test_a_chat_switch_gate_of_the_protocol_still_answers_faqs(store: Store) -> None:
    """(It failed at 790c653.) Engine(switch=...) takes a ChatSwitchGate (cached, is_off); the FAQ
    way now reads ``switch.verdicts`` (ChatSwitch's dict), so any other gate makes every FAQ
    answer an engine crash (LAST_RESORT_REPLY, "internal error: AttributeError…")."""
    engine = make_engine(store, switch=_Switch({"quiet"}))
    on = await engine.handle(Message("hours", user="u1", chat="g1", platform="test"))
    assert (on.text, on.error) == (FAQ, None)
    off = await engine.handle(Message("hours", user="u1", chat="quiet", platform="test"))
    assert off.error is None and off.rule is None and off.text == ""
    assert off.reason is not None and "switched off" in off.reason


# == the same as the general way ============================================================


@pytest.mark.parametrize(
    ("text", "user", "chat", "platform"),
    [
        ("hours", "u1", "g1", "test"),
        ("  when open   at night?  ", "u1", "g1", "test"),
        ('when open "quoted" \\ back', "u1", "g1", "test"),
        ("when open \t tab \x7f del \x1b esc \x00 nul", "u1", "g1", "test"),
        ("when open é 营业", "u1", "g1", "test"),  # non-ASCII: the general way
        ("hours", 'we"ird\\', "c\x01hat", "p/la<t>"),  # ids to escape (ASCII: the FAQ way)
        ("hours", "u1", "", "test"),  # the private chat "private:u1"
        ("hours", "", "d\x7fel", "t e s t"),  # an empty id; DEL (orjson leaves it)
        ("", "u1", "g1", "test"),  # no trigger: no line from the rule (see below)
        ("when open " + "z" * (PREVIEW + 5), "u1", "g1", "test"),  # a text the line cuts
        ("when open " + "z" * (PREVIEW - 10), "u1", "g1", "test"),  # at the cut
    ],
)
async def test_the_engines_faq_line_is_log_runs_line_first_seen_and_again(
    store: Store, log_buffer: io.BytesIO, text: str, user: str, chat: str, platform: str
) -> None:
    """Through Engine.handle, three times (the first run also makes the plan): each
    run.done line is the one log_run writes for the same run, byte for byte but the
    timestamp, with the reply's trace id."""
    engine = make_engine(store)
    if not text:
        reply = await engine.handle(Message(text, user=user, chat=chat, platform=platform))
        (line,) = [e for e in events(log_buffer) if e["event"] == "message.unmatched"]
        assert reply.rule is None and line["trace_id"] == reply.trace_id
        return
    for _ in range(3):
        mark = len(raw_lines(log_buffer, "run.done"))
        message = Message(text, user=user, chat=chat, platform=platform)
        reply = await engine.handle(message)
        assert (reply.text, reply.rule, reply.error) == (FAQ, "faq", None)
        (line,) = raw_lines(log_buffer, "run.done")[mark:]
        match = engine.rulebook.index.match(message.text)
        assert match is not None
        seconds = orjson.loads(line)["ms"] / 1000  # the general way times the run apart
        token = logs.bind_trace(reply.trace_id)
        try:
            log_run(match, message, message.text, reply, seconds, True, False)
        finally:
            logs.TRACE.reset(token)
        (want,) = raw_lines(log_buffer, "run.done")[mark + 1 :]
        assert _STAMP.sub(b"", line) == _STAMP.sub(b"", want)
        event = orjson.loads(line)
        assert event["trace_id"] == reply.trace_id and event["user"] == user
        shown = message.text if len(message.text) <= PREVIEW else preview(message.text)
        assert event["text"] == shown


async def test_a_several_step_constant_rule_through_the_engine(
    store: Store, log_buffer: io.BytesIO
) -> None:
    engine = make_engine(store)
    before = sum(metrics.step_meter("ADJUST").counts)
    for user in ("u1", "u1", 'q"'):
        reply = await engine.handle(Message("three  x ", user=user, platform="test"))
        assert reply.text == "three" and [s.result for s in reply.steps] == ["one", [1, 2], "three"]
    assert sum(metrics.step_meter("ADJUST").counts) == before + 9
    lines = [orjson.loads(x) for x in raw_lines(log_buffer, "run.done")]
    assert [len(x["steps"]) for x in lines] == [3, 3, 3]
    assert [x["question"] for x in lines] == ["x"] * 3


@pytest.mark.parametrize("user", ["u1", 'q"uote', "tab\there"])
async def test_a_several_step_line_is_log_runs_line(
    store: Store, log_buffer: io.BytesIO, user: str
) -> None:
    engine = make_engine(store)
    for text in ("three  x ", 'three "q" \\ x', "three \x01"):
        mark = len(raw_lines(log_buffer, "run.done"))
        message = Message(text, user=user, chat="g1", platform="test")
        reply = await engine.handle(message)
        (line,) = raw_lines(log_buffer, "run.done")[mark:]
        match = engine.rulebook.index.match(text)
        assert match is not None
        seconds = orjson.loads(line)["ms"] / 1000
        log_run(match, message, text, reply, seconds, True, False, trace=reply.trace_id)
        (want,) = raw_lines(log_buffer, "run.done")[mark + 1 :]
        assert _STAMP.sub(b"", line) == _STAMP.sub(b"", want)


async def test_lone_surrogates_take_the_general_way(store: Store, log_buffer: io.BytesIO) -> None:
    engine = make_engine(store)
    text = await engine.handle(Message("hours\ud800", user="u1", platform="test"))
    assert text.rule is None and text.error is None  # U+FFFD: no trigger
    ids = await engine.handle(Message("hours", user="u\udc00", platform="test"))
    assert ids.rule is None and ids.error is not None and ids.error.startswith("bad message")
    found = {e["event"]: e for e in events(log_buffer)}
    assert found["message.unmatched"]["trace_id"] == text.trace_id
    assert found["message.refused"]["trace_id"] == ids.trace_id


async def test_the_reply_record_and_match_are_whole_dataclasses(store: Store) -> None:
    engine = make_engine(store)
    message = Message("when open  soon ", user="u1", chat="g1", platform="test")
    reply = await engine.handle(message)
    (record,) = reply.steps
    assert reply == Reply(FAQ, "faq", reply.trace_id, None, [record], False)
    assert record == StepRecord(record.uri, "ADJUST", FAQ, FAQ, "", record.ms, False, {})
    assert dataclasses.replace(reply, text="x").steps == [record]
    assert dataclasses.asdict(reply)["steps"][0]["extra"] == {}
    assert record.as_dict()["error"] is None and "extra" not in record.as_dict()
    assert reply.as_dict(steps=True)["trace_id"] == reply.trace_id
    assert engine.rulebook.index.quick is not None
    match = engine.rulebook.index.folded.best("when open  soon", "when open  soon")
    assert match == engine.rulebook.index.match(message.text)
    assert match == Match(match.rule, match.trigger, match.trigger.magic, "soon", {})
    assert dataclasses.replace(match, question="q").groups == {}  # (asdict: Rule won't copy)
    record.extra["k"] = 1  # every run its own dict
    again = await engine.handle(Message("hours", user="u1", platform="test"))
    assert again.steps[0].extra == {} and again.steps is not reply.steps


async def test_the_counters_and_histogram_count_each_faq_answer(store: Store) -> None:
    engine = make_engine(store)
    matched, unmatched = metrics.message_meters("review-metrics")
    ok, failed = metrics.run_meters("faq")
    step = metrics.step_meter("ADJUST")
    counts, total = sum(step.counts), step.sum

    def received() -> float:  # matched + unmatched, added up at scrape
        sample = ("tmy_messages_received_total", {"platform": "review-metrics"})
        return metrics.REGISTRY.get_sample_value(*sample) or 0

    start = (received(), matched.value, unmatched.value, ok.value, failed.value)
    for text in ("hours", "hours", "when open x", "nothing", "echo e"):
        await engine.handle(Message(text, user="u1", platform="review-metrics"))
    now = (received(), matched.value, unmatched.value, ok.value, failed.value)
    assert [b - a for a, b in zip(start, now, strict=True)] == [5, 4, 1, 3, 0]
    assert sum(step.counts) == counts + 4 and step.sum >= total
    assert len(step.counts) == len(step.bounds) + 1


async def test_a_crash_inside_the_faq_way_is_answered_logged_and_traced(
    store: Store, log_buffer: io.BytesIO
) -> None:
    engine = make_engine(store)

    def broken(event: dict[str, Any]) -> None:
        raise RuntimeError("observer broke")

    engine.observer = broken
    reply = await engine.handle(Message("hours", user="u1", platform="test"))
    assert reply.text == LAST_RESORT_REPLY and reply.rule is None
    assert reply.error == "internal error: RuntimeError('observer broke')"
    assert engine.inflight == 0 and await engine.drain(0.1)
    (crashed,) = [e for e in events(log_buffer) if e["event"] == "message.crashed"]
    assert crashed["trace_id"] == reply.trace_id and "observer broke" in crashed["exception"]
    assert logs.TRACE.get() is None  # nothing left bound
    engine.observer = None
    assert (await engine.handle(Message("hours", user="u1", platform="test"))).text == FAQ


async def test_switched_off_in_one_chat_expiry_and_another_daemon(
    shared: Store, log_buffer: io.BytesIO
) -> None:
    one, two = ChatSwitch(shared), ChatSwitch(shared)
    first = make_engine(shared, switch=one)
    second = make_engine(shared, switch=two)
    here = Message("hours", user="u1", chat="g1", platform="test")
    # unknown verdict: the general way asks the store, then the FAQ way takes the fresh "on"
    for _ in range(2):
        assert (
            await first.handle(Message("hours", user="u1", chat="g1", platform="test"))
        ).text == FAQ
    assert one.cached(here) is False
    await two.set(here, True)  # the other daemon switches g1 off
    # the first daemon's fresh verdict stands until it expires (as it always did)
    assert (await first.handle(Message("hours", user="u1", chat="g1", platform="test"))).text == FAQ
    one.verdicts["test"]["g1"] = (False, 0.0)  # its 2 s have passed
    off = await first.handle(Message("hours", user="u1", chat="g1", platform="test"))
    assert off.rule is None and off.reason is not None and "switched off" in off.reason
    off = await first.handle(Message("hours", user="u1", chat="g1", platform="test"))
    assert off.rule is None  # the cached "off": the general way, no run
    assert (await first.handle(Message("hours", user="u1", chat="g2", platform="test"))).text == FAQ
    unmatched = [e for e in events(log_buffer) if e["event"] == "message.unmatched"]
    assert unmatched[-1]["trace_id"] == off.trace_id and unmatched[-1]["rule"] == "faq"
    await second.handle(here)
    await two.set(here, False)
    back = await second.handle(Message("hours", user="u1", chat="g1", platform="test"))
    assert back.text == FAQ


async def test_a_platforms_filter_on_the_faq_way(store: Store, log_buffer: io.BytesIO) -> None:
    engine = make_engine(store, FILTERED_RULES)
    assert engine.rulebook.has_filters and engine.rulebook.index.quick is not None
    ok = await engine.handle(Message("hours", user="u1", platform="test"))
    assert ok.text == FAQ
    refused = await engine.handle(Message("hours", user="u1", platform="elsewhere"))
    assert refused.rule is None and refused.reason is not None
    assert refused.reason.startswith("rule 'faq' matched but")
    (line,) = [e for e in events(log_buffer) if e["event"] == "message.unmatched"]
    assert line["trace_id"] == refused.trace_id and line["reason"] == refused.reason


async def test_sessions_and_cooldowns_leave_the_faq_way(store: Store) -> None:
    rules = f"""
rules:
  - id: faq
    triggers: ["hours"]
    steps:
      - {{plugin: ADJUST, input: "{FAQ}"}}
  - id: slow
    triggers: ["slow"]
    cooldown: {{seconds: 30, per: user, reply: "wait {{COOLDOWN_LEFT}}s"}}
    steps:
      - {{plugin: ADJUST, input: "fast"}}
  - id: kept
    triggers: ["kept"]
    session: 60
    steps:
      - {{plugin: ADJUST, input: "fixed"}}
"""
    engine = make_engine(store, rules)
    assert (await engine.handle(Message("slow", user="u1", platform="test"))).text == "fast"
    cooled = await engine.handle(Message("slow", user="u1", platform="test"))
    assert cooled.text.startswith("wait ") and cooled.rule == "slow"
    assert (await engine.handle(Message("kept", user="u2", platform="test"))).text == "fixed"
    follow = await engine.handle(Message("anything at all", user="u2", platform="test"))
    assert follow.rule == "kept" and follow.text == "fixed"
    assert (await engine.handle(Message("hours", user="u2", platform="test"))).text == FAQ


async def test_debug_and_quiet_levels(store: Store) -> None:
    engine = make_engine(store)
    out = io.BytesIO()
    logs.configure("debug", stream=out)
    try:
        reply = await engine.handle(Message("hours", user="u1", platform="test"))
        found = events(out)
    finally:
        logs.configure("warning", stream=io.BytesIO())
    mine = [e["event"] for e in found if e.get("trace_id") == reply.trace_id]
    assert mine[0] == "message.received" and mine[-1] == "reply.sent" and "run.done" in mine
    quiet = io.BytesIO()
    logs.configure("warning", stream=quiet)
    ok = metrics.run_meters("faq")[0]
    before = ok.value
    assert (await engine.handle(Message("hours", user="u1", platform="test"))).text == FAQ
    assert ok.value == before + 1 and events(quiet) == []


async def test_a_secret_in_a_faq_text_is_masked(store: Store, log_buffer: io.BytesIO) -> None:
    engine = make_engine(store)
    secret = "sk-review-0123456789"
    redact.add(secret)
    try:
        reply = await engine.handle(Message(f"when open {secret}", user="u1", platform="test"))
        (line,) = raw_lines(log_buffer, "run.done")
    finally:
        redact.forget(secret)
    assert reply.text == FAQ and secret.encode() not in line and b"***" in line


async def test_hot_reload_swaps_the_quick_lookup(store: Store) -> None:
    engine = make_engine(store)
    assert (await engine.handle(Message("hours", user="u1", platform="test"))).text == FAQ
    engine.replace_rulebook(load(REGEX_RULES))
    assert engine.rulebook.index.quick is None
    assert (await engine.handle(Message("hours", user="u1", platform="test"))).rule is None
    assert (await engine.handle(Message("aaaa", user="u1", platform="test"))).text == "all a"
    engine.replace_rulebook(load(FILTERED_RULES))
    assert (await engine.handle(Message("hours", user="u1", platform="test"))).text == FAQ
    assert (await engine.handle(Message("hours", user="u1", platform="x"))).rule is None
    engine.replace_rulebook(load(RULES))
    assert (await engine.handle(Message("when open x", user="u1", platform="x"))).text == FAQ
    faq = engine.rulebook.rules[[r.id for r in engine.rulebook.rules].index("faq")]
    assert engine._plans[faq].ok is metrics.run_meters("faq")[0]  # counted on the new rule's


async def test_each_faq_line_names_its_own_messages_ids(
    store: Store, log_buffer: io.BytesIO
) -> None:
    engine = make_engine(store)
    for i in range(12):
        message = Message("hours", user=f"user{i}", chat=f"chat{i}", platform="test")
        assert (await engine.handle(message)).text == FAQ
    lines = [orjson.loads(x) for x in raw_lines(log_buffer, "run.done")]
    assert [(x["user"], x["chat"]) for x in lines] == [(f"user{i}", f"chat{i}") for i in range(12)]


async def test_ids_that_join_alike_keep_their_own_fields_in_the_faq_line(
    store: Store, log_buffer: io.BytesIO
) -> None:
    """The ids' kept part of the line is found by the ids joined with separators: "ab" in
    chat "c" and "a" in chat "bc" are two entries, not one."""
    engine = make_engine(store)
    pairs = [("ab", "c"), ("a", "bc"), ("ab", "c"), ("a", "bc")]
    for user, chat in pairs:
        reply = await engine.handle(Message("hours", user=user, chat=chat, platform="test"))
        assert reply.text == FAQ
    lines = [orjson.loads(x) for x in raw_lines(log_buffer, "run.done")]
    assert [(x["user"], x["chat"]) for x in lines] == pairs


async def test_drain_waits_for_a_slow_run_while_faq_answers_flow() -> None:
    gate = Gate()
    rules = {
        "r.yaml": f"""
rules:
  - id: faq
    triggers: ["hours"]
    steps:
      - {{plugin: ADJUST, input: "{FAQ}"}}
  - id: slow
    triggers: ["slow"]
    steps:
      - {{plugin: GATED, input: "done"}}
"""
    }
    async with Bot(rules, extensions=gate.extensions()) as bot:
        engine = bot.app.engine
        assert engine is not None
        slow = asyncio.create_task(bot.ask("slow"))
        await gate.wait_entered()
        assert engine.inflight == 1
        drained = asyncio.create_task(engine.drain(10))
        for _ in range(20):
            assert (await bot.ask("hours")).text == FAQ
            assert engine.inflight == 1 and not drained.done()
        gate.open()
        assert (await slow).text == "done"
        assert await drained is True and engine.inflight == 0
        assert await engine.drain(0.1)


async def test_tmy_off_and_on_in_one_chat_through_the_app(
    store_url: str, log_buffer: io.BytesIO
) -> None:
    rules = {"r.yaml": FILTERED_RULES.replace("    platforms: [test]\n", "")}
    async with Bot(rules, store=store_url) as bot:
        assert (await bot.ask("hours", chat="g1")).text == FAQ
        assert (await bot.ask("hours", chat="g1")).text == FAQ  # the cached "on": FAQ way
        said = await bot.ask(".tmy off", chat="g1", is_admin=True)
        assert said.rule is None and said.text
        off = await bot.ask("hours", chat="g1")
        assert off.rule is None and off.text == "" and off.reason is not None
        assert (await bot.ask("hours", chat="g2")).text == FAQ
        await bot.ask(".tmy on", chat="g1", is_admin=True)
        assert (await bot.ask("hours", chat="g1")).text == FAQ
    found = [e for e in events(log_buffer) if e["event"] == "message.unmatched"]
    assert [(e["trace_id"], e["rule"]) for e in found] == [(off.trace_id, "faq")]


async def test_answer_gives_a_faq_reply_at_once_and_a_coroutine_otherwise(store: Store) -> None:
    """Engine.answer (what an adapter asks through tmy.types.answer_of): a constant rule's
    reply, and no rule's, come back as they are; a run that awaits comes back as the
    coroutine answering it, the same reply handle() gives, and in flight while awaited."""
    engine = make_engine(store)
    faq = engine.answer(Message("hours", user="u1", platform="test"))
    assert type(faq) is Reply and faq.text == FAQ and engine.inflight == 0
    nothing = engine.answer(Message("nothing here", user="u1", platform="test"))
    assert type(nothing) is Reply and nothing.rule is None
    echo = engine.answer(Message("echo hi", user="u1", platform="test"))
    assert type(echo) is not Reply and callable(echo)  # what makes the coroutine, not it
    reply = await echo()
    assert reply.rule == "echo" and reply.text == "hi" and engine.inflight == 0
    assert (await engine.handle(Message("echo hi", user="u1", platform="test"))).text == "hi"
    assert answer_of(engine.handle) == engine.answer

    async def handler(message: Message) -> Reply:
        return faq

    later = answer_of(handler)(Message("x"))  # any other handler: asked when awaited
    assert type(later) is not Reply and await later() is faq
