"""``trace TRACE_ID`` rebuilds a run from the JSON log alone; ``--follow`` tails it.

Runs go through the real bot into a real log file; the future one-line-per-run
shape (``run.done``) is written by hand, as the engine will write it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import tmy.tracelog  # noqa: F401  (registers the command)
from tmy import cli, logs
from tmy.testing import Bot
from tmy.tracelog import as_dict, build_view, follow, read_trace, render, trace_text

REPO = Path(__file__).resolve().parents[2]

RULES = """
variables:
  counter: {scope: user, default: 0}
rules:
  - id: count
    triggers: ["count *"]
    steps:
      - {id: add, plugin: ADJUST, input: "?= counter + 1", save: counter}
      - {id: even, plugin: ADJUST, when: "?= counter % 2 == 0", input: "even"}
      - {plugin: ADJUST, input: "{QUESTION}: {counter}"}
  - id: broken
    triggers: ["broken"]
    on_error: "no: {STEP_ERROR}"
    steps:
      - {plugin: ADJUST, input: "?= 1/0"}
      - {plugin: ADJUST, input: "never"}
  - id: guard
    triggers: ["guard"]
    steps:
      - {id: check, plugin: ADJUST, input: "already", stop: true}
      - {plugin: ADJUST, input: "not reached"}
