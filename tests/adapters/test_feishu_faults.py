"""Feishu faults found in review, each shown against the loopback fake: a second start(),
a split event claiming a huge number of parts, a connection closed as soon as it opens,
a secret revoked while serving webhooks, webhook headers and tokens that are not text,
and a reply with both mentions and buttons."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import os
from pathlib import Path

import pytest

from tests.adapters.test_feishu import RULES, driven, make
from tests.adapters.test_feishu_webhook import hooked, post
from tests.support.adapters import wait_state
from tests.support.feishu_fake import (
    BOB,
    ENCRYPT_KEY,
    GROUP,
    TICKET,
    VERIFICATION_TOKEN,
    FakeFeishu,
    encrypt,
)
from tests.support.llm_fake_provider import PNG
from tests.support.log_helpers import read_log
from tmy.adapters.feishu import api
from tmy.adapters.feishu.longconn import LongConnection
from tmy.message import Button, Outgoing, Target
from tmy.testing import Bot


async def test_a_second_start_opens_no_second_long_connection() -> None:
    """start() while running must not open another long connection (every event would
    come twice, and stop() would close only the second: the first leaks on)."""
    async with FakeFeishu() as fake, Bot({"r.yaml": RULES}) as bot:
        adapter = make(fake)
        await adapter.start(bot.engine.handle)
        await wait_state(adapter, "connected")
        await adapter.start(bot.engine.handle)
        await asyncio.sleep(0.3)
        connections = fake.connections
        await adapter.stop()
        await asyncio.sleep(0.1)
        left_open = len(fake.sockets)
    assert connections == 1
    assert left_open == 0


async def test_a_split_event_claiming_huge_parts_neither_drops_nor_exhausts() -> None:
    """``sum`` comes from the wire: a frame claiming 2**62 parts allocated a list that
    size (MemoryError), which ended the connection."""
    async with driven() as d:
        big = [("type", "event"), ("message_id", "f-big"), ("sum", str(2**62)), ("seq", "0")]
        await d.fake.push_frame(big, b'{"schema": "2.0"')
        await d.fake.push(d.fake.message("echo still here"))
        sent = await d.fake.next_sent()
    assert sent["content"]["text"].endswith("|still here")
    assert d.fake.connections == 1


async def test_connections_closed_at_once_are_retried_ever_more_slowly(log_file: Path) -> None:
    """Opening the WebSocket proves nothing yet: a connection closed as soon as it opens
    (the app's long connection switched off, too many clients) must see the pauses grow,
    not a new endpoint call and connection every ``backoff_base`` forever."""
    async with driven() as d:
        d.fake.hangup = True
        await d.fake.drop()
        async with asyncio.timeout(10):
            while d.fake.connections < 11:
                await asyncio.sleep(0.01)
        d.fake.hangup = False
    pauses = [e["retry_in"] for e in read_log(log_file) if e["event"] == "feishu.reconnecting"]
    assert len(pauses) >= 10
    assert max(pauses) > d.adapter.backoff_base  # 0.05 s the first, capped at 0.2 s here


async def test_a_secret_revoked_while_serving_webhooks_shows_failed() -> None:
    """In webhook mode nothing reconnects, so a secret reset in the console after start
    showed only as failed sends while /healthz said ``connected``."""
    async with hooked() as (d, client):
        d.fake.app_secret = "reset-in-the-console"  # the old secret and its tokens die
        d.fake.tokens.clear()
        answered = await post(client, *d.fake.webhook_request(d.fake.message("echo lost")))
        await wait_state(d.adapter, "failed")
        report = d.adapter.health()
    assert answered.status_code == 200
    assert "10014" in report["error"] and "app_secret" in report["error"]
    assert d.fake.app_secret not in json.dumps(report)


async def test_a_signature_header_that_is_not_text_is_refused_not_a_500() -> None:
    """aiohttp gives a non-UTF-8 header byte as a lone surrogate; hashing it raised
    UnicodeEncodeError: an unauthenticated request got a 500 and a traceback."""
    async with hooked(ENCRYPT_KEY) as (d, client):
        body, headers = d.fake.webhook_request(d.fake.message("echo x"), key=ENCRYPT_KEY)
        raw: dict[str, str | bytes] = dict(headers)
        raw["X-Lark-Request-Timestamp"] = b"\xff\xfe"
        answered = await client.post("/feishu/events", content=body, headers=raw)
    assert answered.status_code in (401, 403)
    assert d.seen == []


async def test_a_token_with_a_lone_surrogate_is_refused_not_a_500() -> None:
    """JSON may carry ``\\ud800``; comparing it raised UnicodeEncodeError (a 500) on the
    URL verification, which anyone can post."""
    body = b'{"type": "url_verification", "challenge": "c", "token": "\\ud800"}'
    async with hooked() as (d, client):
        answered = await post(client, body, {"Content-Type": "application/json"})
        fine = await post(
            client,
            *d.fake.webhook_request(
                {"type": "url_verification", "challenge": "c", "token": VERIFICATION_TOKEN}
            ),
        )
    assert answered.status_code == 403
    assert fine.status_code == 200 and fine.json() == {"challenge": "c"}


async def test_mentions_with_buttons_send_the_text_once() -> None:
    """The first piece became rich text for the mention, so the card for the buttons did
    not replace it: the card was added with the same text and the text went out twice."""
    async with driven() as d:
        buttons = [[Button(text="Yes", data="y")]]
        await d.adapter.send(
            Target("feishu", GROUP), "Lunch?", Outgoing(mentions=[BOB], buttons=buttons)
        )
        sent = [d.fake.sent.get_nowait() for _ in range(d.fake.sent.qsize())]
    texts = json.dumps([s["content"] for s in sent]).count("Lunch?")
    assert texts == 1
    assert [s["msg_type"] for s in sent] == ["post", "interactive"]
    assert sent[1]["content"]["elements"][-1]["actions"][0]["value"] == {"data": "y"}


async def test_encrypted_bodies_tell_a_forger_nothing_of_what_they_decrypt_to() -> None:
    """Unsigned, an event, bytes that are no JSON, JSON that is no object and bad padding
    were told apart (401 "no X-Lark-Signature", 401 "does not decrypt", 400): an oracle on
    a tampered ciphertext's plaintext. And a signed body is checked before decrypting."""
    plain = {"Content-Type": "application/json"}
    async with hooked(ENCRYPT_KEY) as (d, client):
        event, signed = d.fake.webhook_request(d.fake.message("echo x"), key=ENCRYPT_KEY)
        sealed = [
            event,
            json.dumps({"encrypt": encrypt(b"no json at all", ENCRYPT_KEY)}).encode(),
            json.dumps({"encrypt": encrypt(b"[1, 2]", ENCRYPT_KEY)}).encode(),
            json.dumps({"encrypt": base64.b64encode(os.urandom(48)).decode()}).encode(),
        ]
        unsigned = [await post(client, body, plain) for body in sealed]
        sealed_text = json.loads(event)["encrypt"]
        raw = bytearray(base64.b64decode(sealed_text))
        raw[-1] ^= 1  # the padding spoiled, the signature of the original body kept
        tampered = json.dumps({"encrypt": base64.b64encode(bytes(raw)).decode()}).encode()
        altered = await post(client, tampered, signed)
    assert {(r.status_code, r.text) for r in unsigned} == {(401, unsigned[0].text)}
    assert altered.status_code == 403
    assert d.seen == []


async def test_stop_does_not_wait_on_a_socket_that_never_closes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A peer that reads nothing more never answers the close frame: stop() waited
    aiohttp's default 10 s for it (per socket), the daemon's shutdown with it."""
    monkeypatch.setattr(LongConnection, "close_timeout", 0.2)
    async with FakeFeishu() as fake, Bot({"r.yaml": RULES}) as bot:
        fake.frozen = True
        adapter = make(fake)
        await adapter.start(bot.engine.handle)
        await wait_state(adapter, "connected")
        async with asyncio.timeout(5):
            await adapter.stop()
    assert adapter.health()["state"] == "stopped"


async def test_a_rate_limit_reset_of_nan_waits_the_default(
    log_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``x-ogw-ratelimit-reset: nan`` parsed as a float that compares false with every
    number: no pause at all, the refused send was made again at once."""
    monkeypatch.setattr(api, "DEFAULT_RETRY_AFTER", 0.05)
    async with driven() as d:
        d.fake.flood, d.fake.flood_reset = 1, math.nan
        await d.adapter.send(Target("feishu", GROUP), "after the limit")
        sent = await d.fake.next_sent()
    waits = [e["retry_after"] for e in read_log(log_file) if e["event"] == "feishu.rate_limited"]
    assert sent["content"] == {"text": "after the limit"}
    assert waits == [0.05]


async def test_stop_before_start_twice_and_a_restart_after_stop() -> None:
    async with FakeFeishu() as fake, Bot({"r.yaml": RULES}) as bot:
        adapter = make(fake)
        await adapter.stop()  # never started: nothing to close
        await adapter.start(bot.engine.handle)
        await wait_state(adapter, "connected")
        await adapter.stop()
        await adapter.stop()
        stopped = adapter.health()["state"]
        await adapter.start(bot.engine.handle)
        try:
            await wait_state(adapter, "connected")
            await fake.push(fake.message("echo again"))
            sent = await fake.next_sent()
        finally:
            await adapter.stop()
    assert stopped == "stopped"
    assert sent["content"]["text"].endswith("|again")
    assert fake.connections == 2


async def test_a_token_answer_without_feishus_code_is_retried_not_failed() -> None:
    """A gateway's page (HTTP 200, no JSON) instead of the token was taken for a refused
    app_secret: ``failed`` for good, although Feishu never said no."""
    async with FakeFeishu() as fake, Bot({"r.yaml": RULES}) as bot:
        fake.token_glitches = 1
        adapter = make(fake)
        await adapter.start(bot.engine.handle)
        try:
            await wait_state(adapter, "connected")
        finally:
            report = adapter.health()
            await adapter.stop()
    assert report["state"] == "connected"
    assert fake.token_requests == 2


async def test_a_picture_is_uploaded_again_after_its_token_was_called_invalid() -> None:
    """Every other call made with a token Feishu calls invalid is made again with a fresh
    one; an upload was not (its multipart body is spent), so the picture went out as the
    words "[image] not sent"."""
    picture = "data:image/png;base64," + base64.b64encode(PNG).decode()
    async with driven() as d:
        d.fake.tokens.clear()  # the tenant token is invalidated on Feishu's side
        await d.adapter.send(Target("feishu", GROUP), "", Outgoing(images=[picture]))
        sent = await d.fake.next_sent()
    assert sent["msg_type"] == "image"
    assert d.fake.images[sent["content"]["image_key"]] == PNG


async def test_a_secret_revoked_while_connected_fails_and_closes_the_long_connection() -> None:
    """Failed means failed: an adapter whose token Feishu refuses no longer takes events
    it cannot answer (left unacknowledged, Feishu delivers them again after the fix)."""
    async with driven() as d:
        d.fake.app_secret = "reset-in-the-console"
        d.fake.tokens.clear()
        await d.fake.push(d.fake.message("echo lost"))
        await wait_state(d.adapter, "failed")
        async with asyncio.timeout(5):
            while d.fake.sockets:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # several backoff pauses: no reconnect follows
    assert d.fake.connections == 1
    assert "10014" in d.adapter.health()["error"]


async def test_the_long_connections_ticket_stays_out_of_healthz_and_the_log(log_file: Path) -> None:
    """The endpoint's wss:// URL carries the connection's access_key and ticket; a refused
    handshake's error (aiohttp names the URL) went into /healthz and the log whole."""
    async with driven() as d:
        d.fake.refuse_upgrade = True
        await d.fake.drop()
        async with asyncio.timeout(5):
            while "403" not in (d.adapter.health()["error"] or ""):
                await asyncio.sleep(0.01)
        report = json.dumps(d.adapter.health())
        d.fake.refuse_upgrade = False
        await wait_state(d.adapter, "connected")
    logged = json.dumps(read_log(log_file))
    assert TICKET not in report and "ticket=***" in report
    assert TICKET not in logged and "ticket=***" in logged  # the reconnecting line


async def test_deeply_nested_json_is_a_400_not_a_500() -> None:
    """json.loads raises RecursionError, not ValueError, past ~1,000 levels: 50 KB of '['
    from anyone was a 500 with a traceback."""
    async with hooked() as (d, client):
        nested = await post(client, b"[" * 50_000, {"Content-Type": "application/json"})
        deep = b'{"a":' * 50_000
        object_ = await post(client, deep, {"Content-Type": "application/json"})
    assert (nested.status_code, object_.status_code) == (400, 400)
    assert d.seen == []


async def test_no_credential_reaches_the_log(log_file: Path) -> None:
    """The app secret, the tenant tokens, the verification token and the encrypt key are
    written nowhere in the log, through a reply, a rate limit and refused webhooks."""
    async with hooked(ENCRYPT_KEY) as (d, client):
        d.fake.flood, d.fake.flood_reset = 1, 0.01
        await post(client, *d.fake.webhook_request(d.fake.message("echo x"), key=ENCRYPT_KEY))
        await d.fake.next_sent()
        wrong = d.fake.webhook_request(d.fake.message("echo y"), key=ENCRYPT_KEY, token="bad")
        await post(client, *wrong)
        await post(client, *d.fake.webhook_request(d.fake.message("echo z")))
    logged = json.dumps(read_log(log_file))
    assert "feishu.rate_limited" in logged and "feishu.webhook_refused" in logged
    for secret in (d.fake.app_secret, ENCRYPT_KEY, VERIFICATION_TOKEN, *d.fake.tokens):
        assert secret not in logged
