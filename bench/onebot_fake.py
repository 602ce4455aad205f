"""The fake NapCat of ``onebot_path.py``, and the floor server it is measured against.

**The fake** (:func:`drive`) is a OneBot v11 reverse-WebSocket client, as
NapCat is: it connects to a server's ``/onebot/v11/ws`` with ``X-Self-ID``,
``X-Client-Role: Universal`` and the access token, sends group ``message``
events (one JSON event per frame) keeping ``in_flight`` of them unanswered,
and answers every action the server sends with an echo'd OK response
(``{"status": "ok", "retcode": 0, "data": {"message_id": …}, "echo": …}``).
No two messages in flight share a group, so every ``send_msg`` is matched to
its message by ``group_id`` and checked: the right text to the right group, or
it counts as wrong. A message's latency runs from its event's write to the
arrival of the action answering it.

**The floor** (``python bench/onebot_fake.py floor PORT``) is a bare aiohttp
WebSocket server on the same path: it decodes each frame (orjson) and answers
each message event with one fixed ``send_msg`` frame (text ``ok``); the fake
then matches answers in order. It is what the machine needs to take an event
and write one action on a WebSocket, with nothing of a bot in between.
"""

from __future__ import annotations

import asyncio
import base64
import os
import struct
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import orjson

SELF_ID = 10001
TOKEN = "bench-onebot-token"
PATH = "/onebot/v11/ws"
FLOOR_TEXT = "ok"
FLOOR_FRAME = orjson.dumps(
    {
        "action": "send_msg",
        "params": {
            "message_type": "group",
            "group_id": 1,
            "message": [{"type": "text", "data": {"text": FLOOR_TEXT}}],
        },
        "echo": "floor",
    }
).decode()


def event(message_id: int, group: int, user: int, text: str) -> bytes:
    """A NapCat group message event (array message format), as one frame's UTF-8 text."""
    return orjson.dumps(
        {
            "time": int(time.time()),
            "self_id": SELF_ID,
            "post_type": "message",
            "message_type": "group",
            "sub_type": "normal",
            "message_id": message_id,
            "group_id": group,
            "user_id": user,
            "anonymous": None,
            "message": [{"type": "text", "data": {"text": text}}],
            "raw_message": text,
            "font": 0,
            "sender": {"user_id": user, "nickname": f"u{user}", "card": "", "role": "member"},
        }
    )


def action_text(params: dict[str, Any]) -> str:
    """The text an action sends (a segment array, or a CQ string)."""
    message = params.get("message")
    if isinstance(message, str):
        return message.strip()
    if isinstance(message, list):
        return "".join(
            s["data"].get("text", "")
            for s in message
            if isinstance(s, dict) and s.get("type") == "text"
        ).strip()
    return ""


def _mask(payload: bytes, key: bytes) -> bytes:
    """RFC 6455 client masking (XOR with the 4-byte key), done as one big-integer XOR."""
    n = len(payload)
    if not n:
        return payload
    stream = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "little") ^ int.from_bytes(stream, "little")).to_bytes(
        n, "little"
    )


def client_frame(payload: bytes, opcode: int = 0x1) -> bytes:
    """One masked client frame (a client must mask; a fresh random key per frame)."""
    key = os.urandom(4)
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    return head + key + _mask(payload, key)


class _Fake(asyncio.Protocol):
    """The fake NapCat's socket: a lean WebSocket client (handshake, frames) so that the
    load generator, not the server under test, is never the bottleneck."""

    def __init__(self, run: _Run) -> None:
        self.run = run
        self.buf = bytearray()
        self.upgraded = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.upgraded.done():
            self.upgraded.set_exception(ConnectionError(f"closed during the handshake: {exc}"))
        self.run.closed(exc)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        if not self.upgraded.done():
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buf[:end])
            del buf[: end + 4]
            if not head.startswith(b"HTTP/1.1 101"):
                self.upgraded.set_exception(ConnectionError(head.decode(errors="replace")))
                return
            self.upgraded.set_result(None)
        pos = 0
        size = len(buf)
        while size - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1] & 0x7F
            at = pos + 2
            if b1 == 126:
                if size - at < 2:
                    break
                (b1,) = struct.unpack_from("!H", buf, at)
                at += 2
            elif b1 == 127:
                if size - at < 8:
                    break
                (b1,) = struct.unpack_from("!Q", buf, at)
                at += 8
            if size - at < b1:
                break
            payload = bytes(buf[at : at + b1])
            pos = at + b1
            opcode = b0 & 0x0F
            if opcode == 0x1:
                self.run.frame(payload)
            elif opcode == 0x9:
                self.send(payload, 0xA)
            elif opcode == 0x8:
                self.send(payload[:2], 0x8)
        del buf[:pos]

    def send(self, payload: bytes, opcode: int = 0x1) -> None:
        assert self.transport is not None
        self.transport.write(client_frame(payload, opcode))


