"""Real MCP servers for the MCP tests: the toolbox (tests/mcp/servers/toolbox.py), written with
the official SDK's server side, over stdio and over streamable HTTP on loopback.

- ``toolbox_stdio`` → a :class:`StdioToolbox`: ``.config`` is a tmy ``mcp.servers.NAME`` entry
  (``{command: sys.executable, args: [toolbox.py, "stdio"], env: {TOOLBOX_CALL_LOG: …}}``) — tmy
  starts the process itself; ``.call_log`` the file every tool call is written to; ``.calls()``
  those calls parsed (``[{"tool", "arguments", "pid"}, …]``).
- ``toolbox_http`` → a :class:`HttpToolbox` already running on a free 127.0.0.1 port: ``.url``
  (the streamable HTTP endpoint, ``…/mcp``), ``.config`` (``{url, timeout}``), ``.calls()``,
  ``.pid``, ``await .kill()`` (SIGKILL, like a crash), ``await .start()``, ``await .restart()``
  (kill if running, start again on the same port and wait until it answers) — awaited, so tmy's
  event loop runs meanwhile and sees the server gone and back, as it would in production
  (``.start_now()``/``.kill_now()`` block: fixtures only). Killed at teardown: no orphan processes.
- ``toolbox_sse`` → the same object serving the older SSE transport (``.url`` is ``…/sse``,
  ``.config`` says ``transport: sse``).

Tests that use any of these start processes, so they belong in the slow lane: mark them
``@pytest.mark.slow`` (the hook below also marks every test that requests one of these fixtures,
before the root conftest sorts slow tests first, so a forgotten mark cannot leak a process into
the quick lane).

The tmy side: :func:`served` is a daemon with ``mcp.servers`` (the section parsed by the mcp
extension itself) that yields once their tools are listed; :func:`offered`, :func:`healthz`,
:func:`server_state`, :func:`health_until` and :func:`server_up` read what it knows and reports.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.llm_fake_provider import FakeProvider
from tests.support.llm_helpers import on
from tmy.llm import runtime_of
from tmy.testing import serving
from tmy.testing.bot import default_extensions
from tmy.testing.serving import Daemon

TOOLBOX = Path(__file__).resolve().parent / "servers" / "toolbox.py"
TOOLBOX_FIXTURES = {"toolbox_stdio", "toolbox_http", "toolbox_sse"}
TOOLBOX_TOOLS = [  # sorted, as listed before grow() adds "extra" (and without TOOLBOX_REVEAL)
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
    env: dict[str, str] = field(default_factory=dict)  # more environment, from the next start
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

    def command(self) -> list[str]:
        """The server's command line (a subclass serves another script)."""
        return [sys.executable, str(TOOLBOX), self.transport, "--port", str(self.port)]

    def _launch(self, wait: float) -> float:
        """Start the process; the deadline by which it must answer."""
        env = {**os.environ, **self.env, "TOOLBOX_CALL_LOG": str(self.call_log)}
        with self.server_log.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, env=env
            )
        return time.monotonic() + wait

    def _check(self, deadline: float) -> None:
        """Raise (the process killed) when it died or the deadline passed."""
        assert self.proc is not None
        if self.proc.poll() is not None or time.monotonic() > deadline:
            self.kill_now()
            tail = self.server_log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the toolbox did not come up on port {self.port}:\n{tail}")

    def start_now(self, wait: float = 15.0) -> None:
        """Start, blocking until it answers: for fixtures, outside any running event loop."""
        deadline = self._launch(wait)
        assert self.proc is not None
        while _serving_pid(self.port) != self.proc.pid:
            self._check(deadline)
            time.sleep(0.05)

    async def start(self, wait: float = 15.0) -> None:
        """Start on :attr:`port` and return once this process (not another) answers there;
        the event loop (tmy, in a test) runs meanwhile."""
        deadline = self._launch(wait)
        assert self.proc is not None
        while await asyncio.to_thread(_serving_pid, self.port) != self.proc.pid:
            self._check(deadline)
            await asyncio.sleep(0.05)

    def kill_now(self) -> None:
        """SIGKILL the server (a crash: no goodbye to clients) and reap it, blocking."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    async def kill(self) -> None:
        """SIGKILL the server and reap it; the event loop runs meanwhile."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(proc.wait, 10)

    async def restart(self) -> None:
        """Kill (if running) and start again on the same port, as an operator would: tmy keeps
        running throughout, and sees the server gone and back."""
        await self.kill()
        await self.start()


