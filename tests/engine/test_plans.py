"""Constant rules (every step an ADJUST of a constant) take :mod:`tmy.engine.plans`' way.

That way must be invisible: the same reply and records, the same step metric, and
the same ``run.done`` line byte for byte as the general run's
(:func:`tmy.engine.tracing.log_run`). Real rules, a real SQLite store, logging
into a real buffer.
"""

from __future__ import annotations

import io
import re
import time
from typing import Any

import orjson
import pytest

from tests.support.engines import engine_of
from tmy import logs, metrics
from tmy.engine.core import Engine
from tmy.engine.plans import ConstantPlan, constant_plan
from tmy.engine.tracing import log_run
from tmy.logs import PREVIEW, preview
from tmy.message import Message, Reply, StepRecord
from tmy.rulebook.model import Rule
from tmy.store import Store

pytestmark = pytest.mark.usefixtures("nothing_bound")  # as in a daemon: conftest.py


LONG = "y" * 250  # longer than a log preview: cut in the line, whole in the reply

RULES = f"""
rules:
  - id: faq
    triggers: ["hours", "when open*"]
    steps:
      - {{plugin: ADJUST, input: "We open at 9 \\"sharp\\" — 营业"}}
  - id: two
    triggers: ["two *"]
    steps:
      - {{plugin: ADJUST, input: [1, 2, {{k: v}}]}}
      - {{plugin: ADJUST, input: 42}}
      - {{plugin: ADJUST, input: "{LONG}"}}
  - id: echo
    triggers: ["echo *"]
    steps:
      - {{plugin: ADJUST, input: "{{QUESTION}}"}}
  - id: said
    triggers: ['say "hi" \\ now*', "café*"]
    steps:
      - {{plugin: ADJUST, input: "a plain answer"}}
  - id: kept
    triggers: ["kept"]
    session: 60
    steps:
      - {{plugin: ADJUST, input: "fixed"}}
"""


def make_engine(store: Store, **kw: Any) -> Engine:
    return engine_of(RULES, store, **kw)


def rule(engine: Engine, rule_id: str) -> object:
    return next(r for r in engine.rulebook.rules if r.id == rule_id)


def test_which_rules_get_a_plan(store: Store) -> None:
    engine = make_engine(store)
    limit = engine.settings.max_reply_chars
    assert isinstance(constant_plan(rule(engine, "faq"), limit), ConstantPlan)
    assert isinstance(constant_plan(rule(engine, "two"), limit), ConstantPlan)
    assert constant_plan(rule(engine, "echo"), limit) is None  # reads QUESTION
    assert constant_plan(rule(engine, "kept"), limit) is None  # a session to keep
    assert constant_plan(rule(engine, "faq"), 5) is None  # too long: the general run's error


@pytest.mark.parametrize(
    ("text", "answer"),
    [("hours", 'We open at 9 "sharp" — 营业'), ("two  things ", LONG), ("WHEN OPEN today", None)],
)
async def test_a_planned_run_answers_as_the_general_run_does(
    store: Store, text: str, answer: str | None
) -> None:
    planned = make_engine(store)
    general = make_engine(store, dry_run=True)  # a dry run never takes a plan
    got = await planned.handle(Message(text, user="u1", platform="test"))
    want = await general.handle(Message(text, user="u1", platform="test"))
    assert got.rule == want.rule and got.text == want.text and got.error is None
    if answer is not None:
        assert got.text == answer
    assert [(s.uri, s.plugin, s.input, s.result, s.error, s.skipped) for s in got.steps] == [
        (s.uri, s.plugin, s.input, s.result, s.error, s.skipped) for s in want.steps
    ]
    assert planned._plans[rule(planned, got.rule)] is not None
    assert general._plans[rule(general, got.rule)] is None


async def test_a_planned_step_is_counted_in_the_step_metric(store: Store) -> None:
    engine = make_engine(store)
    before = metrics.step_meter("ADJUST")
    count, total = sum(before.counts), before.sum
    await engine.handle(Message("two of them", user="u1", platform="test"))
    after = metrics.step_meter("ADJUST")
    assert sum(after.counts) == count + 3 and after.sum >= total


