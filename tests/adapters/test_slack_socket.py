"""Slack's Socket Mode connection under strain: envelopes Slack would not send, start() twice,
the bot token revoked while connected — against the fake Slack on loopback."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.slack_response import SlackResponse

from tests.adapters.test_slack import make_adapter, served
from tests.support.adapters import wait_state
from tests.support.log_helpers import read_log
from tests.support.slack_fake import APP_TOKEN, BOB, BOT_TOKEN, CHANNEL, DM, FakeSlack
from tmy.adapters.slack import SlackAdapter
from tmy.adapters.slack.sending import retry_after
from tmy.errors import AdapterError
from tmy.message import Message, Reply, Target


async def test_malformed_envelopes_leave_the_connection_serving() -> None:
    async with served() as s:
        fake = s.fake
        # an interactive payload whose user is a string and whose actions are no objects
        odd = {"type": "block_actions", "user": BOB, "actions": ["x"], "channel": {"id": CHANNEL}}
        await fake.envelope("interactive", odd)
        odd = {"type": "block_actions", "user": {"id": BOB}, "channel": "C1", "actions": [1]}
        await fake.envelope("interactive", odd)
        # a tokens_revoked event whose tokens are a list, another whose bot list is a number
        await fake.event({"type": "tokens_revoked", "tokens": ["U1"]})
        await fake.event({"type": "tokens_revoked", "tokens": {"bot": 5}})
        await fake.envelope("events_api", {"type": "event_callback", "event": ["x"]})
        # an envelope whose payload is neither an object nor a string (the SDK raises on it)
        await fake.frame({"envelope_id": "env-odd", "type": "events_api", "payload": [1, 2]})
        await fake.frame([1, 2])
        _, post = await s.say("echo still here")
        assert post["text"].endswith("|still here")
        assert len(fake.calls_of("apps.connections.open")) == 1  # the same connection
        assert s.adapter.health()["state"] == "connected"
        assert "env-odd" in fake.acks  # acknowledged: Slack does not send it again


async def test_start_twice_keeps_one_connection_and_stop_ends_it() -> None:
    async with served() as s:
        await s.adapter.start(s.handle)
        await asyncio.sleep(0.3)
        assert len(s.fake.calls_of("apps.connections.open")) == 1
        assert len(s.fake.sockets) == 1
        _, post = await s.say("echo once")
        assert post["text"].endswith("|once")
        await s.adapter.stop()
        async with asyncio.timeout(5):
            while s.fake.sockets:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        assert s.fake.sockets == []  # nothing left running after stop()
        assert len(s.fake.calls_of("apps.connections.open")) == 1


async def test_a_bot_token_revoked_while_connected_fails_on_the_first_refused_send() -> None:
    async with served() as s:
        s.fake.bot_token = "xoxb-the-new-token-after-revocation"  # the old one is refused
        with pytest.raises(AdapterError, match="invalid_auth"):
            await s.adapter.send(Target("slack", CHANNEL), "hello")
        await wait_state(s.adapter, "failed")
        error = s.adapter.health()["error"]
        assert "invalid_auth" in error and "SLACK_BOT_TOKEN" in error
        async with asyncio.timeout(5):
            while s.fake.sockets:  # the Socket Mode connection is closed, not kept
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        assert len(s.fake.calls_of("apps.connections.open")) == 1  # and not reopened
        with pytest.raises(AdapterError, match="not connected"):
            await s.adapter.send(Target("slack", CHANNEL), "again")


async def test_a_silent_connection_is_dropped_by_the_heartbeat_and_replaced() -> None:
    async with served() as s:
        s.fake.silent = True
        s.adapter.heartbeat = 0.1  # for the connections opened from now on
        await s.fake.drop()
        await wait_state(s.adapter, "reconnecting")
        await s.fake.connected()
        await wait_state(s.adapter, "connected")
        s.fake.silent = False  # it answers nothing: the heartbeat gives up on it
        await wait_state(s.adapter, "reconnecting")
        await wait_state(s.adapter, "connected")
        _, post = await s.say("echo heard")
        assert post["text"].endswith("|heard")


async def test_connections_closed_right_after_hello_are_retried_ever_more_slowly(
    log_file: Path,
) -> None:
    """``hello`` is no proof the connection works: a Slack that greets and hangs up at once
    (the app's Socket Mode switched off, too many connections) must see the pauses grow,
    not one every second forever."""
    async with served() as s:
        s.fake.hangup = True
        await s.fake.drop()
        async with asyncio.timeout(10):
            while len(s.fake.calls_of("apps.connections.open")) < 11:
                await asyncio.sleep(0.01)
        s.fake.hangup = False
    pauses = [e["retry_in"] for e in read_log(log_file) if e["event"] == "slack.reconnecting"]
    assert len(pauses) >= 10
    assert max(pauses) > s.adapter.backoff_base  # capped at 0.2 s here, 0.05 s the first


async def test_an_api_base_without_its_trailing_slash_still_reaches_the_api() -> None:
    """``api_base: https://slack.com/api`` is how people write it (the SDK adds the slash
    its urljoin needs: without it, ``auth.test`` would go to ``https://slack.com/``)."""
    async with served(api_base_slash=False) as s:
        assert not s.adapter.config.api_base.endswith("/")
        _, post = await s.say("echo joined")
        assert post["text"].endswith("|joined")


async def test_stop_before_start_twice_and_a_restart() -> None:
    async with served() as s:
        fresh = SlackAdapter()
        await fresh.stop()
        await fresh.stop()
        assert fresh.health()["state"] == "stopped"
        await s.adapter.stop()
        await s.adapter.stop()
        assert s.adapter.health()["state"] == "stopped"
        await s.adapter.start(s.handle)
        await wait_state(s.adapter, "connected")
        _, post = await s.say("echo again")
        assert post["text"].endswith("|again")


async def test_a_channel_waiting_out_a_429_does_not_hold_up_another() -> None:
    async with served() as s:
        s.fake.flood = [1]
        first = asyncio.create_task(s.adapter.send(Target("slack", CHANNEL), "waits"))
        async with asyncio.timeout(5):
            while s.fake.flood:  # the first send got its 429
                await asyncio.sleep(0.01)
        await s.adapter.send(Target("slack", DM), "goes at once")
        assert [p["text"] for p in s.fake.posted] == ["goes at once"]
        await first
        assert [p["channel"] for p in s.fake.posted] == [DM, CHANNEL]


async def test_a_retry_after_past_the_cap_fails_the_send_instead_of_blocking_it() -> None:
    async with served() as s:
        s.fake.flood = [3600]
        with pytest.raises(AdapterError, match="ratelimited"):
            async with asyncio.timeout(5):
                await s.adapter.send(Target("slack", CHANNEL), "an hour?")
        await s.adapter.send(Target("slack", CHANNEL), "next")  # the channel is not blocked
        assert [p["text"] for p in s.fake.posted] == ["next"]


async def test_no_token_or_socket_ticket_reaches_the_log_or_healthz(log_file: Path) -> None:
    async with served() as s:
        await s.fake.drop()  # a reconnect: apps.connections.open gives a ticket URL
        await s.fake.connected()
        await wait_state(s.adapter, "connected")
        s.fake.bot_token = "xoxb-another-token"  # refused from now on
        with pytest.raises(AdapterError) as refused:
            await s.adapter.send(Target("slack", CHANNEL), "x")
        await wait_state(s.adapter, "failed")
        health = str(s.adapter.health())
    text = str(read_log(log_file)) + health + str(refused.value) + repr(refused.value)
    for secret in (BOT_TOKEN, APP_TOKEN, "ticket="):
        assert secret not in text
    assert "slack.reconnecting" in text and "slack.failed" in text


async def test_a_message_mentioning_hundreds_of_users_asks_slack_about_a_few() -> None:
    """Each mention's name is a users.info call: one message must not become hundreds
    (Slack rate-limits the method per workspace, for every channel at once)."""
    async with served() as s:
        crowd = [f"U0CROWD{i:03d}" for i in range(300)]
        s.fake.users.update({u: {"id": u, "name": u.lower()} for u in crowd})
        _, post = await s.say("echo " + " ".join(f"<@{u}>" for u in crowd))
        assert post["text"].startswith(f"slack|{CHANNEL}|")
        assert len(s.fake.calls_of("users.info")) <= 60


async def test_starting_again_after_a_failure_leaves_no_session_open() -> None:
    async with FakeSlack() as fake:
        adapter = make_adapter(fake, bot_token="xoxb-not-this-one")
        await adapter.start(_no_handle)
        await wait_state(adapter, "failed")
        first = adapter._session
        fake.bot_token = "xoxb-not-this-one"  # the token put right, the adapter started again
        await adapter.start(_no_handle)
        await wait_state(adapter, "connected")
        await adapter.stop()
    assert first is not None and first.closed


async def _no_handle(message: Message) -> Reply:
    raise AssertionError("no message expected")


def test_a_retry_after_given_as_an_http_date_is_waited_until_that_date() -> None:
    """HTTP lets ``Retry-After`` be a date; it was read as unreadable, and one second
    waited instead (a send tried again long before the time it was given)."""
    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=90), usegmt=True)
    response = SlackResponse(
        client=None, http_verb="POST", api_url="https://slack.com/api/chat.postMessage",
        req_args={}, data={"ok": False, "error": "ratelimited"},
        headers={"Retry-After": soon}, status_code=429,
    )  # fmt: skip
    wait = retry_after(SlackApiError("ratelimited", response))
    assert wait is not None and 80 <= wait <= 90
