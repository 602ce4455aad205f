"""Hostile webhook requests to the QQ adapter: each is refused with a 4xx and runs nothing.

The adapter's route is served on a real loopback aiohttp server (webhook mode,
connected to the fake QQ), so what an attacker sends goes through aiohttp's own
parser exactly as on the daemon's listener."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from tests.support.adapters import wait_state
from tests.support.log_helpers import read_log
from tests.support.qq_fake import APP_ID, SECRET, FakeQQ, group_at
from tmy.adapters.qq import WEBHOOK_PATH, QQAdapter, QQConfig
from tmy.message import Message, Reply


@dataclass
class Hooked:
    fake: FakeQQ
    adapter: QQAdapter
    url: str
    port: int
    seen: list[Message]


@asynccontextmanager
async def hooked() -> AsyncIterator[Hooked]:
    """The adapter in webhook mode, connected to the fake, its route on loopback."""
    seen: list[Message] = []

    async def handle(message: Message) -> Reply:
        seen.append(message)
        return Reply("ran", "hostile", "t-1")

    async with FakeQQ() as fake:
        config = QQConfig(mode="webhook", api_base=fake.base, token_url=fake.token_url)
        adapter = QQAdapter(config, app_id=APP_ID, secret=SECRET, send_interval=0.0)
        app = web.Application()
        app.router.add_routes(adapter.routes())
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        await adapter.start(handle)
        try:
            await wait_state(adapter, "connected")
            yield Hooked(fake, adapter, f"http://127.0.0.1:{port}{WEBHOOK_PATH}", port, seen)
        finally:
            await adapter.stop()
            await runner.cleanup()


async def raw_post(port: int, head: bytes, body: bytes) -> int:
    """POST ``body`` with header lines ``head`` as raw bytes (any byte a client may send)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST " + WEBHOOK_PATH.encode() + b" HTTP/1.1\r\nHost: bot\r\nConnection: close\r\n"
        + b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        + head + b"\r\n" + body
    )  # fmt: skip
    await writer.drain()
    answer = await reader.read()
    writer.close()
    return int(answer.split(b" ", 2)[1])


async def test_an_unsigned_validation_with_non_string_fields_is_refused_not_a_500() -> None:
    async with hooked() as h:
        statuses = []
        for d in ({"plain_token": 123, "event_ts": "1"}, {"plain_token": "abc", "event_ts": 17},
                  {"plain_token": ["a"], "event_ts": "1"}):  # fmt: skip
            status, _ = await h.fake.post_webhook(h.url, {"op": 13, "d": d}, headers={})
            statuses.append(status)
    assert statuses == [401, 401, 401]


async def test_json_nested_too_deep_is_refused_not_a_500() -> None:
    async with hooked() as h:
        body = b"[" * 100_000
        unsigned = await raw_post(h.port, b"", body)
        forged = await raw_post(
            h.port,
            b"X-Signature-Ed25519: " + b"00" * 64 + b"\r\nX-Signature-Timestamp: 1\r\n",
            body,
        )
        signed = await raw_post(h.port, _header_lines(h.fake.signed(body)), body)
        await h.fake.nothing_sent()
    assert (unsigned, forged, signed) == (401, 403, 400)
    assert h.seen == []


async def test_a_timestamp_header_that_is_not_utf8_is_refused_not_a_500() -> None:
    async with hooked() as h:
        body = json.dumps({"op": 0, "t": "GROUP_AT_MESSAGE_CREATE", "d": group_at("x")}).encode()
        head = b"X-Signature-Ed25519: " + b"00" * 64 + b"\r\nX-Signature-Timestamp: \xff\xfe\r\n"
        status = await raw_post(h.port, head, body)
    assert status == 403 and h.seen == []


def _header_lines(headers: dict[str, str]) -> bytes:
    lines = [f"{k}: {v}" for k, v in headers.items() if k != "Content-Type"]
    return "".join(line + "\r\n" for line in lines).encode()


async def test_a_signed_request_replayed_after_the_dedup_window_is_refused() -> None:
    async with hooked() as h:
        old = dispatch_body("m-old")
        stale = await raw_post(h.port, _header_lines(h.fake.signed(old, _ago(400))), old)
        fresh = dispatch_body("m-fresh")
        recent = await raw_post(h.port, _header_lines(h.fake.signed(fresh, _ago(60))), fresh)
        await h.fake.next_sent()
        await h.fake.nothing_sent()
    assert (stale, recent) == (401, 200)
    assert [m.message_id for m in h.seen] == ["m-fresh"]


def dispatch_body(msg_id: str) -> bytes:
    d = group_at("hello", msg_id)
    return json.dumps({"id": msg_id, "op": 0, "d": d, "t": "GROUP_AT_MESSAGE_CREATE"}).encode()


def _ago(seconds: int) -> str:
    return str(int(time.time()) - seconds)


async def test_no_secret_or_access_token_reaches_the_log(log_file: Path) -> None:
    async with hooked() as h:
        h.fake.revoke()  # the reply meets a 401 and fetches a new token
        body = dispatch_body("m-log")
        await raw_post(h.port, _header_lines(h.fake.signed(body)), body)
        await h.fake.next_sent()
        await h.fake.post_webhook(h.url, {"op": 0}, headers=FakeQQ(secret="x" * 32).signed(b""))
        tokens = list(h.fake.tokens)
    async with FakeQQ() as fake:
        config = QQConfig(mode="websocket", api_base=fake.base, token_url=fake.token_url)
        wrong = QQAdapter(config, app_id=APP_ID, secret="wrong-secret-value")
        await wrong.start(_unused)
        await wait_state(wrong, "failed")
        await wrong.stop()
    text = json.dumps(read_log(log_file))
    assert "qq.token_fetched" in text and "qq.failed" in text  # the paths ran
    assert SECRET not in text and "wrong-secret-value" not in text
    assert tokens and not any(token in text for token in tokens)


async def _unused(message: Message) -> Reply:
    raise AssertionError("no message expected")