def _lines(buffer: io.BytesIO) -> list[bytes]:
    return [x for x in buffer.getvalue().splitlines() if b'"run.done"' in x]


@pytest.mark.parametrize(
    ("text", "spliced", "user"),
    [
        ("hours", True, "u1"),
        ("when open  at night?", True, "u1"),
        ("two  things, é and 营业", True, "u1"),
        ("two  " + "z" * 300, False, "u1"),  # a text the line cuts: the general line
        ('two "quoted"', True, "u1"),  # escaped as the general line escapes it
        ("two \\ tab\there\nand a line", True, "u1"),
        ("two \x7f del \x1b esc \x00", True, "u1"),  # control characters
        ("two /path 'x' <b>&amp; ~`{}[]", True, "u1"),  # printable ASCII: as it is
        ("two", True, 'we"ird\\ü'),  # the ids are escaped too
    ],
)
async def test_the_planned_line_is_the_general_line_byte_for_byte(
    store: Store, text: str, spliced: bool, user: str
) -> None:
    """ConstantPlan.log and log_run, for the same run: one line, twice (or, where the
    plan leaves the line to log_run, nothing from the plan)."""
    engine = make_engine(store)
    out = io.BytesIO()
    logs.configure("info", stream=out)
    token = logs.bind_trace("0123456789abcdef")
    try:
        message = Message(text, user=user, chat="g1", platform="test")
        match = engine.rulebook.index.match(text)
        assert match is not None
        plan = constant_plan(match.rule, engine.settings.max_reply_chars)
        assert plan is not None
        reply = plan.reply("0123456789abcdef")
        assert plan.log(match, message, text, reply, 0.0123456) is spliced
        log_run(match, message, text, reply, 0.0123456, True, False)
        logs.flush()
    finally:
        logs.TRACE.reset(token)
        logs.configure("warning", stream=io.BytesIO())
    lines = _lines(out)
    assert len(lines) == (2 if spliced else 1)
    if spliced:
        stamp = re.compile(rb'"timestamp":"[^"]*"')
        assert stamp.sub(b"", lines[0]) == stamp.sub(b"", lines[1])
    event = orjson.loads(lines[0])
    assert event["ms"] == 12.346 and event["trace_id"] == "0123456789abcdef"
    assert list(event)[-4:] == ["event", "trace_id", "level", "timestamp"]


async def test_the_engine_writes_the_planned_line_unless_someone_observes(
    store: Store,
) -> None:
    """Through Engine.handle: with an observer the general line (its dict is handed on)."""
    engine = make_engine(store)
    out = io.BytesIO()
    logs.configure("info", stream=out)
    seen: list[dict[str, object]] = []
    try:
        first = await engine.handle(Message("hours", user="u1", platform="test"))
        engine.observer = seen.append
        second = await engine.handle(Message("hours", user="u1", platform="test"))
        logs.flush()
    finally:
        logs.configure("warning", stream=io.BytesIO())
    lines = [orjson.loads(x) for x in _lines(out)]
    assert [x["trace_id"] for x in lines] == [first.trace_id, second.trace_id]
    assert list(lines[0]) == list(lines[1])
    for line in lines:
        del line["trace_id"], line["timestamp"], line["ms"], line["steps"][0]["ms"]
    assert lines[0] == lines[1]
    assert seen[0]["trace_id"] == second.trace_id and seen[0]["rule"] == "faq"