def _started(directory: Path, transport: str) -> Iterator[HttpToolbox]:
    # A free port picked may be taken by someone else before the server binds it: try another.
    for attempt in range(3):
        box = HttpToolbox(directory, transport)
        try:
            box.start_now()
            break
        except RuntimeError:
            if attempt == 2:
                raise
    try:
        yield box
    finally:
        box.kill_now()


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


# -- the tmy side: a served daemon with MCP servers, and what it reports ------------------------

WAIT = 30.0  # seconds to wait for a server to be listed or reconnected (never asserted on)


def mcp_sections(servers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``sections`` for a Settings: ``mcp: {servers: …}`` parsed by the mcp extension, as
    load_settings parses a config file's section."""
    for extension in default_extensions():
        if extension.config is not None and extension.config.key == "mcp":
            return {"mcp": extension.config.parse({"servers": servers})}
    pytest.fail("no built-in extension claims the 'mcp' config section (tmy/builtins.py)")


@asynccontextmanager
async def served(
    rules: dict[str, str],
    servers: dict[str, dict[str, Any]],
    provider: FakeProvider | None = None,
) -> AsyncIterator[Daemon]:
    """A daemon (:func:`tmy.testing.serving`) on ``rules`` (``{file name: YAML}``) with these
    ``mcp.servers`` (and the fake model ``provider`` as its LLM); yields once every server's
    tools are listed (each must have ``echo``, as the toolbox does)."""
    llm = {"llm": on(provider)} if provider is not None else {}
    async with serving(rules, sections=mcp_sections(servers), **llm) as daemon:
        for server in servers:
            await offered(daemon, f"{server}/echo")
        yield daemon


def tool_source(daemon: Daemon) -> Any:
    """The tool source the MCP extension plugged into the daemon's LLM runtime."""
    source = runtime_of(daemon.engine.services).tool_sources.get("mcp")
    assert source is not None, "the MCP extension plugged no tool source into the LLM runtime"
    return source


async def offered(daemon: Daemon, want: str) -> list[str]:
    """Wait until the MCP tool source offers ``want`` ("SERVER/TOOL"); every name offered."""
    async with asyncio.timeout(WAIT):
        while want not in (names := sorted(t.name for t in tool_source(daemon).offered())):
            await asyncio.sleep(0.05)
    return names


async def healthz(daemon: Daemon) -> dict[str, Any]:
    """``GET /healthz`` on the daemon's listener."""
    async with httpx.AsyncClient() as client:
        response = await client.get(f"{daemon.url}/healthz")
    assert response.status_code == 200, response.text
    return dict(response.json())


def server_state(report: dict[str, Any], name: str) -> dict[str, Any]:
    """The MCP part of a /healthz report for server ``name`` (``{"state", "transport", …}``)."""
    part = report.get("mcp")
    assert isinstance(part, dict), f"/healthz has no 'mcp' part: {report}"
    found = part.get("servers", part).get(name)
    assert isinstance(found, dict) and "state" in found, f"no state for {name!r} in {part}"
    return found


async def health_until(daemon: Daemon, status: str, name: str, state: str) -> dict[str, Any]:
    """Poll /healthz until the report's status and server ``name``'s state are these."""
    async with asyncio.timeout(WAIT):
        while True:
            report = await healthz(daemon)
            if report["status"] == status and server_state(report, name)["state"] == state:
                return report
            await asyncio.sleep(0.1)


async def server_up(daemon: Daemon, name: str) -> float:
    """``tmy_mcp_server_up{server=NAME}`` on the listener's /metrics."""
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"{daemon.url}/metrics")).text
    found = re.search(rf'^tmy_mcp_server_up{{server="{name}"}} (\S+)$', text, re.MULTILINE)
    assert found is not None, f"no tmy_mcp_server_up for {name!r} in /metrics"
    return float(found.group(1))
