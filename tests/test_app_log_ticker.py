"""The App's log ticker: every App's lifespan flushes the log every 0.2 s. The ticker
ends with its App (opened or failing to open), another App still open keeps its own, a
flush that fails once does not end the flushing, and a one-shot ``ask`` leaves its
run.done line (trace id and all) in a log file rotated by size. A real App
(tmy.testing.Bot), real files, a real pipe, a real ``run.py`` process.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tmy import logs
from tmy.errors import TmyError
from tmy.testing import Bot

REPO = Path(__file__).resolve().parents[1]

RULES = """
rules:
  - id: faq
    triggers: ["hours"]
    steps: [{plugin: ADJUST, input: "nine"}]
  - id: echo
    triggers: ["echo *"]
    steps: [{plugin: ADJUST, input: "{QUESTION}"}]
"""
BROKEN = "rules:\n  - id: x\n    triggers: [a]\n    steps: [{plugin: NOPE}]\n"


def _tickers() -> list[asyncio.Task[object]]:
    return [
        t
        for t in asyncio.all_tasks()
        if not t.done() and getattr(t.get_coro(), "__name__", "") == "_flush_logs"
    ]


async def _in_file(path: Path, needle: str, seconds: float = 5.0) -> str:
    """The file's text once ``needle`` is in it (read as another process would: no flush
    of ours), or what it holds after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        text = path.read_text()
        if needle in text or time.monotonic() > deadline:
            return text
        await asyncio.sleep(0.05)


async def test_the_ticker_ends_with_its_app(log_file: Path) -> None:
    before = len(_tickers())
    async with Bot({"r.yaml": RULES}) as bot:
        assert len(_tickers()) == before + 1
        assert await bot.say("hours") == "nine"
    await asyncio.sleep(0)  # the cancellation's turn
    await asyncio.sleep(0)
    assert len(_tickers()) == before
    assert '"event":"run.done"' in log_file.read_text()  # the lifespan's last flush


async def test_an_app_failing_to_open_leaves_no_ticker(log_file: Path) -> None:
    before = len(_tickers())
    with pytest.raises(TmyError):
        async with Bot({"r.yaml": BROKEN}):
            pass  # pragma: no cover
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(_tickers()) == before


async def test_an_app_still_open_keeps_flushing_after_another_closed(log_file: Path) -> None:
    """Two Apps in one process (tests, an embedder): closing one cancels its own ticker only."""
    async with Bot({"r.yaml": RULES}) as outer:
        async with Bot({"r.yaml": RULES}) as inner:
            assert await inner.say("echo inner") == "inner"
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert len(_tickers()) >= 1
        assert await outer.say("echo outer still flushed") == "outer still flushed"
        text = await _in_file(log_file, "outer still flushed")
        assert "outer still flushed" in text


async def test_a_flush_that_fails_once_does_not_end_the_flushing() -> None:
    """A log pipe that is full for a moment (a slow reader; a disk full for a moment is
    the same OSError from the file's flush): the lines wait in the buffer and reach the
    reader at a later tick, while the App stays open."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    os.set_blocking(r, False)
    writer = os.fdopen(w, "wb")
    got = bytearray()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(r, 65536)
            except BlockingIOError:
                return
            got.extend(chunk)

    logs.configure("info", stream=writer)  # type: ignore[arg-type]
    log = logs.get_logger("ticker")
    try:
        async with Bot({"r.yaml": RULES}):
            await asyncio.sleep(0.5)
            drain()
            try:  # the reader falls behind: the pipe is full
                while True:
                    os.write(w, b"\n")
            except BlockingIOError:
                pass
            log.info("ticker.first")
            await asyncio.sleep(0.6)  # a tick or more: the flush meets a full pipe
            drain()  # the reader catches up
            log.info("ticker.second")
            deadline = time.monotonic() + 3
            while b"ticker.second" not in got and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                drain()
            arrived = bytes(got)
    finally:
        drain()
        logs.configure("warning", stream=sys.stderr)
        writer.close()
        os.close(r)
    assert b"ticker.first" in arrived and b"ticker.second" in arrived


@pytest.mark.slow
def test_a_one_shot_ask_leaves_its_run_done_line_in_a_rotated_log(tmp_path: Path) -> None:
    """``run.py ask`` (asyncio.run, one App, exit): its FAQ answer's run.done line is in the
    log file with the printed trace id, whole, the file rotated by size as it filled."""
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.yaml").write_text(RULES)
    config = tmp_path / "tmy.yaml"
    config.write_text(
        f"rules: {rules}\nstore: 'sqlite:///{tmp_path / 'tmy.db'}'\n"
        "log:\n  file: tmy.log\n  level: info\n  rotate: {max_bytes: 600, backups: 50}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMY_", "OPENAI_"))}
    env["TMY_CONFIG"] = str(config)
    traces = []
    for text in ("hours", 'echo "q" \\ é'):
        done = subprocess.run(
            [sys.executable, "run.py", "ask", text, "--json", "--user", 'a"nn'],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        traces.append(json.loads(done.stdout)["trace_id"])
    lines = [
        json.loads(line)
        for path in sorted(tmp_path.glob("tmy.log*"))
        for line in path.read_text().splitlines()
    ]
    runs = {e["trace_id"]: e for e in lines if e.get("event") == "run.done"}
    assert set(traces) <= set(runs)
    assert runs[traces[0]]["answer"] == "nine" and runs[traces[0]]["user"] == 'a"nn'
    assert runs[traces[1]]["text"] == 'echo "q" \\ é'
    assert len(list(tmp_path.glob("tmy.log*"))) > 1  # rotated by size
