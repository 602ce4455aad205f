"""OneBot replies written together: several ready actions, one transport write, valid frames.

Real aiohttp WebSockets on loopback: the frames :class:`FrameBatch` builds must
read back as separate, intact text messages on the other end (unmasked from
the server, masked from a client), and a compressed connection goes the slow
way, frame by frame, still intact and in order.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from aiohttp import web

from tests.adapters.test_onebot import RULES, reverse, sent_text, until
from tests.support.onebot_fake import SELF_ID
from tmy.adapters.onebot.batching import BIG_FRAME, FrameBatch
from tmy.testing import Bot

Handler = Callable[[web.WebSocketResponse], Awaitable[None]]


@asynccontextmanager
async def ws_server(on_socket: Handler, **ws_options: Any) -> AsyncIterator[str]:
    """A loopback aiohttp WebSocket server running ``on_socket`` per connection; its URL."""

    async def accept(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(**ws_options)
        await ws.prepare(request)
        await on_socket(ws)
        return ws

    app = web.Application()
    app.router.add_get("/ws", accept)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/ws"
    finally:
        await runner.cleanup()


async def receive_texts(ws: Any, n: int) -> list[str]:
    out = []
    for _ in range(n):
        msg = await ws.receive(timeout=5)
        assert msg.type == aiohttp.WSMsgType.TEXT, msg
        out.append(msg.data)
    return out


def payloads(n: int) -> list[bytes]:
    # a short one, one past 125 bytes, one past 65,535 bytes: each length encoding
    sizes = [10, 300, 70_000]
    pads = ["é" * (size // 2) for size in sizes]
    return [json.dumps({"i": i, "pad": pads[i % 3]}, ensure_ascii=False).encode() for i in range(n)]


async def test_frames_queued_in_one_pass_go_out_in_one_write_from_the_server() -> None:
    sent = payloads(6)
    batches: list[FrameBatch] = []

    async def on_socket(ws: web.WebSocketResponse) -> None:
        batch = FrameBatch(ws, lambda tag, why: None)
        batches.append(batch)
        for payload in sent:  # the same pass of the loop: one write
            batch.push(payload, None)
        await ws.receive()  # until the client closes

    async with ws_server(on_socket) as url, aiohttp.ClientSession() as session:
        ws = await session.ws_connect(url)
        got = await receive_texts(ws, len(sent))
        await ws.close()
    assert got == [p.decode() for p in sent]
    assert (batches[0].writes, batches[0].frames) == (1, 6)


async def test_a_big_frame_and_those_after_it_go_one_by_one_in_order() -> None:
    received: asyncio.Queue[str] = asyncio.Queue()

    async def on_socket(ws: web.WebSocketResponse) -> None:
        async for msg in ws:
            await received.put(msg.data)

    big = json.dumps({"image": "x" * (BIG_FRAME + 1)}).encode()
    sent = [*payloads(2), big, *payloads(2)]
    async with ws_server(on_socket) as url, aiohttp.ClientSession() as session:
        ws = await session.ws_connect(url)
        batch = FrameBatch(ws, lambda tag, why: None)
        for payload in sent:
            batch.push(payload, None)
        got = [await asyncio.wait_for(received.get(), 5) for _ in sent]
        await ws.close()
    assert got == [p.decode() for p in sent]
    # the two before the big one in one write; the big one and the two after, one each
    assert (batch.writes, batch.frames) == (4, 5)


async def test_a_client_socket_masks_its_frames() -> None:
    received: asyncio.Queue[str] = asyncio.Queue()

    async def on_socket(ws: web.WebSocketResponse) -> None:
        async for msg in ws:
            await received.put(msg.data)

    sent = payloads(3)
    async with ws_server(on_socket) as url, aiohttp.ClientSession() as session:
        ws = await session.ws_connect(url)
        batch = FrameBatch(ws, lambda tag, why: None)
        for payload in sent:
            batch.push(payload, None)
        got = [await asyncio.wait_for(received.get(), 5) for _ in sent]
        await ws.close()
    assert got == [p.decode() for p in sent]  # the server unmasked every frame
    assert (batch.writes, batch.frames) == (1, 3)


async def test_a_compressed_connection_sends_frame_by_frame_in_order() -> None:
    received: asyncio.Queue[str] = asyncio.Queue()

    async def on_socket(ws: web.WebSocketResponse) -> None:
        async for msg in ws:
            await received.put(msg.data)

    sent = payloads(4)
    async with ws_server(on_socket, compress=True) as url, aiohttp.ClientSession() as session:
        ws = await session.ws_connect(url, compress=15)
        assert ws.compress  # permessage-deflate negotiated
        batch = FrameBatch(ws, lambda tag, why: None)
        for payload in sent:
            batch.push(payload, None)
        got = [await asyncio.wait_for(received.get(), 5) for _ in sent]
        await ws.close()
    assert got == [p.decode() for p in sent]
    assert (batch.writes, batch.frames) == (4, 4)


async def test_a_frame_for_a_closed_socket_fails_its_sender() -> None:
    failures: list[str] = []

    async def on_socket(ws: web.WebSocketResponse) -> None:
        await ws.close()
        batch = FrameBatch(ws, lambda tag, why: failures.append(f"{tag}: {why}"))
        batch.push(b'{"action": "send_msg"}', "echo-1")
        await asyncio.sleep(0.05)

    async with ws_server(on_socket) as url, aiohttp.ClientSession() as session:
        ws = await session.ws_connect(url)
        await ws.receive(timeout=5)  # the close
        await until(lambda: bool(failures))
    assert failures == ["echo-1: the connection is closing"]


async def test_replies_ready_together_are_written_together() -> None:
    groups = [30001, 30002, 30003, 30004, 30005]
    async with Bot({"ob.yaml": RULES}) as bot, reverse(bot, send_interval=0) as served:
        impl = await served.connect()
        served.blocked = {f"group:{g}" for g in groups}  # their runs wait for ``release``
        for i, group in enumerate(groups):
            await impl.group(f"echo m{i}", group=group, message_id=100 + i)
        await until(lambda: len(served.seen) == len(groups))
        conn = served.adapter._accounts.bots[str(SELF_ID)]
        before = (conn._out.writes, conn._out.frames)
        served.release.set()  # five runs end in the same pass: five replies ready at once
        actions = [await impl.next_action() for _ in groups]
        after = (conn._out.writes, conn._out.frames)
    assert after[1] - before[1] == 5
    assert after[0] - before[0] == 1  # one write for the five frames
    # one protocol-valid send_msg per reply, each to its own group
    answered = {a["params"]["group_id"]: sent_text(a) for a in actions}
    assert answered == {g: f"onebot|group:{g}|20002|Ann|m{i}" for i, g in enumerate(groups)}


def test_a_batch_of_server_frames_is_the_frames_one_after_another() -> None:
    from tmy.adapters.onebot.batching import _joined, frame

    payloads = [b"x" * n for n in (0, 5, 125, 126, 200, 65535, 65536, 70000)]
    batch = [(p, lambda why: None) for p in payloads]
    assert _joined(batch, False) == b"".join(frame(p, False) for p in payloads)
