"""What bench/checkin_kill.py, bench/checkin_stall.py and their tests share.

The README's check-in rule (a guard, an increment, a date stamp) with one
deliberately slow step between the increment and the stamp: an HTTP step to
a local :class:`Gate` that answers when the bench says so. Real daemons
(``python run.py serve``) run it; a bench kills (SIGKILL) or pauses (SIGSTOP)
one of them while its run sits in that step, i.e. between two steps of the
rule, and then reads the store to see what was left behind.

Everything is loopback: the daemons listen on 127.0.0.1, the gate too, the
optional :class:`FreezingProxy` sits between a daemon and Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tmy.store import MISSING, open_store  # noqa: E402

CHECKIN = """
variables:
  checkins: {{scope: user, default: 0}}
  last_checkin: {{scope: user, default: ""}}
rules:
  - id: checkin
    triggers: ["签到"]
    steps:
      - {{plugin: ADJUST, input: "今天已经签到过了", stop: "?= last_checkin == NOW[:10]"}}
      - {{plugin: ADJUST, input: "?= checkins + 1", save: checkins}}
      - {{plugin: HTTP, url: "{gate}", result: status, timeout: 60}}
      - {{plugin: ADJUST, input: "?= NOW[:10]", save: last_checkin}}
      - {{plugin: ADJUST, input: "签到成功，累计 {{checkins}} 次"}}
"""
SUCCESS = "签到成功"
ALREADY = "今天已经签到过了"


def today() -> str:
    """What ``NOW[:10]`` gives in the daemons (local time, same machine)."""
    return datetime.datetime.now().isoformat()[:10]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Gate:
    """A tiny HTTP server the slow step calls: it answers each request after
    ``delay`` seconds, or — when ``hold_first`` — holds the first request until
    :meth:`release` (later ones are answered after ``delay``)."""

    def __init__(self, *, delay: float = 0.0, hold_first: bool = False) -> None:
        self.delay = delay
        self.hold_first = hold_first
        self.arrivals = 0
        self.last_arrival = 0.0  # time.monotonic() of the latest request
        self.arrived = asyncio.Event()  # set at each arrival (cleared by the waiter)
        self._open = asyncio.Event()
        self._server: asyncio.base_events.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slow"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self._open.set()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    def release(self) -> None:
        self._open.set()

    def rearm(self) -> None:
        """Hold the next first request again (a new round)."""
        self._open = asyncio.Event()
        self.arrivals = 0
        self.arrived.clear()

    async def wait_arrival(self, timeout: float = 30.0) -> None:
        await asyncio.wait_for(self.arrived.wait(), timeout)
        self.arrived.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            self.arrivals += 1
            self.last_arrival = time.monotonic()
            first = self.arrivals == 1
            self.arrived.set()
            if self.hold_first and first:
                await self._open.wait()
            elif self.delay:
                await asyncio.sleep(self.delay)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n"
                b"Connection: close\r\n\r\nok"
            )
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            pass
        finally:
            writer.close()


class FreezingProxy:
    """A TCP proxy (127.0.0.1 → target) whose forwarding can be frozen: while
    frozen, bytes in either direction wait (a partition that heals later)."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._thawed = asyncio.Event()
        self._thawed.set()
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def freeze(self) -> None:
        self._thawed.clear()

    def thaw(self) -> None:
        self._thawed.set()

    async def stop(self) -> None:
        self.thaw()
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        for src, dst in ((reader, up_w), (up_r, writer)):
            task = asyncio.get_running_loop().create_task(self._pump(src, dst))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                await self._thawed.wait()
                dst.write(data)
                await dst.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            dst.close()


class Daemon:
    """``python run.py serve`` on 127.0.0.1 with the rules in ``rules`` and ``store``."""

    def __init__(self, name: str, tmp: Path, rules: Path, store: str, *, root: Path = ROOT) -> None:
        self.name = name
        self.tmp = tmp
        self.rules = rules
        self.store = store
        self.root = root
        self.port = free_port()
        self.log = tmp / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TMY_", "OPENAI_"))}
        (self.tmp / "no-plugins").mkdir(exist_ok=True)
        config = self.tmp / "tmy.yaml"
        if not config.exists():
            config.write_text("# every setting at its default except the environment's\n")
        env.update(
            TMY_CONFIG=str(config),
            TMY_WATCH="0",
            TMY_PLUGINS=str(self.tmp / "no-plugins"),
            PYTHONUNBUFFERED="1",
        )
        return env

    async def start(self, timeout: float = 30.0) -> None:
        out = self.log.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(self.root / "run.py"),
                "serve",
                "--no-console",
                "--rules",
                str(self.rules),
                "--store",
                self.store,
                "--http",
                f"127.0.0.1:{self.port}",
            ],
            cwd=self.root,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
        out.close()
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=1) as client:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited: {self.log.read_text()[-2000:]}")
                try:
                    await client.get(f"{self.url}/healthz")
                    return
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{self.name} did not start in {timeout:g}s") from None
                    await asyncio.sleep(0.05)

    async def ask(self, text: str, user: str, timeout: float = 60.0) -> dict[str, Any]:
        """POST /v1/messages; the JSON answer, or ``{"error": …}`` when the daemon died."""
        try:
            async with httpx.AsyncClient(timeout=timeout) as client:
                response = await client.post(
                    f"{self.url}/v1/messages", json={"text": text, "user": user}
                )
            return response.json()
        except (httpx.HTTPError, ValueError) as exc:
            return {"answer": "", "error": f"no answer: {type(exc).__name__}"}

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc is not None:
            self.signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.signal(signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def write_rules(directory: Path, gate: Gate) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "checkin.yaml").write_text(CHECKIN.format(gate=gate.url), encoding="utf-8")
    return directory


async def checkin_state(store_url: str, user: str, platform: str = "http") -> tuple[Any, Any]:
    """(checkins, last_checkin) of ``user`` in the store (None where never written)."""
    store = open_store(store_url)
    await store.open()
    try:
        base = f"var/user/{platform}/{user}/"
        values = await store.get_many([base + "checkins", base + "last_checkin"])
    finally:
        await store.close()
    return tuple(None if v is MISSING else v for v in values)


def consistent(state: tuple[Any, Any]) -> bool:
    """Points and stamp agree: neither written, or one point stamped today."""
    return state in ((None, None), (1, today()))
