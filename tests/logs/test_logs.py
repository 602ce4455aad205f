"""The structured log explains a run: one trace_id, every event the README promises."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.log_helpers import read_log
from tmy import logs
from tmy.engine.core import Engine
from tmy.message import Message
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


async def test_one_run_is_one_line_at_info(log_file: Path) -> None:
    async with Bot({"r.yaml": RULES}) as bot:
        reply = await bot.ask("count apples", user="ann")
        await bot.ask("count pears", user="bob")
    assert reply.text == "apples: 1"
    events = [e for e in read_log(log_file) if e.get("trace_id") == reply.trace_id]
    assert [e["event"] for e in events] == ["run.done"]
    (run,) = events
    assert run["text"] == "count apples" and run["user"] == "ann"
    assert run["rule"] == "count" and run["trigger"] == "count *"
    assert run["question"] == "apples" and run["answer"] == "apples: 1"
    assert run["error"] is None and "stopped" not in run and isinstance(run["ms"], float)
    steps = run["steps"]
    assert [d["uri"] for d in steps] == ["count/add", "count/1"]
    assert steps[0]["input"] == 1 and steps[0]["result"] == 1 and steps[0]["error"] is None
    assert steps[1]["result"] == "apples: 1" and steps[1]["plugin"] == "ADJUST"
    assert all(isinstance(d["ms"], float) and d["skipped"] is False for d in steps)
    assert run["level"] == "info" and run["timestamp"].endswith("Z")


ECHO = """
rules:
  - id: echo
    triggers: ["echo *"]
    steps:
      - plugin: ADJUST
"""


async def test_the_run_line_is_redacted(log_file: Path) -> None:
    """run.done takes its own fast path to the sink: the same redaction applies."""
    from tmy import redact

    redact.add("sk-live-0123456789abcdef")
    async with Bot({"r.yaml": ECHO}) as bot:
        reply = await bot.ask("echo key sk-live-0123456789abcdef")
    assert reply.text == "key sk-live-0123456789abcdef"  # the user still gets the answer
    assert "sk-live-0123456789abcdef" not in log_file.read_text()
    (run,) = [e for e in read_log(log_file) if e.get("trace_id") == reply.trace_id]
    assert run["event"] == "run.done" and run["answer"].startswith("key ")
    assert "sk-live" not in run["answer"] and "sk-live" not in run["text"]


async def test_the_run_line_carries_what_plugins_bound(log_file: Path) -> None:
    import structlog

    structlog.contextvars.bind_contextvars(tenant="acme")
    try:
        async with Bot({"r.yaml": ECHO}) as bot:
            reply = await bot.ask("echo hi")
    finally:
        structlog.contextvars.unbind_contextvars("tenant")
    (run,) = [e for e in read_log(log_file) if e.get("trace_id") == reply.trace_id]
    assert run["event"] == "run.done" and run["tenant"] == "acme" and run["answer"] == "hi"


async def test_debug_level_logs_every_event_of_a_run(tmp_path: Path) -> None:
    path = tmp_path / "d.log"
    logs.configure("debug", path)
    try:
        async with Bot({"r.yaml": RULES}) as bot:
            reply = await bot.ask("count apples", user="ann")
        events = [e for e in read_log(path) if e.get("trace_id") == reply.trace_id]
    finally:
        logs.configure("warning")
    names = [e["event"] for e in events]
    assert names == [
        "message.received",
        "rule.matched",
        "step.start",
        "step.done",
        "step.start",
        "step.done",
        "run.done",
        "reply.sent",
    ]
    matched = events[1]
    assert matched["rule"] == "count" and matched["MAGIC"] == "count"
    assert matched["QUESTION"] == "apples"


class _BrokenSwitch:
    """Stands in for an engine bug: the chat-switch lookup blows up mid-message."""

    def cached(self, message: Message) -> bool | None:
        raise RuntimeError("switch state lost")

    async def is_off(self, message: Message) -> bool:
        raise RuntimeError("switch state lost")


@pytest.mark.parametrize("level", ["info", "debug"])
async def test_an_engine_crash_answers_and_is_logged_at_every_level(
    tmp_path: Path, level: str
) -> None:
    path = tmp_path / "c.log"
    logs.configure(level, path)
    try:
        async with Bot({"r.yaml": RULES}) as bot:
            engine = Engine(bot.engine.rulebook, bot.engine.services, switch=_BrokenSwitch())
            reply = await engine.handle(Message("count apples", user="ann", platform="test"))
            assert engine.inflight == 0 and await engine.drain(0.1)
        events = [e for e in read_log(path) if e.get("trace_id") == reply.trace_id]
    finally:
        logs.configure("warning")
    assert reply.rule is None and reply.text and "switch state lost" in reply.error
    names = [e["event"] for e in events]
    (crashed,) = [e for e in events if e["event"] == "message.crashed"]
    assert "switch state lost" in crashed["exception"]  # with its traceback
    if level == "debug":  # the reply still closes the run's events
        assert names[-1] == "reply.sent"
        assert events[-1]["error"] == reply.error and events[-1]["answer"] == reply.text


async def test_failed_run_logs_the_error(log_file: Path) -> None:
    async with Bot({"r.yaml": RULES}) as bot:
        reply = await bot.ask("broken")
    assert reply.text.startswith("no: expression '1/0' failed")
    events = [e for e in read_log(log_file) if e.get("trace_id") == reply.trace_id]
    failed = next(e for e in events if e["event"] == "run.failed")
    assert failed["uri"] == "broken/0" and failed["level"] == "warning"
    run = events[-1]
    assert run["event"] == "run.done" and "ZeroDivisionError" in run["error"]
    assert "ZeroDivisionError" in run["steps"][0]["error"]


async def test_previews_are_truncated(log_file: Path) -> None:
    async with Bot({"r.yaml": RULES}) as bot:
        reply = await bot.ask("count " + "x" * 5000)
    events = [e for e in read_log(log_file) if e.get("trace_id") == reply.trace_id]
    run = events[-1]
    assert len(run["text"]) < 300 and "…(+" in run["text"]
    assert len(run["steps"][1]["result"]) < 300 and "…(+" in run["steps"][1]["result"]


HANG = """
rules:
  - id: hang
    triggers: ["hang"]
    steps:
      - {plugin: HTTP, url: "http://127.0.0.1:{port}/", timeout: 3}
