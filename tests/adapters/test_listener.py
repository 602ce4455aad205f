"""The listener's connection guard on a real loopback port: silent and slow clients.

Every test floods a real :class:`HttpAdapter` with real sockets that send
nothing or trickle a header (slowloris), and shows that the connections are
closed within the header timeout, that the cap is never exceeded, and that
authenticated requests and an open WebSocket keep being served meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from tmy.adapters.http import HttpAdapter
from tmy.adapters.listener import (
    _Deadlines,
    effective_max_connections,
    listen_backlog,
    raise_open_file_limit,
)
from tmy.message import Message, Reply

KEY = "sk-listener-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


async def _echo(message: Message) -> Reply:
    return Reply(f"echo {message.text}", rule="echo", trace_id="t")


class Slow:
    """A mounted route that stays busy until released (a long LLM run, say)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.entered += 1
        await self.release.wait()
        return web.json_response({"ok": True})


async def _ws(request: web.Request) -> web.WebSocketResponse:
    if request.headers.get("Authorization") != f"Bearer {KEY}":
        raise web.HTTPUnauthorized()
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    async for msg in ws:
        await ws.send_str(f"pong {msg.data}")
    return ws


@contextlib.asynccontextmanager
async def listener(**kw: object) -> AsyncIterator[tuple[HttpAdapter, Slow]]:
    slow = Slow()
    adapter = HttpAdapter("127.0.0.1:0", api_keys=[KEY], **kw)  # type: ignore[arg-type]
    adapter.mount([web.get("/test/ws", _ws), web.post("/test/slow", slow.handle)])
    await adapter.start(_echo)
    try:
        yield adapter, slow
    finally:
        slow.release.set()
        await adapter.stop()


async def _open_silent(port: int, n: int) -> list[asyncio.StreamWriter]:
    writers = []
    for _ in range(n):
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writers.append(writer)
    return writers


async def _closed_by_server(reader: asyncio.StreamReader, within: float) -> bool:
    """True when the server closed the connection (EOF or reset) within ``within`` s."""
    try:
        async with asyncio.timeout(within):
            while True:
                data = await reader.read(4096)
                if not data:
                    return True
    except TimeoutError:  # (a subclass of OSError: first)
        return False
    except (ConnectionError, OSError):
        return True


async def _post(session: aiohttp.ClientSession, port: int, text: str) -> dict:
    async with session.post(
        f"http://127.0.0.1:{port}/v1/messages", json={"text": text}, headers=AUTH
    ) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def test_silent_and_slowloris_connections_are_closed_and_requests_still_answered() -> None:
    async with listener(header_timeout=0.5, max_connections=20) as (adapter, _):
        port = adapter.port
        # an authenticated WebSocket opened before the flood: busy, never the one to give way
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))
        async with session:
            ws = await session.ws_connect(f"http://127.0.0.1:{port}/test/ws", headers=AUTH)
            silent = []
            for _ in range(60):  # three times the cap
                silent.append(await asyncio.open_connection("127.0.0.1", port))
            slowloris = []
            for _ in range(10):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"GET /healthz HTTP/1.1\r\nHo")
                slowloris.append((reader, writer))

            async def trickle() -> None:
                while True:
                    await asyncio.sleep(0.1)
                    for _, writer in slowloris:
                        if not writer.is_closing():
                            writer.write(b"s")
                            with contextlib.suppress(ConnectionError):
                                await writer.drain()

            trickler = asyncio.create_task(trickle())
            try:
                # while the flood holds its sockets: the cap holds, and real requests pass
                for i in range(10):
                    assert (await _post(session, port, f"q{i}"))["answer"] == f"echo q{i}"
                    assert adapter.guard is not None and adapter.guard.open <= 20
                await ws.send_str("ping")
                assert (await ws.receive(timeout=5)).data == "pong ping"
                # every silent and every slowloris socket is closed by the server
                closed = await asyncio.gather(
                    *(_closed_by_server(r, within=5) for r, _ in silent + slowloris)
                )
                assert all(closed), f"{closed.count(False)} connections still open"
                # the WebSocket opened before the flood is still served
                await ws.send_str("again")
                assert (await ws.receive(timeout=5)).data == "pong again"
                health = adapter.health()
                assert health["connections"]["max"] == 20
            finally:
                trickler.cancel()
                for _, writer in silent + slowloris:
                    writer.close()
                await ws.close()


