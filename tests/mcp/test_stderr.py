"""A stdio server's stderr: relayed into tmy's log (secrets masked, bounded), never straight
onto tmy's own stderr; what a server that died in the handshake said is in its error."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.mcp.conftest import TOOLBOX
from tests.support.log_helpers import read_log
from tmy import logs, redact
from tmy.mcp import stderr
from tmy.mcp.config import parse_mcp
from tmy.mcp.servers import Servers
from tmy.mcp.stderr import StderrRelay

SECRET = "stderr-secret-90210"


def events(path: Path, name: str) -> list[dict[str, Any]]:
    logs.flush()
    return [e for e in read_log(path) if e.get("event") == name]


async def test_lines_are_logged_masked_and_a_flood_is_bounded(
    log_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stderr, "BURST", 5)
    redact.add(SECRET)
    relay = StderrRelay("box")
    relay.file.write(f"starting with token={SECRET}\n" + "x" * (stderr.LINE_CHARS + 50) + "\n")
    relay.file.write("".join(f"flood {i}\n" for i in range(100)))
    relay.file.flush()
    await relay.aclose()
    lines = [e["line"] for e in events(log_file, "mcp.stderr")]
    assert lines[0] == "starting with token=***"
    assert lines[1] == "x" * stderr.LINE_CHARS + "…"
    assert len(lines) == 5 and relay.lines == 102 and relay.dropped == 97
    [dropped] = events(log_file, "mcp.stderr_dropped")
    assert dropped["lines"] == 97 and dropped["server"] == "box"
    assert relay.tail() == "flood 97 | flood 98 | flood 99"
    assert SECRET not in log_file.read_text()


@pytest.mark.slow
async def test_a_server_printing_its_env_reaches_the_log_masked_not_tmys_stderr(
    log_file: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    script = f'echo "my token is $API_TOKEN" >&2; exec "{sys.executable}" "{TOOLBOX}" stdio'
    config = {"command": "sh", "args": ["-c", script], "env": {"API_TOKEN": SECRET}}
    async with Servers(parse_mcp({"servers": {"box": config}})) as servers:
        await servers.wait_listed(20)
        assert (await servers.call("box", "echo", {"text": "hi"})).text == "hi"
    assert SECRET not in capfd.readouterr().err
    lines = [e["line"] for e in events(log_file, "mcp.stderr")]
    assert "my token is ***" in lines
    assert SECRET not in log_file.read_text()


@pytest.mark.slow
async def test_a_server_dying_in_the_handshake_says_why_in_its_error(log_file: Path) -> None:
    config = {"command": "sh", "args": ["-c", "echo 'fatal: no such database' >&2; exit 3"]}
    async with Servers(parse_mcp({"servers": {"box": config}})) as servers:
        await servers.wait_listed(20)
        state = servers.state("box")
    assert state["state"] == "failed"
    assert state["error"].endswith("; its stderr: fatal: no such database"), state


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
async def test_what_a_stopped_server_left_running_is_ended(tmp_path: Path) -> None:
    """A child that ignores the closed stdin outlives the server the SDK stopped: ended."""
    pidfile = tmp_path / "child.pid"
    script = f'sleep 1000 & echo $! > "{pidfile}"; exec "{sys.executable}" "{TOOLBOX}" stdio'
    config = {"command": "sh", "args": ["-c", script], "timeout": 30}
    async with Servers(parse_mcp({"servers": {"box": config}})) as servers:
        await servers.wait_listed(20)
        child = int(pidfile.read_text())
        assert alive(child)
        call = asyncio.create_task(servers.call("box", "slow", {"seconds": 100}))
        await asyncio.sleep(0.3)  # stopped with the call in flight
    assert not alive(child)
    assert "connection closed" in str(call.exception())
