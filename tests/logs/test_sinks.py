"""Where rendered lines go: a file's own write, a terminal's write-and-flush, a closed stream."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from tmy import logs
from tmy.logs.sinks import ConsoleLines, JsonLines

HEAD = '{"event":"run.done","trace_id":"'


class _Tty(io.BytesIO):
    flushes = 0

    def flush(self) -> None:
        self.flushes += 1
        super().flush()


def test_a_file_gets_lines_through_its_own_write_and_a_terminal_each_line_flushed() -> None:
    buffered = io.BytesIO()
    sink = JsonLines(buffered, interactive=False)
    assert sink.out == buffered.write  # no frame of ours per line
    tty = _Tty()
    shown = JsonLines(tty, interactive=True)
    shown.out(b"one\n")
    shown.write(b"two\n")
    assert tty.getvalue() == b"one\ntwo\n" and tty.flushes == 2


def test_lines_to_a_closed_stream_are_dropped_without_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(logs, "BOUND", {})  # no context another test bound: the text way
    stream = io.BytesIO()
    logs.configure("info", stream=stream)  # type: ignore[arg-type]
    try:
        stream.close()
        assert logs.emit_info_text(HEAD, "0123456789abcdef") is True
        logs.emit_info({"event": "run.done", "trace_id": "0123456789abcdef"})
        logs.flush()
    finally:
        logs.configure("warning", stream=io.BytesIO())  # type: ignore[arg-type]


def test_a_console_sink_hands_its_lines_to_the_pretty_printer() -> None:
    tty = _Tty()
    sink = ConsoleLines(tty, colors=False)
    sink.out(b'{"event":"run.done","level":"info","rule":"faq"}\n')
    shown = tty.getvalue().decode()
    assert "run.done" in shown and "rule" in shown and "faq" in shown and "{" not in shown


def test_lines_follow_a_log_file_that_logrotate_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file's own write is taken again once a flush has opened the name anew: no line
    is handed to the renamed file's closed handle (and so lost)."""
    monkeypatch.setattr(logs, "BOUND", {})  # no context another test bound: the text way
    path = tmp_path / "tmy.log"
    logs.configure("info", path)
    try:
        logs.emit_info_text(HEAD, "00000000000000a1")
        logs.flush()
        path.rename(tmp_path / "tmy.log.1")  # logrotate's default: rename, then create
        logs.emit_info_text(HEAD, "00000000000000a2")  # still the renamed file (not flushed)
        logs.flush()  # sees the name moved: opens tmy.log anew
        logs.emit_info_text(HEAD, "00000000000000a3")
        logs.emit_info({"event": "run.done", "trace_id": "00000000000000a4"})
        logs.flush()
    finally:
        logs.configure("warning", stream=io.BytesIO())  # type: ignore[arg-type]
    old = (tmp_path / "tmy.log.1").read_text()
    new = path.read_text()
    assert "00000000000000a1" in old and "00000000000000a2" in old
    assert "00000000000000a3" in new and "00000000000000a4" in new