async def test_at_the_cap_the_oldest_connection_without_a_request_gives_way() -> None:
    # a long header timeout: only the cap can close anything here
    async with listener(header_timeout=60, max_connections=16) as (adapter, _):
        port = adapter.port
        first = [await asyncio.open_connection("127.0.0.1", port) for _ in range(16)]
        await asyncio.sleep(0.1)
        later = [await asyncio.open_connection("127.0.0.1", port) for _ in range(4)]
        # the four oldest silent sockets made room for the four new ones
        closed = await asyncio.gather(*(_closed_by_server(r, within=3) for r, _ in first[:4]))
        assert all(closed)
        still = await asyncio.gather(*(_closed_by_server(r, within=0.3) for r, _ in first[4:]))
        assert not any(still)
        async with aiohttp.ClientSession() as session:
            assert (await _post(session, port, "in"))["answer"] == "echo in"
        assert adapter.guard is not None and adapter.guard.open <= 16
        for _, writer in first + later:
            writer.close()


async def test_a_busy_request_is_never_evicted_and_in_flight_is_bounded() -> None:
    async with listener(header_timeout=0.3, max_connections=16, max_requests_in_flight=2) as (
        adapter,
        slow,
    ):
        port = adapter.port
        async with aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{port}/test/slow"
            busy = [asyncio.create_task(session.post(url, json={}, headers=AUTH)) for _ in range(2)]
            async with asyncio.timeout(5):
                while slow.entered < 2:
                    await asyncio.sleep(0.01)
            # a third request past max_requests_in_flight: 503 with Retry-After
            async with session.post(
                f"http://127.0.0.1:{port}/v1/messages", json={"text": "x"}, headers=AUTH
            ) as resp:
                assert resp.status == 503
                assert resp.headers["Retry-After"] == "1"
                assert "in flight" in (await resp.json())["error"]
            # a flood past the cap and the header timeout do not touch the busy ones
            flood = [await asyncio.open_connection("127.0.0.1", port) for _ in range(40)]
            await asyncio.sleep(0.6)
            slow.release.set()
            for task in busy:
                resp = await task
                assert resp.status == 200
                resp.release()
            for _, writer in flood:
                writer.close()


