"""The structured log explains a run: one trace_id, every event the README promises."""

from __future__ import annotations

from pathlib import Path

import pytest
from log_helpers import read_log

from tmy import logs
from tmy.testing import Bot

RULES = """
variables:
  counter: {scope: user, default: 0}
rules:
  - id: count
    triggers: ["count *"]
    steps:
      - id: add
        plugin: ADJUST
        input: "?= counter + 1"
        save: counter
      - plugin: ADJUST
        input: "{QUESTION}: {counter}"
  - id: broken
    triggers: ["broken"]
    on_error: "no: {STEP_ERROR}"
    steps:
      - plugin: ADJUST
        input: "?= 1/0"
"""


async def test_one_run_is_one_trace(log_file: Path) -> None:
    async with Bot({"r.yaml": RULES}) as bot:
        reply = await bot.ask("count apples", user="ann")
        await bot.ask("count pears", user="bob")
    assert reply.text == "apples: 1"
    events = [e for e in read_log(log_file) if e.get("trace_id") == reply.trace_id]
    names = [e["event"] for e in events]
    assert names == [
        "message.received",
        "rule.matched",
        "step.start",
        "step.done",
        "step.start",
        "step.done",
        "reply.sent",
    ]
    received, matched = events[0], events[1]
    assert received["text"] == "count apples" and received["user"] == "ann"
    assert matched["rule"] == "count" and matched["MAGIC"] == "count"
    assert matched["QUESTION"] == "apples"
    done = [e for e in events if e["event"] == "step.done"]
    assert [d["uri"] for d in done] == ["count/add", "count/1"]
    assert done[0]["input"] == 1 and done[0]["result"] == 1 and done[0]["error"] is None
    assert done[1]["result"] == "apples: 1"
    assert all(isinstance(d["ms"], float) for d in done)
    assert events[-1]["answer"] == "apples: 1" and events[-1]["rule"] == "count"
    assert all(e["level"] == "info" and e["timestamp"].endswith("Z") for e in events)


async def test_failed_run_logs_the_error(log_file: Path) -> None:
    async with Bot({"r.yaml": RULES}) as bot:
        reply = await bot.ask("broken")
    assert reply.text.startswith("no: expression '1/0' failed")
    events = [e for e in read_log(log_file) if e.get("trace_id") == reply.trace_id]
    done = next(e for e in events if e["event"] == "step.done")
    assert "ZeroDivisionError" in done["error"]
    failed = next(e for e in events if e["event"] == "run.failed")
    assert failed["uri"] == "broken/0" and failed["level"] == "warning"
    assert events[-1]["event"] == "reply.sent" and "ZeroDivisionError" in events[-1]["error"]


async def test_previews_are_truncated(log_file: Path) -> None:
    async with Bot({"r.yaml": RULES}) as bot:
        reply = await bot.ask("count " + "x" * 5000)
    events = [e for e in read_log(log_file) if e.get("trace_id") == reply.trace_id]
    received = events[0]
    assert len(received["text"]) < 300 and "…(+" in received["text"]


async def test_warning_level_hides_info(tmp_path: Path) -> None:
    path = tmp_path / "w.log"
    logs.configure("warning", path)
    try:
        async with Bot({"r.yaml": RULES}) as bot:
            await bot.ask("count a")
            await bot.ask("broken")
        names = [e["event"] for e in read_log(path)]
    finally:
        logs.configure("warning")
    assert "message.received" not in names and "run.failed" in names


def test_unknown_level_is_a_config_error() -> None:
    from tmy.errors import ConfigError

    with pytest.raises(ConfigError, match="log level 'loud'"):
        logs.configure("loud")


class _Terminal:
    """A stream that says it is a terminal (what ``serve`` sees when run by hand)."""

    def __init__(self) -> None:
        import io

        self.buffer = io.BytesIO()

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("fmt", "readable"), [("auto", True), ("json", False)])
def test_serve_prints_readable_lines_on_a_terminal_and_json_when_asked(
    fmt: str, readable: bool
) -> None:
    import json

    terminal = _Terminal()
    try:
        logs.configure("info", stream=terminal, fmt=fmt)  # type: ignore[arg-type]
        logs.get_logger("tmy").info("adapter.started", adapter="http")
        logs.flush()
        out = terminal.buffer.getvalue().decode()
    finally:
        logs.configure("warning")
    assert "adapter.started" in out
    if readable:
        assert not out.lstrip().startswith("{") and "adapter" in out and "http" in out
    else:
        assert json.loads(out.splitlines()[0])["adapter"] == "http"
