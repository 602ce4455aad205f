"""Where rendered lines go: a file's own write, a terminal's write-and-flush, a closed stream."""

from __future__ import annotations

import io

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


def test_lines_to_a_closed_stream_are_dropped_without_an_error() -> None:
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