class _Run:
    """One window of messages: what is in flight, what came back, what was wrong."""

    def __init__(self, count: int, in_flight: int, first_id: int, message: Message,
                 groups: int, fixed: bool) -> None:  # fmt: skip
        self.count, self.in_flight, self.first_id = count, in_flight, first_id
        self.message, self.fixed = message, fixed
        self.free: deque[int] = deque(range(1, groups + 1))
        self.pending: dict[int, tuple[int, str, float]] = {}  # group -> (id, expected, sent at)
        self.latencies: list[float] = []
        self.wrong: list[str] = []
        self.sent = 0
        self.capped = False  # the time cap passed: no new messages, the late replies still come
        self.sent_ids = 900_000_000
        self.done = asyncio.get_running_loop().create_future()
        self.proto: _Fake | None = None

    def send_next(self) -> None:
        j = self.first_id + self.sent
        self.sent += 1
        group = self.free.popleft()
        text, expected = self.message(j)
        self.pending[group] = (j, expected, time.perf_counter())
        assert self.proto is not None
        self.proto.send(event(j, group, 20000 + j % 997, text))

    def frame(self, data: bytes) -> None:
        now = time.perf_counter()
        frame = orjson.loads(data)
        if "action" not in frame:
            return
        self.sent_ids += 1
        answer = {"status": "ok", "retcode": 0, "data": {"message_id": self.sent_ids},
                  "echo": frame.get("echo")}  # fmt: skip
        assert self.proto is not None
        self.proto.send(orjson.dumps(answer))
        params = frame.get("params") or {}
        if self.fixed:
            group = next(iter(self.pending)) if self.pending else None
        else:
            group = params.get("group_id")
        item = self.pending.pop(group, None) if group is not None else None
        text = action_text(params)
        if item is None:
            self.wrong.append(f"unexpected {frame.get('action')} to {group}: {text!r}")
            return
        j, expected, at = item
        self.latencies.append(now - at)
        if frame.get("action") not in ("send_msg", "send_group_msg") or text != expected:
            self.wrong.append(f"message {j}: got {text!r} want {expected!r}")
        self.free.append(group)
        if self.sent < self.count and not self.capped:
            self.send_next()
        elif not self.pending and not self.done.done():
            self.done.set_result(None)

    def closed(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


Message = Callable[[int], tuple[str, str]]


async def drive(
    url: str,
    *,
    count: int,
    in_flight: int,
    first_id: int,
    message: Message,
    groups: int = 1000,
    fixed: bool = False,
    time_cap: float = 120.0,
    drain: float = 60.0,
) -> dict[str, Any]:
    """Send ``count`` messages (``message(j)`` -> (text, expected reply)) over one socket,
    ``in_flight`` at a time; return answered/wrong counts, latencies and wall time.

    ``fixed``: the server answers with :data:`FLOOR_FRAME` in order (the floor). After
    ``time_cap`` seconds no new message is sent and the replies in flight get ``drain``
    more seconds (a slow peer's late replies must not land in the next window)."""
    host_port, _, path = url.removeprefix("ws://").partition("/")
    host, _, port = host_port.partition(":")
    run = _Run(count, in_flight, first_id, message, groups, fixed)
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_connection(lambda: _Fake(run), host, int(port))
    run.proto = proto
    key = base64.b64encode(os.urandom(16)).decode()
    transport.write(
        (
            f"GET /{path} HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"X-Self-ID: {SELF_ID}\r\nX-Client-Role: Universal\r\n"
            f"Authorization: Bearer {TOKEN}\r\n\r\n"
        ).encode()
    )
    await asyncio.wait_for(proto.upgraded, 30)
    start = time.perf_counter()
    for _ in range(min(in_flight, count)):
        run.send_next()
    try:
        await asyncio.wait_for(asyncio.shield(run.done), time_cap)
    except TimeoutError:
        run.capped = True  # a slow server: stop sending, wait for what is in flight
        run.count = run.sent
        try:
            await asyncio.wait_for(asyncio.shield(run.done), drain)
        except TimeoutError:
            pass
    wall = time.perf_counter() - start
    proto.send(struct.pack("!H", 1000), 0x8)
    await asyncio.sleep(0.05)
    transport.close()
    return {
        "sent": run.sent,
        "answered": len(run.latencies),
        "unanswered": len(run.pending),
        "wrong": len(run.wrong),
        "wrong_examples": run.wrong[:5],
        "wall_s": wall,
        "latencies": run.latencies,
    }


async def floor_server(port: int) -> None:
    """The floor: decode each frame, answer each message event with one fixed frame."""
    from aiohttp import WSMsgType, web

    async def accept(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=False, max_msg_size=4 * 1024 * 1024)
        await ws.prepare(request)
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                frame = orjson.loads(msg.data)
                if frame.get("post_type") == "message":
                    await ws.send_str(FLOOR_FRAME)
        return ws

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get(PATH, accept)
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()


def wrap(argv: list[str]) -> None:
    """Run the script ``argv[0]`` (with its arguments) as ``__main__``, SIGUSR1 calling
    ``os.getppid`` and SIGUSR2 ``os.getpgrp``: under ``valgrind --tool=callgrind
    --zero-before=os_getppid --dump-before=os_getpgrp`` they zero and dump the counters,
    so ``onebot_path.py --callgrind`` measures exactly the messages of one window. With
    ``TMY_BENCH_PROFILE=FILE`` (``onebot_path.py --profile``) the signals start and stop a
    cProfile of the window instead, written to FILE."""
    import runpy
    import signal

    profile_out = os.environ.get("TMY_BENCH_PROFILE")
    if profile_out:  # --profile: cProfile of the window instead of callgrind's counters
        import cProfile

        profiler = cProfile.Profile()

        def stop(*_: Any) -> None:
            profiler.disable()
            profiler.dump_stats(profile_out)

        signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())
        signal.signal(signal.SIGUSR2, stop)
    else:
        signal.signal(signal.SIGUSR1, lambda *_: os.getppid())
        signal.signal(signal.SIGUSR2, lambda *_: os.getpgrp())
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
    runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "floor":
        try:
            asyncio.run(floor_server(int(sys.argv[2])))
        except KeyboardInterrupt:
            pass
    elif len(sys.argv) > 2 and sys.argv[1] == "wrap":
        wrap(sys.argv[2:])
    else:
        sys.exit("usage: python bench/onebot_fake.py floor PORT | wrap SCRIPT [ARG ...]")