async def test_the_engine_keeps_a_plan_per_rule_and_a_bounded_number_more(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A verdict per rule in use, made once however many rules the traffic spans; past the
    rules' count and PLANS_SPARE (old rules of runs in flight after a reload) they are
    made again."""
    from tmy.engine import core, plans

    made: list[str] = []
    real = plans.constant_plan

    def counted(rule: Rule, max_reply_chars: int) -> ConstantPlan | None:
        made.append(rule.id)
        return real(rule, max_reply_chars)

    monkeypatch.setattr(core, "constant_plan", counted)
    engine = make_engine(store)
    rules = len(engine.rulebook.rules)
    texts = ("hours", "two a", "echo b")
    for _ in range(3):
        for text in texts:
            reply = await engine.handle(Message(text, user="u1", platform="test"))
            assert reply.error is None
    assert sorted(made) == sorted(set(made)) and len(engine._plans) <= rules
    monkeypatch.setattr(core, "PLANS_SPARE", 0)
    old_rules = make_engine(store).rulebook.rules  # another rulebook's rules: a reload's
    for rule in old_rules[: rules + 1]:
        engine._plan(rule)
        assert len(engine._plans) <= rules
    assert (await engine.handle(Message("two d", user="u1", platform="test"))).text == LONG


@pytest.mark.parametrize(
    ("text", "user"),
    [
        ("hours", "u1"),
        ("when open  at night?", "u1"),
        ("when open é and 营业", "u1"),
        ('when open "quoted" \\ and \t tab', "u1"),
        ("when open \x7f del \x1b esc", "u1"),
        ("when open \u2028 line separator \u00a0 nbsp", "u1"),
        ("hours", "ü-Ω"),
        ("hours", 'we"ird\\ü'),
        ("when open " + "z" * 300, "u1"),  # a text the line cuts: log_run writes it
        ('say "hi" \\ now, please', "u1"),  # a plain answer, a trigger orjson escapes
        ("café au lait", "u1"),
    ],
)
async def test_a_one_step_run_is_the_general_reply_and_line(
    store: Store, text: str, user: str
) -> None:
    """ConstantPlan.run (the engine's way for a one-step FAQ rule) makes the reply, record
    and line the general way makes — twice over."""
    engine = make_engine(store)
    match = engine.rulebook.index.match(text)
    assert match is not None and match.rule.id in ("faq", "said")
    plan = constant_plan(match.rule, engine.settings.max_reply_chars)
    assert plan is not None and plan.one
    for _ in range(2):
        out = io.BytesIO()
        logs.configure("info", stream=out)
        token = logs.bind_trace("0123456789abcdef")
        try:
            message = Message(text, user=user, chat="g1", platform="test")
            ids = message.user + message.chat + message.platform
            reply = plan.run(
                match.trigger,
                match.question,
                message,
                text,
                "0123456789abcdef",
                time.perf_counter(),
                ids,
            )
            record = reply.steps[0]
            seconds = record.ms / 1000
            log_run(match, message, text, reply, seconds, True, False)
            logs.flush()
        finally:
            logs.TRACE.reset(token)
            logs.configure("warning", stream=io.BytesIO())
        want = Reply(plan.answer, match.rule.id, "0123456789abcdef", None, [record], False)
        assert reply == want  # every field set, as Reply's own __init__ sets them
        assert record == StepRecord(record.uri, "ADJUST", plan.answer, plan.answer, ms=record.ms)
        lines = _lines(out)
        assert len(lines) == 2
        stamp = re.compile(rb'"timestamp":"[^"]*"')
        assert stamp.sub(b"", lines[0]) == stamp.sub(b"", lines[1])
        event = orjson.loads(lines[0])
        assert event["user"] == user and event["rule"] == match.rule.id
        assert event["text"] == (text if len(text) <= PREVIEW else preview(text))
        assert event["ms"] == record.ms and event["steps"][0]["ms"] == record.ms


async def test_a_plan_keeps_the_line_head_of_each_trigger_that_hits(store: Store) -> None:
    """A rule's first trigger to hit keeps its head in the plan's slots, the others in a
    dict: through the engine, each line names the trigger that hit, whichever came first."""
    engine = make_engine(store)
    out = io.BytesIO()
    logs.configure("info", stream=out)
    texts = ("when open now", "hours", "when open later", "hours", 'say "hi" \\ now', "café")
    try:
        for text in texts:
            reply = await engine.handle(Message(text, user="u1", chat="g1", platform="test"))
            assert reply.error is None
        logs.flush()
    finally:
        logs.configure("warning", stream=io.BytesIO())
    lines = [orjson.loads(x) for x in _lines(out)]
    assert [(x["rule"], x["trigger"]) for x in lines] == [
        ("faq", "when open*"),
        ("faq", "hours"),
        ("faq", "when open*"),
        ("faq", "hours"),
        ("said", 'say "hi" \\ now*'),
        ("said", "café*"),
    ]
    plan = engine._plans[rule(engine, "faq")]
    assert plan.head_source == "when open*" and list(plan.heads) == ["hours"]
