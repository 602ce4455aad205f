"""The log sink's direct write: JsonLines.out is the file's
own write, flushed by the App's ticker only. No line is lost or written twice with
threads logging into a real file (rotated by size, or not), a terminal gets every line
at once, a closed stream loses its lines quietly, and the interpreter's exit pushes out
what was never flushed. Real files, real threads, a real Python process at exit.
"""

from __future__ import annotations

import collections
import io
import re
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pytest

from tmy import logs
from tmy.logs.logfile import LogFile
from tmy.logs.sinks import JsonLines

HEAD = '{"event":"run.done","trace_id":"'
_ID = re.compile(rb"t\d-\d{6}")


@pytest.fixture(autouse=True)
def _nothing_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """No context another test bound: emit_info_text writes (the FAQ way's line)."""
    monkeypatch.setattr(logs, "BOUND", {})


def _log_from_threads(threads: int, each: int, flusher: threading.Event) -> None:
    """Every way a line reaches the sink (the FAQ line, run.done's dict, emit), from
    ``threads`` threads at once, while this thread flushes as the ticker does."""

    def worker(k: int) -> None:
        for i in range(each):
            tag = f"t{k}-{i:06d}"
            way = i % 3
            if way == 0:
                assert logs.emit_info_text(HEAD, tag)
            elif way == 1:
                logs.emit_info({"event": "run.done", "trace_id": tag, "level": "info",
                                "timestamp": ""})  # fmt: skip
            else:
                logs.emit("info", "line", n=tag)

    running = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in running:
        t.start()
    while any(t.is_alive() for t in running):
        logs.flush()
        flusher.wait(0.002)
    for t in running:
        t.join()
    logs.flush()


def _tags(folder: Path) -> collections.Counter[bytes]:
    seen: collections.Counter[bytes] = collections.Counter()
    for path in folder.iterdir():
        for line in path.read_bytes().splitlines():
            orjson.loads(line)  # whole lines, none torn
            seen.update(_ID.findall(line))
    return seen


@pytest.mark.parametrize("max_bytes", [0, 40_000])
def test_threads_logging_lose_and_repeat_no_line(tmp_path: Path, max_bytes: int) -> None:
    """4 threads × 3,000 lines into one file, flushed meanwhile (and rotated by size every
    ~40 kB): each line once, whole."""
    folder = tmp_path / "logs"
    logs.configure("info", folder / "tmy.log", max_bytes=max_bytes, backups=1000)
    try:
        _log_from_threads(4, 3000, threading.Event())
    finally:
        logs.configure("warning", stream=io.BytesIO())  # type: ignore[arg-type]
    seen = _tags(folder)
    assert len(seen) == 4 * 3000 and set(seen.values()) == {1}
    assert (len(list(folder.iterdir())) > 1) is bool(max_bytes)


def test_a_file_rotated_by_size_and_moved_by_logrotate_keeps_every_line(
    tmp_path: Path,
) -> None:
    """With log.rotate the sink's out is LogFile.write (it counts); logrotate's rename
    in between is followed at the next flush: every line in one of the files."""
    folder = tmp_path / "logs"
    path = folder / "tmy.log"
    logs.configure("info", path, max_bytes=2_000, backups=1000)
    try:
        for n in range(300):
            logs.emit_info_text(HEAD, f"t0-{n:06d}")
            if n % 50 == 49:
                logs.flush()
                path.rename(folder / f"moved.{n}")  # logrotate, between flushes
    finally:
        logs.configure("warning", stream=io.BytesIO())  # type: ignore[arg-type]
    seen = _tags(folder)
    assert len(seen) == 300 and set(seen.values()) == {1}


def test_a_log_file_gets_no_line_before_a_flush_and_all_after(tmp_path: Path) -> None:
    """The direct write goes to the file's buffer: nothing reaches the file until a flush
    (the App's ticker, tracelog's read, exit), then every line at once."""
    path = tmp_path / "tmy.log"
    logs.configure("info", path)
    try:
        for n in range(5):
            logs.emit_info_text(HEAD, f"t0-{n:06d}")
        before = path.read_bytes()
        logs.flush()
        after = path.read_bytes()
    finally:
        logs.configure("warning", stream=io.BytesIO())  # type: ignore[arg-type]
    assert before == b"" and len(_ID.findall(after)) == 5


class _Terminal(io.BytesIO):
    """What a terminal shows: the bytes that were flushed."""

    shown = b""

    def isatty(self) -> bool:
        return True

    def flush(self) -> None:
        super().flush()
        self.shown = self.getvalue()


@pytest.mark.parametrize("fmt", ["json", "console", "auto"])
def test_a_terminal_shows_each_line_at_once(fmt: str) -> None:
    """serve on a terminal: every line flushed as written, whichever writer (the FAQ line,
    run.done's dict, emit), with no ticker."""
    tty = _Terminal()
    logs.configure("info", stream=tty, fmt=fmt)  # type: ignore[arg-type]
    try:
        assert logs.SINK is not None and logs.SINK.interactive
        logs.emit_info_text(HEAD, "t0-000001")
        assert b"t0-000001" in tty.shown
        logs.emit_info({"event": "run.done", "trace_id": "t0-000002", "level": "info",
                        "timestamp": ""})  # fmt: skip
        assert b"t0-000002" in tty.shown
        logs.emit("info", "line", n="t0-000003")
        assert b"t0-000003" in tty.shown
    finally:
        logs.configure("warning", stream=io.BytesIO())  # type: ignore[arg-type]


def test_a_closed_log_file_drops_lines_quietly_and_reopens_nothing(tmp_path: Path) -> None:
    """A LogFile closed under the sink (interpreter exit): every writer and flush quiet."""
    stream = LogFile(tmp_path / "tmy.log")
    sink = JsonLines(stream, interactive=False)
    stream.close()
    with pytest.raises(ValueError):
        sink.out(b"x\n")  # the writers' fallback below takes it
    sink.write(b"x\n")
    sink.msg(b"x")
    sink.flush()
    assert (tmp_path / "tmy.log").read_bytes() == b""


@pytest.mark.slow
def test_lines_never_flushed_reach_the_file_at_interpreter_exit(tmp_path: Path) -> None:
    """No App, no flush: atexit pushes the buffered lines (FAQ line, dict, emit) out."""
    path = tmp_path / "tmy.log"
    code = (
        "from tmy import logs\n"
        "logs.BOUND = {}\n"
        f"logs.configure('info', {str(path)!r})\n"
        f"assert logs.emit_info_text({HEAD!r}, 't0-000001')\n"
        "logs.emit_info({'event': 'run.done', 'trace_id': 't0-000002', 'level': 'info',"
        " 'timestamp': ''})\n"
        "logs.emit('info', 'line', n='t0-000003')\n"
        "import os; assert os.path.getsize(" + repr(str(path)) + ") == 0\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert _ID.findall(path.read_bytes()) == [b"t0-000001", b"t0-000002", b"t0-000003"]