"""


async def test_a_step_still_running_after_the_threshold_is_logged(log_file: Path) -> None:
    """The run's line comes at its end: a hung step must be visible before that."""
    import asyncio

    from aiohttp import web

    async def slow(_: web.Request) -> web.Response:
        await asyncio.sleep(1.5)
        return web.Response(text="late")

    app = web.Application()
    app.router.add_get("/", slow)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with Bot({"h.yaml": HANG.replace("{port}", str(port))}, slow_step=0.5) as bot:
            reply = await bot.ask("hang")
    finally:
        await runner.cleanup()
    assert reply.text == "late"
    events = [e for e in read_log(log_file) if e.get("trace_id") == reply.trace_id]
    assert [e["event"] for e in events] == ["step.running", "run.done"]
    assert events[0]["uri"] == "hang/0" and events[0]["seconds"] == 0.5


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


@pytest.fixture
def short_repeats(monkeypatch: pytest.MonkeyPatch) -> logs.RepeatLimiter:
    """The process's repeat limiter with a short interval (the default is a minute)."""
    limiter = logs.RepeatLimiter(burst=3, interval=0.3)
    monkeypatch.setattr(logs, "_repeats", limiter)
    return limiter


async def test_identical_error_lines_are_rate_limited_with_one_summary(
    log_file: Path, short_repeats: logs.RepeatLimiter
) -> None:
    import asyncio

    log = logs.get_logger("tmy.test")
    for _ in range(1000):
        log.error("store.write_failed", error="disk is full")
    log.error("store.write_failed", error="another error")  # a different line passes
    await asyncio.sleep(0.35)
    short_repeats._checked = 0.0
    events = read_log(log_file)
    failed = [e for e in events if e["event"] == "store.write_failed"]
    assert [e["error"] for e in failed] == ["disk is full"] * 3 + ["another error"]
    (summary,) = [e for e in events if e["event"] == "log.repeats_suppressed"]
    assert summary["repeats"] == 997 and summary["level"] == "warning"
    assert "disk is full" in summary["line"]
    # the interval over, the same line is let through again
    log.error("store.write_failed", error="disk is full")
    assert [e.get("error") for e in read_log(log_file)].count("disk is full") == 4


async def test_asyncio_accept_tracebacks_are_rate_limited(
    caplog: pytest.LogCaptureFixture, short_repeats: logs.RepeatLimiter, tmp_path: Path
) -> None:
    """asyncio's "Too many open files" accept() error, once per attempt, 1,000 times."""
    import asyncio
    import errno
    import logging

    logs.configure("info", tmp_path / "tmy.log")  # installs the filter on the root handlers
    try:
        loop = asyncio.get_running_loop()
        with caplog.at_level(logging.WARNING, logger="asyncio"):
            for _ in range(1000):
                try:
                    raise OSError(errno.EMFILE, "Too many open files")
                except OSError as exc:
                    loop.call_exception_handler(
                        {"message": "socket.accept() out of system resource", "exception": exc}
                    )
            accept = [r for r in caplog.records if "out of system resource" in r.getMessage()]
            assert len(accept) == 3 and all(r.exc_info for r in accept)
            await asyncio.sleep(0.35)
            short_repeats._checked = 0.0
            logs.flush()
            summaries = [r for r in caplog.records if "suppressed 997 repeats" in r.getMessage()]
            assert len(summaries) == 1 and summaries[0].name == "asyncio"
    finally:
        logs.configure("warning")


def test_emit_event_leaves_the_callers_dict_as_it_was_when_not_configured() -> None:
    """The engine hands the same run.done dict to its observer (the web console) after
    logging it; a library user's unconfigured logging must not take its key away."""
    import tmy.logs as logs_module

    saved = logs_module.SINK
    logs_module.SINK = None
    try:
        event = {"rule": "r", "event": "run.done"}
        logs_module.emit_event("info", event, "t1")
    finally:
        logs_module.SINK = saved
    assert event == {"rule": "r", "event": "run.done"}


@pytest.mark.parametrize("bound", [False, True])
def test_emit_info_writes_the_line_emit_event_writes(bound: bool) -> None:
    """The engine's one-pass run.done (its dict built in final order) against the generic
    path: the same bytes but the timestamp, with or without context a plugin bound."""
    import io
    import re

    import structlog

    out = io.BytesIO()
    logs.configure("info", stream=out)
    if bound:
        structlog.contextvars.bind_contextvars(plugin_ctx="p1")
    try:
        base = {"rule": "r", "text": 'héllo "q"', "steps": [{"ms": 0.5}], "event": "run.done"}
        logs.emit_event("info", dict(base), "t1")
        logs.emit_info({**base, "trace_id": "t1", "level": "info", "timestamp": ""})
        logs.flush()
    finally:
        structlog.contextvars.clear_contextvars()
        logs.configure("warning", stream=io.BytesIO())
    generic, fast = out.getvalue().splitlines()
    stamp = re.compile(rb'"timestamp":"[^"]*"')
    assert stamp.sub(b"", fast) == stamp.sub(b"", generic)
    assert fast.startswith(b'{"plugin_ctx":"p1",' if bound else b'{"rule":"r",')
