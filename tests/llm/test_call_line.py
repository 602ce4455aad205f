"""The ``llm.call`` line: written by ``tmy.logs.emit_info`` inside a run, it is the line
structlog writes for the same fields, byte for byte (but the timestamp)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from tmy import logs
from tmy.llm import exchange
from tmy.llm.wire import Completion, Usage


def _lines(path: Path) -> list[str]:
    logs.flush()
    return [re.sub(r'"timestamp":"[^"]*"', "", line) for line in path.read_text().splitlines()]


def test_the_call_line_is_structlogs_line(tmp_path: Path) -> None:
    path = tmp_path / "tmy.log"
    logs.configure("info", file=path)
    try:
        job = SimpleNamespace(ctx=SimpleNamespace(uri="rules.yaml:ask/0"), scene="general")
        done = Completion(
            content="x",
            tool_calls=[{"id": "1", "name": "t", "arguments": "{}"}],
            usage=Usage(12, 3, 1),
            model="default",
            requests=2,
            latency_ms=12.345,
        )
        fields = {
            "uri": job.ctx.uri,
            "scene": "general",
            "model": "default",
            "prompt_tokens": 12,
            "completion_tokens": 3,
            "cached_tokens": 1,
            "latency_ms": 12.345,
            "requests": 2,
            "tool_calls": 1,
        }
        token = logs.TRACE.set("t1abc")
        try:
            exchange._log_call(job, done)  # type: ignore[arg-type]
            exchange.log.info("llm.call", **fields)
        finally:
            logs.TRACE.reset(token)
        exchange._log_call(job, done)  # type: ignore[arg-type]  # outside a run: no trace_id
        exchange.log.info("llm.call", **fields)
        fast, slow, bare, bare_slow = _lines(path)
        assert fast == slow
        assert bare == bare_slow
        assert '"trace_id":"t1abc"' in fast
        assert "trace_id" not in bare
    finally:
        logs.configure("warning")


def test_no_call_line_above_info(tmp_path: Path) -> None:
    path = tmp_path / "tmy.log"
    logs.configure("warning", file=path)
    try:
        job = SimpleNamespace(ctx=SimpleNamespace(uri="r:a/0"), scene="general")
        done = Completion(content="x", tool_calls=[], usage=Usage(1, 1, 0), model="m")
        token = logs.TRACE.set("t2")
        try:
            exchange._log_call(job, done)  # type: ignore[arg-type]
        finally:
            logs.TRACE.reset(token)
        assert _lines(path) == []
    finally:
        logs.configure("warning")
