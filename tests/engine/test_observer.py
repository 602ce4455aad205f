"""``Engine.observer``: the web console's feed gets every run.done / message.unmatched dict.

The observer sees the same dict the ``info`` line is made of, with its ``trace_id``,
whether or not ``info`` is logged; it is None by default. Real rules, a real
SQLite store, the real scheduler path for a cron-style run.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson
import pytest

from tmy import logs
from tmy.config import Settings
from tmy.engine.core import Engine
from tmy.engine.services import Services
from tmy.engine.tracing import step_fields, step_tokens
from tmy.executors import default_registry
from tmy.message import Message, StepRecord
from tmy.rulebook.loader import load_sources
from tmy.store import Store

RULES = """
rules:
  - id: echo
    triggers: ["echo *"]
    steps:
      - {plugin: ADJUST, input: "{QUESTION}"}
  - id: admins
    triggers: ["secret"]
    admin_only: true
    steps:
      - {plugin: ADJUST, input: "hidden"}
  - id: broken
    triggers: ["boom *"]
    steps:
      - {plugin: ADJUST, input: "?= int(QUESTION)"}
"""


def make_engine(store: Store) -> Engine:
    registry = default_registry()
    rulebook = load_sources([(Path("rules.yaml"), RULES)], registry)
    return Engine(rulebook, Services(Settings(), store, registry))


def test_observer_is_none_by_default(store: Store) -> None:
    assert make_engine(store).observer is None


@pytest.mark.parametrize("info", [True, False])
async def test_every_run_and_unmatched_message_reaches_the_observer(
    store: Store, monkeypatch: pytest.MonkeyPatch, info: bool
) -> None:
    monkeypatch.setattr(logs, "INFO_ENABLED", info)  # what logs.configure("warning") sets
    engine = make_engine(store)
    seen: list[dict[str, Any]] = []
    engine.observer = seen.append
    hit = await engine.handle(Message("echo hi", user="u1", chat="c1", platform="test"))
    miss = await engine.handle(Message("nothing", user="u2", platform="test"))
    refused = await engine.handle(Message("secret", user="u3", platform="test"))
    failed = await engine.handle(Message("boom x", user="u4", platform="test"))
    assert [e["event"] for e in seen] == [
        "run.done",
        "message.unmatched",
        "message.unmatched",
        "run.done",
    ]
    run, unmatched, filtered, error = seen
    assert run["trace_id"] == hit.trace_id and run["rule"] == "echo"
    assert (run["user"], run["chat"], run["platform"]) == ("u1", "c1", "test")
    assert run["answer"] == "hi" and run["error"] is None and run["ms"] >= 0
    assert run["steps"][0]["plugin"] == "ADJUST" and run["steps"][0]["result"] == "hi"
    assert unmatched["trace_id"] == miss.trace_id and unmatched["reason"] == miss.reason
    assert filtered["trace_id"] == refused.trace_id
    assert error["trace_id"] == failed.trace_id and error["error"] == failed.error
    assert failed.error


async def test_the_log_line_is_the_same_with_an_observer(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The observer gets the dict after the line is written: the line does not change."""
    out = io.BytesIO()
    logs.configure("info", stream=out)
    try:
        engine = make_engine(store)
        await engine.handle(Message("echo one", user="u1", platform="test"))
        seen: list[dict[str, Any]] = []
        engine.observer = seen.append
        reply = await engine.handle(Message("echo one", user="u1", platform="test"))
        logs.flush()
    finally:
        logs.configure("warning", stream=io.BytesIO())
    lines = [orjson.loads(x) for x in out.getvalue().splitlines() if b'"run.done"' in x]
    assert len(lines) == 2 and lines[1]["trace_id"] == reply.trace_id
    assert list(lines[0]) == list(lines[1])  # same keys, same order
    for line in lines:
        del line["trace_id"], line["timestamp"], line["ms"], line["steps"][0]["ms"]
    assert lines[0] == lines[1]
    assert seen[0]["trace_id"] == reply.trace_id and seen[0]["answer"] == "one"


async def test_a_scheduled_run_is_marked_and_observed(store: Store) -> None:
    engine = make_engine(store)
    seen: list[dict[str, Any]] = []
    engine.observer = seen.append
    rule = engine.rulebook.by_id["echo"]
    message = Message("", user="", chat="c9", platform="test")
    reply = await engine.run_scheduled(rule, message, "tick", {"FIRE_TIME": "now"})
    assert reply.text == "tick"
    assert seen[-1]["scheduled"] is True and seen[-1]["trace_id"] == reply.trace_id


def test_a_model_steps_tokens_are_in_its_step_fields() -> None:
    """The LLM step's record (``extra.llm``, judgements' lists) gives ``tokens``."""
    llm = {"prompt_tokens": 120, "completion_tokens": 30, "cached_tokens": 100, "calls": []}
    judged = [{"prompt_tokens": 10, "completion_tokens": 1}, {"prompt_tokens": 5}]
    record = StepRecord("s1", "LLM", "q", "a", extra={"llm": llm, "when_llm": judged})
    assert step_tokens(record.extra) == 166
    assert step_fields(record)["tokens"] == 166
    plain = step_fields(StepRecord("s2", "ADJUST", "q", "a"))
    assert "tokens" not in plain
    assert "tokens" not in step_fields(StepRecord("s3", "X", extra={"loops": 2}))


def test_the_observer_is_told_a_runs_tokens(store: Store) -> None:
    """A run whose step asked a model: the observer's dict has the steps' ``tokens`` total
    (the console never samples such a run out); the log line has no such key."""
    from tmy.engine.tracing import log_run
    from tmy.message import Reply
    from tmy.rulebook.triggers import Match

    rule = make_engine(store).rulebook.by_id["echo"]
    llm = {"llm": {"prompt_tokens": 40, "completion_tokens": 2}}
    steps = [StepRecord("s1", "LLM", "q", "a", extra=llm), StepRecord("s2", "ADJUST", "a", "a")]
    seen: list[dict[str, Any]] = []
    for reply_steps in (steps, steps[1:]):
        reply = Reply("a", "echo", "t", steps=reply_steps)
        log_run(
            Match(rule, None, "", "q"), Message("q"), "q", reply, 0.001, True, False, seen.append
        )
    assert seen[0]["tokens"] == 42 and seen[0]["steps"][0]["tokens"] == 42
    assert "tokens" not in seen[1]
