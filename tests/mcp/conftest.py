"""Real MCP servers for the MCP tests: the toolbox (tests/mcp/servers/toolbox.py), written with
the official SDK's server side, over stdio and over streamable HTTP on loopback.

- ``toolbox_stdio`` → a :class:`StdioToolbox`: ``.config`` is a tmy ``mcp.servers.NAME`` entry
  (``{command: sys.executable, args: [toolbox.py, "stdio"], env: {TOOLBOX_CALL_LOG: …}}``) — tmy
  starts the process itself; ``.call_log`` the file every tool call is written to; ``.calls()``
  those calls parsed (``[{"tool", "arguments", "pid"}, …]``).
- ``toolbox_http`` → a :class:`HttpToolbox` already running on a free 127.0.0.1 port: ``.url``
  (the streamable HTTP endpoint, ``…/mcp``), ``.config`` (``{url, timeout}``), ``.calls()``,
  ``.pid``, ``.kill()`` (SIGKILL, like a crash), ``.restart()`` (kill if running, start again on
  the same port and wait until it answers). Killed at teardown: no orphan processes.
- ``toolbox_sse`` → the same object serving the older SSE transport (``.url`` is ``…/sse``,
  ``.config`` says ``transport: sse``).

Tests that use any of these start processes, so they belong in the slow lane: mark them
``@pytest.mark.slow`` (the hook below also marks every test that requests one of these fixtures,
before the root conftest sorts slow tests first, so a forgotten mark cannot leak a process into
the quick lane).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

TOOLBOX = Path(__file__).resolve().parent / "servers" / "toolbox.py"
TOOLBOX_FIXTURES = {"toolbox_stdio", "toolbox_http", "toolbox_sse"}
TOOLBOX_TOOLS = [  # sorted, as listed before grow() adds "extra"
    "add", "delete_thing", "echo", "fail", "grow", "picture", "slow", "structured", "whoami"
]  # fmt: skip


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that requests a toolbox fixture ``slow`` (they start processes)."""
    for item in items:
        if TOOLBOX_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def read_calls(path: Path) -> list[dict[str, Any]]:
    """The toolbox's call log, one dict per call, oldest first ([] before the first call)."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


@dataclass
class StdioToolbox:
    """A toolbox for tmy to start over stdio: its config entry and its call log."""

    call_log: Path

    @property
    def config(self) -> dict[str, Any]:
        """A fresh tmy ``mcp.servers.NAME`` entry (a new dict each time: tests may add keys)."""
        return {
            "command": sys.executable,
            "args": [str(TOOLBOX), "stdio"],
            "env": {"TOOLBOX_CALL_LOG": str(self.call_log)},
        }

    def calls(self) -> list[dict[str, Any]]:
        return read_calls(self.call_log)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serving_pid(port: int) -> int | None:
    """The pid the toolbox on ``port`` reports (its ``/pid`` route); None when none answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/pid", timeout=1) as response:
            return int(response.read())
    except (OSError, ValueError):
        return None


@dataclass
class HttpToolbox:
    """The toolbox as a process serving HTTP on loopback, which a test may kill and restart."""

    directory: Path
    transport: str = "http"  # "http" (streamable HTTP) or "sse"
    timeout: float = 10.0  # the per-call timeout in .config
    port: int = field(default_factory=_free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def call_log(self) -> Path:
        return self.directory / "calls.jsonl"

    @property
    def server_log(self) -> Path:
        return self.directory / "server.log"

    @property
    def url(self) -> str:
        path = "/mcp" if self.transport == "http" else "/sse"
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def config(self) -> dict[str, Any]:
        """A fresh tmy ``mcp.servers.NAME`` entry (``transport: sse`` for the SSE one)."""
        config: dict[str, Any] = {"url": self.url, "timeout": self.timeout}
        if self.transport == "sse":
            config["transport"] = "sse"
        return config

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def calls(self) -> list[dict[str, Any]]:
        return read_calls(self.call_log)

    def start(self, wait: float = 15.0) -> None:
        """Start on :attr:`port` and return once this process (not another) answers there."""
        cmd = [sys.executable, str(TOOLBOX), self.transport, "--port", str(self.port)]
        env = {**os.environ, "TOOLBOX_CALL_LOG": str(self.call_log)}
        with self.server_log.open("ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + wait
        while _serving_pid(self.port) != self.proc.pid:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                tail = self.server_log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the toolbox did not come up on port {self.port}:\n{tail}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL the server (a crash: no goodbye to clients) and reap it."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def restart(self) -> None:
        """Kill (if running) and start again on the same port."""
        self.kill()
        self.start()


def _started(directory: Path, transport: str) -> Iterator[HttpToolbox]:
    # A free port picked may be taken by someone else before the server binds it: try another.
    for attempt in range(3):
        box = HttpToolbox(directory, transport)
        try:
            box.start()
            break
        except RuntimeError:
            if attempt == 2:
                raise
    try:
        yield box
    finally:
        box.kill()


@pytest.fixture
def toolbox_stdio(tmp_path: Path) -> StdioToolbox:
    """The toolbox's tmy config entry over stdio (tmy starts the process) and its call log."""
    return StdioToolbox(tmp_path / "toolbox-stdio-calls.jsonl")


@pytest.fixture
def toolbox_http(tmp_path: Path) -> Iterator[HttpToolbox]:
    """The toolbox serving streamable HTTP on a free loopback port, killed at teardown."""
    directory = tmp_path / "toolbox-http"
    directory.mkdir()
    yield from _started(directory, "http")


@pytest.fixture
def toolbox_sse(tmp_path: Path) -> Iterator[HttpToolbox]:
    """The toolbox serving the SSE transport on a free loopback port, killed at teardown."""
    directory = tmp_path / "toolbox-sse"
    directory.mkdir()
    yield from _started(directory, "sse")
