"""Slack over the Events API: signed POSTs to /slack/events on the daemon's listener.

Requests are signed the way Slack signs them (tests/support/slack_fake.py ``signed``:
v0 HMAC-SHA256 with the signing secret); the adapter's Web API calls go to the fake.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlencode

import aiohttp

from tests.support.adapters import wait_state
from tests.support.slack_fake import BOT_TOKEN, BOT_USER, CHANNEL, SIGNING_SECRET, FakeSlack, signed
from tmy.adapters.http import HttpAdapter
from tmy.adapters.slack import SlackAdapter, SlackConfig
from tmy.message import Message, Reply
from tmy.testing import Bot

RULES = r"""
rules:
  - id: echo
    triggers: ["echo *"]
    steps:
      - {plugin: ADJUST, input: "{CHAT}|{USER_NAME}|{QUESTION}"}
  - id: voted
    events: [button]
    steps:
      - {plugin: ADJUST, input: "{USER_NAME} picked {EVENT_DATA[data]}"}
"""


class Hooked:
    def __init__(self, fake: FakeSlack, adapter: SlackAdapter, bot: Bot, url: str) -> None:
        self.fake, self.adapter, self.bot, self.url = fake, adapter, bot, url
        self.seen: list[Message] = []

    async def handle(self, message: Message) -> Reply:
        self.seen.append(message)
        return await self.bot.engine.handle(message)

    async def post(
        self, body: bytes, headers: dict[str, str], content_type: str = "application/json"
    ) -> tuple[int, str]:
        async with aiohttp.ClientSession() as session:
            headers = {"Content-Type": content_type, **headers}
            async with session.post(self.url, data=body, headers=headers) as resp:
                return resp.status, await resp.text()


@asynccontextmanager
async def hooked() -> AsyncIterator[Hooked]:
    async with FakeSlack() as fake, Bot({"r.yaml": RULES}) as bot:
        config = SlackConfig(api_base=fake.base, mode="webhook")
        adapter = SlackAdapter(config, bot_token=BOT_TOKEN, signing_secret=SIGNING_SECRET,
                               pacing=0.0)  # fmt: skip
        http = HttpAdapter("127.0.0.1:0")
        http.mount(adapter.routes())
        h = Hooked(fake, adapter, bot, "")
        await http.start(h.handle)
        h.url = f"http://127.0.0.1:{http.port}/slack/events"
        await adapter.start(h.handle)
        try:
            await wait_state(adapter, "connected")
            yield h
        finally:
            await adapter.stop()
            await http.stop()


def body_of(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload).encode()


async def test_url_verification_is_answered_with_its_challenge() -> None:
    async with hooked() as h:
        body = body_of({"token": "t", "challenge": "3eZbrw1aBm2rZ", "type": "url_verification"})
        assert await h.post(body, signed(body)) == (200, "3eZbrw1aBm2rZ")
        assert h.fake.calls_of("apps.connections.open") == []  # no Socket Mode in this mode


async def test_a_signed_event_is_answered_and_its_retries_run_once() -> None:
    async with hooked() as h:
        event = h.fake.message(f"<@{BOT_USER}> echo hooked")
        body = body_of(h.fake.callback(event))
        status, _ = await h.post(body, signed(body))
        assert status == 200
        post = await h.fake.next_post()
        assert post["text"] == f"{CHANNEL}|Ann|hooked"
        retried = {**signed(body), "X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"}
        assert (await h.post(body, retried))[0] == 200
        # the same message as app_mention, another event_id: still one run
        mention = body_of(h.fake.callback({**event, "type": "app_mention"}))
        assert (await h.post(mention, signed(mention)))[0] == 200
        await h.fake.nothing_posted()
        assert len(h.seen) == 1


async def test_unsigned_badly_signed_and_stale_requests_run_nothing() -> None:
    async with hooked() as h:
        body = body_of(h.fake.callback(h.fake.message("echo evil")))
        assert (await h.post(body, {}))[0] == 401
        assert (await h.post(body, {"X-Slack-Signature": "v0=abc"}))[0] == 401
        assert (await h.post(body, signed(body, secret="not-the-secret")))[0] == 403
        stale = signed(body, timestamp=int(time.time()) - 301)
        assert (await h.post(body, stale))[0] == 403
        tampered = signed(body)
        assert (await h.post(body.replace(b"evil", b"nice"), tampered))[0] == 403
        odd = {**signed(body), "X-Slack-Request-Timestamp": "yesterday"}
        assert (await h.post(body, odd))[0] == 403
        await h.fake.nothing_posted()
        assert h.seen == []


async def test_a_button_press_arrives_as_a_form_encoded_payload() -> None:
    async with hooked() as h:
        carrier = {"type": "message", "ts": h.fake.next_ts(), "user": BOT_USER, "text": "Lunch?"}
        form = urlencode({"payload": json.dumps(h.fake.button("lunch:pizza", carrier))}).encode()
        status, _ = await h.post(form, signed(form), "application/x-www-form-urlencoded")
        assert status == 200
        post = await h.fake.next_post()
    assert (post["channel"], post["text"]) == (CHANNEL, "Bob Stone picked lunch:pizza")
    assert "thread_ts" not in post


async def test_a_webhook_before_the_bot_is_known_is_503() -> None:
    async with FakeSlack() as fake:
        config = SlackConfig(api_base=fake.base, mode="webhook")
        adapter = SlackAdapter(config, bot_token="xoxb-wrong-0000", signing_secret=SIGNING_SECRET)
        http = HttpAdapter("127.0.0.1:0")
        http.mount(adapter.routes())
        await http.start(_no_handle)
        await adapter.start(_no_handle)
        try:
            await wait_state(adapter, "failed")
            body = body_of(fake.callback(fake.message("echo x")))
            async with aiohttp.ClientSession() as session:
                url = f"http://127.0.0.1:{http.port}/slack/events"
                async with session.post(url, data=body, headers=signed(body)) as resp:
                    assert resp.status == 503
        finally:
            await adapter.stop()
            await http.stop()
    missing = SlackAdapter(SlackConfig(mode="webhook", signing_secret_env="MY_SECRET"),
                           bot_token=BOT_TOKEN)  # fmt: skip
    await missing.start(_no_handle)
    assert missing.health()["state"] == "failed" and "MY_SECRET" in missing.health()["error"]


async def _no_handle(message: Message) -> Reply:
    raise AssertionError("no message expected")


async def test_signed_payloads_of_another_shape_are_not_a_500_and_run_nothing() -> None:
    async with hooked() as h:
        odd = {"type": "block_actions", "user": "U0BOB0002", "actions": ["x"]}
        form = urlencode({"payload": json.dumps(odd)}).encode()
        status, _ = await h.post(form, signed(form), "application/x-www-form-urlencoded")
        assert status in (200, 400)
        revoked = body_of(h.fake.callback({"type": "tokens_revoked", "tokens": ["U1"]}))
        assert (await h.post(revoked, signed(revoked)))[0] in (200, 400)
        for body in (b"[1, 2]", b'"text"', b"{", b"[" * 100_000):  # the last: nested past recursion
            assert (await h.post(body, signed(body)))[0] == 400
        assert (await h.post(b"\xff\xfe", signed(b"\xff\xfe")))[0] in (400, 403)  # no UTF-8
        await h.fake.nothing_posted()
        assert h.seen == [] and h.adapter.health()["state"] == "connected"


async def test_the_request_url_can_be_verified_before_the_bot_token_is_set() -> None:
    """Slack checks the Request URL when it is saved, often before the app is installed
    (no bot token yet): the challenge is answered while events still get 503."""
    adapter = SlackAdapter(SlackConfig(mode="webhook"), signing_secret=SIGNING_SECRET)
    http = HttpAdapter("127.0.0.1:0")
    http.mount(adapter.routes())
    await http.start(_no_handle)
    await adapter.start(_no_handle)
    url = f"http://127.0.0.1:{http.port}/slack/events"
    try:
        assert adapter.health()["state"] == "failed"
        body = body_of({"token": "t", "challenge": "c4allenge", "type": "url_verification"})
        async with aiohttp.ClientSession() as session:
            async with session.post(url, data=body, headers=signed(body)) as resp:
                assert (resp.status, await resp.text()) == (200, "c4allenge")
            async with session.post(url, data=body, headers={}) as resp:
                assert resp.status == 401
            bad = signed(body, secret="not-the-secret")
            async with session.post(url, data=body, headers=bad) as resp:
                assert resp.status == 403
            event = body_of({"type": "event_callback", "event": {"type": "message"}})
            async with session.post(url, data=event, headers=signed(event)) as resp:
                assert resp.status == 503
    finally:
        await adapter.stop()
        await http.stop()


async def test_a_signature_header_with_non_ascii_bytes_is_403_not_500() -> None:
    async with hooked() as h:
        body = body_of(h.fake.callback(h.fake.message("echo evil")))
        stamp = signed(body)["X-Slack-Request-Timestamp"]
        host, port = "127.0.0.1", int(h.url.split(":")[2].split("/")[0])
        reader, writer = await asyncio.open_connection(host, port)
        head = (
            f"POST /slack/events HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nX-Slack-Request-Timestamp: {stamp}\r\n"
            "X-Slack-Signature: v0=\u00e9\u00e9\r\nConnection: close\r\n\r\n"
        )
        writer.write(head.encode("latin-1") + body)
        await writer.drain()
        status = (await reader.readline()).decode()
        writer.close()
        assert status.split()[1] == "403", status
        await h.fake.nothing_posted()
        assert h.seen == []