async def test_a_body_that_trickles_is_refused_with_408() -> None:
    async with listener(header_timeout=5, body_timeout=0.4) as (adapter, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", adapter.port)
        writer.write(
            b"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Authorization: Bearer " + KEY.encode() + b"\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
        )
        await writer.drain()
        async with asyncio.timeout(5):
            status = await reader.readline()
        assert b" 408 " in status
        assert await _closed_by_server(reader, within=10)
        writer.close()


WITHHELD_BODY = (
    b"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
)


@pytest.mark.parametrize("extra", [b"", b"Upgrade: websocket\r\nConnection: Upgrade\r\n"])
async def test_requests_that_withhold_their_body_hold_no_slot_and_give_way(extra: bytes) -> None:
    """A header without its body (no key, or an Upgrade header on a POST) proves nothing.

    Before, such a request took an in-flight slot and a never-evicted "busy"
    connection for the whole body timeout: a few hundred of them answered every
    authenticated request with 503, or filled the connection cap.
    """
    async with listener(
        header_timeout=5, body_timeout=30, max_connections=24, max_requests_in_flight=4
    ) as (adapter, _):
        port = adapter.port
        head = WITHHELD_BODY.replace(b"\r\n\r\n", b"\r\n" + extra + b"\r\n")
        held = []
        for _ in range(40):  # more than both the in-flight bound and the cap
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(head)
            held.append((reader, writer))
        await asyncio.sleep(0.2)
        assert adapter.in_flight == 0
        async with aiohttp.ClientSession() as session:
            for i in range(6):
                assert (await _post(session, port, f"in {i}"))["answer"] == f"echo in {i}"
        assert adapter.guard is not None and adapter.guard.open <= 24
        # the oldest withheld requests were the ones closed to make room
        assert await _closed_by_server(held[0][0], within=3)
        for _, writer in held:
            writer.close()


async def test_an_idle_keepalive_connection_is_closed_after_keepalive_timeout() -> None:
    async with listener(header_timeout=5, keepalive_timeout=0.3) as (adapter, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", adapter.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        await writer.drain()
        async with asyncio.timeout(5):
            assert b" 200 " in await reader.readline()
        assert await _closed_by_server(reader, within=5)
        writer.close()


def _connect_all(port: int, n: int, within: float) -> int:
    """Start ``n`` TCP handshakes at once, without letting the event loop run (so the
    listener accepts none of them meanwhile): how many the kernel completed ``within`` s.
    A handshake the listen queue has no room for is dropped, and its client would wait
    for a SYN retransmit (1 s) before trying again."""
    import select
    import socket
    import time

    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
        pending, done = set(socks), 0
        deadline = time.monotonic() + within
        while pending and time.monotonic() < deadline:
            _, ready, _ = select.select([], list(pending), [], deadline - time.monotonic())
            for s in ready:
                pending.discard(s)
                done += s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
        return done
    finally:
        for s in socks:
            s.close()


async def test_a_burst_of_connects_fits_the_listen_queue() -> None:
    """1,000 clients connecting at once must not overflow the accept queue (aiohttp's
    default backlog is 128): the listener asks for room for ``max_connections``."""
    from pathlib import Path

    somaxconn = Path("/proc/sys/net/core/somaxconn")
    if not somaxconn.exists() or int(somaxconn.read_text()) < 400:
        pytest.skip("needs Linux with net.core.somaxconn >= 400")
    async with listener(max_connections=400) as (adapter, _):
        assert adapter.guard is not None and adapter.guard.max_connections >= 300
        assert _connect_all(adapter.port, 300, within=0.5) == 300
    assert listen_backlog(16) == 128  # never below aiohttp's own default
    assert listen_backlog(4000) == 4000


def test_the_cap_is_held_to_half_the_open_file_limit() -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert effective_max_connections(10**9) == max(16, soft // 2)
    assert effective_max_connections(20) == 20


def test_the_soft_open_file_limit_is_raised_to_the_hard_one() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard <= 64:
        pytest.skip("needs a finite hard limit above 64")
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
    try:
        got = raise_open_file_limit()
        assert got == {"soft_before": 64, "soft": hard, "hard": hard}
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_onebot_reverse_sockets_keep_working_during_a_flood() -> None:
    """The real OneBot adapter on a flooded listener: a connected NapCat keeps being answered,
    and a NapCat that (re)connects during the flood gets in."""
    from tests.support.onebot_fake import connect_reverse
    from tmy.adapters.onebot import OneBotAdapter, OneBotConfig
    from tmy.testing import Bot

    rules = "rules:\n  - id: hi\n    triggers: [hi]\n    steps: [{plugin: ADJUST, input: pong}]\n"
    async with Bot({"r.yaml": rules}) as bot:
        onebot = OneBotAdapter(
            OneBotConfig(access_token="s3cret-token", send_interval=0),
            store=bot.app.store,
            shutdown_grace=5,
        )
        http = HttpAdapter("127.0.0.1:0", header_timeout=0.5, max_connections=16)
        http.mount(onebot.routes())
        await onebot.start(bot.engine.handle)
        await http.start(bot.engine.handle)
        url = f"ws://127.0.0.1:{http.port}{onebot.config.path}"
        flood: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        try:
            async with aiohttp.ClientSession() as session:
                before = await connect_reverse(session, url, 10001, token="s3cret-token")
                for _ in range(60):
                    flood.append(await asyncio.open_connection("127.0.0.1", http.port))
                during = await connect_reverse(session, url, 10002, token="s3cret-token")
                for impl in (before, during):
                    await impl.group("hi", group=30003)
                    action = await impl.next_action(timeout=10)
                    assert action["action"] == "send_msg", action
                    assert "pong" in str(action["params"]["message"])
                assert http.guard is not None and http.guard.open <= 16
                closed = await asyncio.gather(*(_closed_by_server(r, 5) for r, _ in flood))
                assert all(closed)
                await before.close()
                await during.close()
        finally:
            for _, writer in flood:
                writer.close()
            await onebot.stop()
            await http.stop()


async def test_deadlines_expire_in_the_order_they_were_set_on_one_timer() -> None:
    fired: list[tuple[str, str]] = []
    due = _Deadlines(0.05, "header_timeout", lambda handler, why: fired.append((handler, why)))
    due.add("a")
    await asyncio.sleep(0.01)
    due.add("b")
    due.add("c")
    due.discard("a")  # the oldest goes: its timer finds the next one
    due.add("b")  # set again: now after c
    await asyncio.sleep(0.2)
    assert fired == [("c", "header_timeout"), ("b", "header_timeout")]
    due.add("d")
    due.close()  # the listener stops: nothing fires any more
    await asyncio.sleep(0.1)
    assert fired == [("c", "header_timeout"), ("b", "header_timeout")]