"""


def trace(*argv: str) -> int:
    return cli.main(["trace", *argv])


async def test_a_matched_run_is_rebuilt_with_every_step(log_file: Path, capsys) -> None:
    async with Bot({"r.yaml": RULES}) as bot:
        reply = await bot.ask("count apples", user="ann", chat="g1")
    assert reply.text == "apples: 1"
    logs.flush()
    view = build_view(reply.trace_id, read_trace(log_file, reply.trace_id))
    assert view.message == {"text": "count apples", "user": "ann", "chat": "g1", "platform": "test"}
    assert (view.rule, view.trigger, view.question) == ("count", "count *", "apples")
    assert [(s.uri, s.skipped) for s in view.steps] == [
        ("count/add", False),
        ("count/even", True),
        ("count/2", False),
    ]
    add, even, last = view.steps
    assert (add.input, add.result, add.error, add.done) == (1, 1, None, True)
    assert isinstance(add.ms, float) and even.reason == "when"
    assert last.result == "apples: 1"
    assert view.reply["answer"] == "apples: 1" and view.reply["error"] is None
    assert view.complete and view.unmatched is None

    assert trace(reply.trace_id, "--log", str(log_file)) == 0
    out = capsys.readouterr().out
    assert f"trace     {reply.trace_id}" in out
    assert 'message   "count apples"  from ann in g1 (test)' in out
    assert 'rule      count  trigger "count *"  question "apples"' in out
    assert "step 1    count/add  ADJUST" in out and " ms" in out
    assert "step 2    count/even  ADJUST  skipped (when)" in out
    assert 'result  "apples: 1"' in out
    assert 'reply     "apples: 1"' in out

    assert trace(reply.trace_id, "--log", str(log_file), "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["rule"] == "count" and data["complete"] is True
    assert [s["skipped"] for s in data["steps"]] == [False, True, False]


async def test_a_failed_run_shows_its_error_and_where(log_file: Path) -> None:
    async with Bot({"r.yaml": RULES}) as bot:
        reply = await bot.ask("broken")
    assert reply.error
    text = trace_text(str(log_file), reply.trace_id)
    assert "step 1    broken/0  ADJUST" in text and "FAILED" in text
    assert "ZeroDivisionError" in text.split("error   ", 1)[1]
    assert "reply     \"no: expression '1/0' failed" in text
    assert "error     at broken/0: expression '1/0' failed" in text
    assert "broken/1" not in text  # the chain stopped at the failure


async def test_stop_and_unmatched_runs(log_file: Path) -> None:
    async with Bot({"r.yaml": RULES}) as bot:
        stopped = await bot.ask("guard")
        missed = await bot.ask("nothing here", user="bob")
    logs.flush()
    view = build_view(stopped.trace_id, read_trace(log_file, stopped.trace_id))
    assert view.stopped == "guard/check" and [s.uri for s in view.steps] == ["guard/check"]
    assert "stop: held, the run ended after this step" in render(view)

    view = build_view(missed.trace_id, read_trace(log_file, missed.trace_id))
    assert view.unmatched == "no trigger matched" and view.complete
    assert view.message["user"] == "bob" and view.steps == [] and view.reply is None
    text = render(view)
    assert 'message   "nothing here"  from bob' in text
    assert "no run    no trigger matched" in text


async def test_debug_level_lines_are_not_counted_twice(tmp_path: Path) -> None:
    log = tmp_path / "tmy.log"
    logs.configure("debug", log)  # every per-step line, run.done and reply.sent
    try:
        async with Bot({"r.yaml": RULES}) as bot:
            reply = await bot.ask("count figs")
    finally:
        logs.configure("warning")
    entries = read_trace(log, reply.trace_id)
    assert {"step.start", "step.done", "run.done", "reply.sent"} <= {e["event"] for e in entries}
    view = build_view(reply.trace_id, entries)
    assert [s.uri for s in view.steps] == ["count/add", "count/even", "count/2"]
    assert view.steps[1].reason == "when" and view.reply["answer"] == "figs: 1"


def per_event_log(tid: str, *events: tuple[str, dict]) -> str:
    """Lines as the engine wrote them when it logged one line per event at info."""
    return "".join(
        json.dumps({**fields, "event": event, "trace_id": tid, "level": level,
                    "timestamp": f"2026-11-24T14:41:12.{n:06d}Z"}, separators=(",", ":")) + "\n"
        for n, (event, fields, level) in enumerate(
            (e[0], e[1], "warning" if e[0] == "run.failed" else "info") for e in events
        )
    )  # fmt: skip


WHO = {"user": "console", "chat": "private:console", "platform": "console"}
ERR = "expression 'int(QUESTION)' failed: ValueError"
PER_STEP_LOG = per_event_log(
    "24ea56ec00000001",
    ("message.received", {"text": "parity 3", **WHO}),
    ("rule.matched", {"rule": "parity", "trigger": "parity *", "QUESTION": "3"}),
    ("step.start", {"uri": "parity/number", "plugin": "ADJUST"}),
    ("step.done", {"uri": "parity/number", "plugin": "ADJUST", "input": 3, "result": 3,
                   "error": None, "ms": 0.11}),
    ("step.skipped", {"uri": "parity/even", "plugin": "ADJUST", "reason": "when"}),
    ("step.start", {"uri": "parity/odd", "plugin": "ADJUST"}),
    ("step.done", {"uri": "parity/odd", "plugin": "ADJUST", "input": "3 is odd",
                   "result": "3 is odd", "error": None, "ms": 0.045}),
    ("reply.sent", {"rule": "parity", "answer": "3 is odd", "error": None, "ms": 0.619}),
) + per_event_log(
    "1f7c01da00000001",
    ("message.received", {"text": "parity x", **WHO}),
    ("rule.matched", {"rule": "parity", "trigger": "parity *", "QUESTION": "x"}),
    ("step.start", {"uri": "parity/number", "plugin": "ADJUST"}),
    ("step.done", {"uri": "parity/number", "plugin": "ADJUST", "input": None, "result": None,
                   "error": ERR, "ms": 0.082}),
    ("run.failed", {"rule": "parity", "uri": "parity/number", "error": ERR}),
    ("reply.sent", {"rule": "parity", "answer": "'x' is not a whole number.", "error": ERR,
                    "ms": 0.393}),
)  # fmt: skip


def test_the_one_line_per_event_shape(tmp_path: Path) -> None:
    log = tmp_path / "tmy.log"
    log.write_text(PER_STEP_LOG)
    view = build_view("24ea56ec00000001", read_trace(log, "24ea56ec00000001"))
    assert view.message["text"] == "parity 3" and view.question == "3"
    assert [(s.uri, s.skipped, s.ms) for s in view.steps] == [
        ("parity/number", False, 0.11),
        ("parity/even", True, None),
        ("parity/odd", False, 0.045),
    ]
    assert view.reply == {"answer": "3 is odd", "error": None, "ms": 0.619}
    text = trace_text(str(log), "1f7c01da00000001")
    assert "step 1    parity/number  ADJUST  0.082 ms  FAILED" in text
    assert "input   null" in text
    assert "error     at parity/number: expression 'int(QUESTION)' failed" in text


def test_the_one_line_per_run_shape(tmp_path: Path) -> None:
    log = tmp_path / "tmy.log"
    steps = [
        {"uri": "w/0", "plugin": "HTTP", "input": "http://x", "result": {"t": 21},
         "error": None, "ms": 12.5, "skipped": False},
        {"uri": "w/1", "plugin": "ADJUST", "input": None, "result": None,
         "error": None, "ms": 0.0, "skipped": "when"},
        {"uri": "w/2", "plugin": "ADJUST", "input": "{t}", "result": None,
         "error": "PathError: no t", "ms": 0.2, "skipped": False},
    ]  # fmt: skip
    lines = [
        "not json at all",
        json.dumps({"event": "app.ready", "level": "info", "timestamp": "2026-01-01T00:00:00Z"}),
        json.dumps(
            {
                "event": "llm.judged",
                "uri": "w/0",
                "verdict": True,
                "trace_id": "abc1",
                "level": "info",
                "timestamp": "2026-01-01T00:00:01.000000Z",
            }
        ),
        json.dumps(  # a rule the LLM ran as a tool, inside the same trace
            {
                "event": "run.done",
                "rule": "lookup",
                "answer": "21",
                "error": None,
                "steps": [{"uri": "lookup/0", "plugin": "ADJUST", "result": "21"}],
                "trace_id": "abc1",
                "level": "info",
                "timestamp": "2026-01-01T00:00:01.05Z",
            }
        ),
        json.dumps(
            {
                "event": "run.done",
                "rule": "weather",
                "trigger": "weather *",
                "question": "Oslo",
                "answer": "sorry",
                "error": "PathError: no t",
                "ms": 13.1,
                "user": "ann",
                "chat": "",
                "platform": "qq",
                "text": "weather Oslo",
                "steps": steps,
                "trace_id": "abc1",
                "level": "info",
                "timestamp": "2026-01-01T00:00:01.1Z",
            }
        ),
        '{"event": "message.received", "text": "abc1 is in my text", "trace_id": "zzz9"}',
    ]
    log.write_text("\n".join(lines) + "\n")
    view = build_view("abc1", read_trace(log, "abc1"))
    assert view.lines == 3  # the other trace's text mentions abc1: not part of the run
    assert view.message == {"text": "weather Oslo", "user": "ann", "chat": "", "platform": "qq"}
    assert (view.rule, view.trigger, view.question) == ("weather", "weather *", "Oslo")
    assert [s.skipped for s in view.steps] == [False, True, False]
    assert view.steps[1].reason == "when" and view.steps[0].result == {"t": 21}
    assert view.failed_at == "w/2" and view.reply["ms"] == 13.1
    text = render(view)
    assert "step 1    w/0  HTTP  12.5 ms" in text
    assert 'result  {"t": 21}' in text
    assert "llm.judged  verdict=true" in text  # the step's own log lines, under it
    assert "step 2    w/1  ADJUST  skipped (when)" in text
    assert "error     at w/2: PathError: no t" in text
    assert "run.done  rule=lookup answer=21" in text and 'steps=["lookup/0"]' in text
    assert as_dict(view)["steps"][2]["error"] == "PathError: no t"


def test_unknown_trace_and_missing_log(tmp_path: Path, capsys, monkeypatch) -> None:
    log = tmp_path / "tmy.log"
    log.write_text('{"event": "x", "trace_id": "aaaa"}\n')
    assert trace("ffff0000", "--log", str(log)) == 1
    assert "no log lines for trace ffff0000" in capsys.readouterr().err
    assert trace("ffff0000", "--log", str(tmp_path / "nope.log")) == 2
    assert "does not exist" in capsys.readouterr().err
    monkeypatch.delenv("TMY_LOG_FILE", raising=False)
    monkeypatch.setenv("TMY_CONFIG", str(tmp_path / "tmy.yaml"))
    (tmp_path / "tmy.yaml").write_text("log: {file: ''}\n")
    assert trace("ffff0000") == 2
    assert "no log file" in capsys.readouterr().err
    assert trace() == 2  # neither a trace id nor --follow


def test_the_rotated_file_is_read_too(tmp_path: Path) -> None:
    log = tmp_path / "tmy.log"
    line = {"trace_id": "r1", "level": "info", "timestamp": "2026-01-01T00:00:00Z"}
    (tmp_path / "tmy.log.1").write_text(
        json.dumps({**line, "event": "message.received", "text": "hi", "user": "u"}) + "\n"
    )
    log.write_text(json.dumps({**line, "event": "reply.sent", "rule": "r", "answer": "yo"}) + "\n")
    view = build_view("r1", read_trace(log, "r1"))
    assert view.message["text"] == "hi" and view.reply["answer"] == "yo"


def test_every_rotated_file_is_read_oldest_first(tmp_path: Path) -> None:
    """log.rotate keeps tmy.log.1 … tmy.log.N: a run split across them comes back whole."""
    log = tmp_path / "tmy.log"
    line = {"trace_id": "r2", "level": "info", "timestamp": "2026-01-01T00:00:00Z"}
    (tmp_path / "tmy.log.3").write_text(json.dumps({**line, "event": "a"}) + "\n")
    (tmp_path / "tmy.log.2").write_text(json.dumps({**line, "event": "b"}) + "\n")
    (tmp_path / "tmy.log.1").write_text(json.dumps({"trace_id": "other", "event": "x"}) + "\n")
    log.write_text(json.dumps({**line, "event": "c"}) + "\n")
    assert [e["event"] for e in read_trace(log, "r2")] == ["a", "b", "c"]


class Follower:
    """``follow`` in a thread, from the log's current end, until stopped."""

    def __init__(self, path: Path, **kw) -> None:
        self.views: list = []
        self.done = threading.Event()
        offset = path.stat().st_size if path.exists() else 0
        self.thread = threading.Thread(
            target=follow,
            args=(path, self.views.append),
            kwargs={"stop": self.done.is_set, "offset": offset, "poll": 0.02, **kw},
            daemon=True,
        )
        self.thread.start()

    def wait_for(self, count: int, timeout: float = 10) -> list:
        deadline = time.monotonic() + timeout
        while len(self.views) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.views

    def stop(self) -> None:
        self.done.set()
        self.thread.join(5)
        assert not self.thread.is_alive()


async def test_follow_prints_runs_appended_after_it_started(log_file: Path) -> None:
    async with Bot({"r.yaml": RULES}) as bot:
        await bot.ask("count before")  # already in the log: not shown
        logs.flush()
        follower = Follower(log_file)
        try:
            first = await bot.ask("count pears")
            second = await bot.ask("nothing here")
            logs.flush()
            views = follower.wait_for(2)
        finally:
            follower.stop()
    assert [v.trace_id for v in views] == [first.trace_id, second.trace_id]
    assert views[0].reply["answer"] == "pears: 2" and len(views[0].steps) == 3
    assert views[1].unmatched == "no trigger matched"


def test_follow_flushes_an_unfinished_run_and_survives_rotation(tmp_path: Path) -> None:
    log = tmp_path / "tmy.log"
    log.write_text("")
    follower = Follower(log, quiet=0.3)
    try:
        with log.open("a") as f:  # a run that never logs its end, and half a line
            f.write(json.dumps({"event": "message.received", "text": "a", "trace_id": "t1"}))
            f.write("\n" + '{"event": "rule.matched", "rule"')
        assert [v.trace_id for v in follower.wait_for(1)] == ["t1"]
        assert not follower.views[0].complete
        assert "no reply logged" in render(follower.views[0])
        log.rename(tmp_path / "tmy.log.1")  # rotated: a new, shorter file appears
        with log.open("a") as f:
            for event in ("message.received", "reply.sent"):
                f.write(json.dumps({"event": event, "answer": "ok", "trace_id": "t2"}) + "\n")
        views = follower.wait_for(2)
    finally:
        follower.stop()
    assert [v.trace_id for v in views] == ["t1", "t2"]
    assert views[1].reply["answer"] == "ok"


def test_follow_waits_past_a_nested_run(tmp_path: Path) -> None:
    log = tmp_path / "tmy.log"
    lines = [
        {"event": "run.done", "rule": "tool", "nested": True, "trace_id": "n1"},
        {"event": "run.done", "rule": "outer", "answer": "hi", "trace_id": "n1"},
    ]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    got: list = []
    assert follow(log, got.append, offset=0, max_runs=1, poll=0.01, settle=0.05) == 1
    assert got[0].rule == "outer" and got[0].reply["answer"] == "hi"
    assert [e["rule"] for e in got[0].events] == ["tool"]


def test_follow_max_runs_returns(tmp_path: Path) -> None:
    log = tmp_path / "tmy.log"
    line = json.dumps({"event": "message.unmatched", "reason": "no", "trace_id": "u1"})
    log.write_text(line + "\n" + line.replace("u1", "u2") + "\n")
    got: list = []
    assert follow(log, got.append, offset=0, max_runs=2, poll=0.01) == 2
    assert [v.unmatched for v in got] == ["no", "no"]


ASK_JOKE = [sys.executable, "run.py", "--rules", "examples/basics.yaml", "ask", "joke"]


@pytest.mark.slow
def test_follow_command_until_ctrl_c(tmp_path: Path) -> None:
    log = tmp_path / "tmy.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMY_")}
    env["TMY_LOG_FILE"] = str(log)
    code = "import sys, tmy.tracelog, tmy.cli; sys.exit(tmy.cli.main(sys.argv[1:]))"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "trace", "--follow"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert "following" in proc.stderr.readline()
        asked = subprocess.run(
            [*ASK_JOKE, "--json", "--log-level", "info"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        trace_id = json.loads(asked.stdout)["trace_id"]
        out = []
        while not any(line.startswith("reply ") for line in out):
            out.append(proc.stdout.readline())
            assert out[-1], "the follower exited: " + proc.stderr.read()
        assert out[0].startswith(f"trace     {trace_id}")
        assert any(line.startswith("rule      joke") for line in out)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- .tmy trace in chat: a checked id, a bounded read off the event loop ---------------------------

_OPENED_FROM: list[tuple[str, bool]] = []  # (path, opened on the main thread?) while recording
_RECORDING: list[str] = []


def _audit(event: str, args: tuple) -> None:
    path = str(args[0]) if event == "open" and args and isinstance(args[0], str | Path) else ""
    if _RECORDING and path.startswith(_RECORDING[0]):
        _OPENED_FROM.append((path, threading.current_thread() is threading.main_thread()))


sys.addaudithook(_audit)  # cannot be removed: it only records while _RECORDING is set


def _run_lines(tid: str, n: int = 3) -> list[str]:
    stamp = "2026-01-01T00:00:00Z"
    return [
        json.dumps({"event": "step.note", "uri": f"r/{i}", "trace_id": tid, "timestamp": stamp})
        for i in range(n)
    ]


async def test_chat_trace_refuses_a_malformed_id_and_reads_the_log_off_the_event_loop(
    tmp_path: Path,
) -> None:
    log = tmp_path / "tmy.log"
    # Every line holds "a" and "abc": the old command JSON-parsed the whole log for them.
    lines = _run_lines("abcabcab00000001") + [
        json.dumps({"event": "reply.sent", "answer": "a abc", "trace_id": f"{i:016x}"})
        for i in range(200)
    ]
    log.write_text("\n".join(lines) + "\n")
    async with Bot({"r.yaml": RULES}, admins=frozenset({"test:root"}), log_file=str(log)) as bot:
        for bad in ("a", "abc", "abc1234", "../../etc/passwd", "x" * 65, "abcd\u00e9fgh1"):
            reply = await bot.ask(f".tmy trace {bad}", user="root")
            assert "is not a trace id: give a whole trace id, 8 to 64" in reply.text, (bad, reply)
        _RECORDING.append(str(log))
        try:
            reply = await bot.ask(".tmy trace abcabcab00000001", user="root")
        finally:
            _RECORDING.clear()
    assert "trace     abcabcab00000001" in reply.text and "step.note" in reply.text
    assert "search stopped" not in reply.text
    assert _OPENED_FROM and not any(main for _, main in _OPENED_FROM), _OPENED_FROM


def test_chat_trace_reads_newest_first_within_its_bounds_and_says_when_one_stopped_it(
    tmp_path: Path,
) -> None:
    from tmy.tracelog import Bound, search

    log = tmp_path / "tmy.log"
    old = _run_lines("0123456789abcdef", 2)
    filler = [json.dumps({"event": "noise", "n": i, "pad": "x" * 80}) for i in range(2000)]
    new = _run_lines("fedcba9876543210", 2)
    log.write_text("\n".join(old + filler + new + old[:1]) + "\n")
    small = Bound(max_bytes=50_000)
    # The newest line of the old run is within the bound, its older lines are not.
    text = trace_text(str(log), "0123456789abcdef", bound=small)
    assert "search stopped at the last 50000 bytes: older lines of the log were not read" in text
    found = search(log, "0123456789abcdef", small)
    assert len(found.entries) == 1 and found.cut == "the last 50000 bytes"
    assert found.scanned <= 50_000
    # A run near the end is found whole; the old one whole without a bound.
    assert search(log, "fedcba9876543210", small).entries == [json.loads(x) for x in new]
    everything = search(log, "0123456789abcdef")
    assert [e["uri"] for e in everything.entries] == ["r/0", "r/1", "r/0"]
    assert everything.cut is None
    # At most max_lines lines of the trace, the newest ones, oldest first.
    capped = search(log, "0123456789abcdef", Bound(max_lines=2))
    assert [e["uri"] for e in capped.entries] == ["r/1", "r/0"] and capped.cut == "2 lines"
    # Rotated file: read after the current one, while bytes remain.
    (tmp_path / "tmy.log.1").write_text("\n".join(_run_lines("0123456789abcdef", 1)) + "\n")
    assert len(search(log, "0123456789abcdef").entries) == 4
    assert len(search(log, "0123456789abcdef", Bound(max_bytes=log.stat().st_size)).entries) == 3
