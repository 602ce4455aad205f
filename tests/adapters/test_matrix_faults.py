"""Matrix: faults found in review, each shown against the fake homeserver on loopback
(each test failed before its fix): rate limits and refused sessions, invites (a join
refused for now, a slow join, DMs opened by users), a just-joined room's history,
event sizes with pills, mentions by display name, streaming, a second start().
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import aiohttp
import pytest
from aiohttp import web
from mautrix.api import Method
from mautrix.api import Path as ApiPath
from mautrix.errors import MatrixRequestError

from tests.adapters.test_matrix import make_adapter, served
from tests.support.adapters import wait_state
from tests.support.matrix_fake import FakeHomeserver
from tests.support.matrix_fake_rooms import ANN, BOB, BOT, PASSWORD
from tmy.adapters.matrix import Credentials
from tmy.adapters.matrix.http import MatrixHttp, retry_after
from tmy.message import Message, Reply, Target
from tmy.testing import Bot


async def test_a_huge_retry_after_on_sync_is_capped() -> None:
    async with FakeHomeserver() as fake:
        room = fake.room("dm", ANN)
        async with served(fake) as s:
            s.adapter.retry_after_cap = 0.05
            fake.retry_after_ms = 10**12  # some 30 years
            fake.sync_faults = ["429"]
            await wait_state(s.adapter, "reconnecting")
            await wait_state(s.adapter, "connected", timeout=5)
            await fake.message(room, ANN, "echo back")
            sent = await fake.next_sent()
    assert sent["content"]["body"].endswith("|back")


async def test_a_relogin_refused_again_at_once_fails_instead_of_looping() -> None:
    given = Credentials(user_id=BOT, access_token="", password=PASSWORD)
    async with FakeHomeserver() as fake:
        fake.room("dm", ANN)
        async with Bot({}) as bot:
            adapter = make_adapter(fake, given, store=bot.app.store)
            await adapter.start(bot.engine.handle)
            await wait_state(adapter, "connected")
            fake.sync_faults = ["401"] * 6  # every fresh session is logged out at once
            await wait_state(adapter, "failed", timeout=5)
            await adapter.stop()
    assert len(fake.logins) == 2  # the first login, and one more: no loop of logins
    assert "M_UNKNOWN_TOKEN" in adapter.health()["error"]
    assert "again right after a new password login" in adapter.health()["error"]


async def test_an_invite_whose_join_is_rate_limited_is_joined_later() -> None:
    async with FakeHomeserver() as fake:
        room = fake.room("new", ANN, bot=False)
        fake.join_limits, fake.retry_after_ms = 2, 20
        async with served(fake):
            await fake.invite(room, ANN)
            async with asyncio.timeout(5):
                while fake.rooms[room].members[BOT]["membership"] != "join":
                    await asyncio.sleep(0.01)
    assert fake.count("POST", "/join") == 3


async def test_a_pill_over_a_reply_of_quotes_stays_under_the_event_size_limit() -> None:
    async with FakeHomeserver() as fake:
        room = fake.room("dm", ANN)
        async with served(fake):
            await fake.message(room, ANN, "quotes")  # '"' is &quot; in HTML, \" in JSON
            pieces = []
            while sum(p["content"]["body"].count('"') for p in pieces) < 20000:
                pieces.append(await fake.next_sent(timeout=5))
            await fake.nothing_sent()
    first = pieces[0]["content"]
    assert first["m.mentions"] == {"user_ids": [ANN]} and first["body"].startswith("Ann ")
    assert "".join(p["content"]["body"] for p in pieces) == "Ann " + '"' * 20000


async def test_a_display_name_in_the_middle_of_a_message_is_not_a_mention() -> None:
    async with FakeHomeserver() as fake:
        fake.names[BOT] = "Help"  # a bot whose display name is a common word
        room = fake.room("group", ANN)
        async with served(fake) as s:
            await fake.message(room, ANN, "echo Help me", **{"m.mentions": {}})
            echoed = await fake.next_sent()
            await fake.message(room, ANN, "Help: ping")  # addressed by name: a mention
            addressed = await fake.next_sent()
            pill = f'echo <a href="https://matrix.to/#/{BOT}">Help</a> hi'  # Element's pill
            mentions = {"m.mentions": {"user_ids": [BOT]}}
            html = {"format": "org.matrix.custom.html", "formatted_body": pill}
            await fake.message(room, ANN, "echo Help hi", **html, **mentions)
            pilled = await fake.next_sent()
    assert echoed["content"]["body"].endswith("|Help me")
    assert [m.mentions_bot for m in s.seen] == [False, True, True]
    assert addressed["content"]["body"] == "pong" and s.seen[1].text == "ping"
    assert s.seen[2].text == "echo hi" and pilled["content"]["body"].endswith("|hi")


async def test_a_second_start_does_not_run_a_second_sync_loop() -> None:
    async def quiet(message: Message) -> Reply:
        return Reply("", rule="none", trace_id="t")

    async with FakeHomeserver() as fake:
        adapter = make_adapter(fake)
        await adapter.start(quiet)
        await adapter.start(quiet)
        await wait_state(adapter, "connected")
        await asyncio.sleep(0.3)
        await adapter.stop()
    assert fake.most_syncing == 1


async def test_a_room_just_joined_does_not_answer_its_history() -> None:
    async with FakeHomeserver() as fake:
        room = fake.room("busy", ANN, bot=False)
        await fake.message(room, ANN, "echo said before the bot came")
        async with served(fake):
            await fake.invite(room, ANN)
            async with asyncio.timeout(5):
                while fake.rooms[room].members[BOT]["membership"] != "join":
                    await asyncio.sleep(0.01)
            await fake.message(room, ANN, "echo after")
            first = await fake.next_sent()
            await fake.nothing_sent()
    assert first["content"]["body"].endswith("|after")


async def test_a_dm_a_user_opened_is_where_send_to_that_user_goes() -> None:
    async with FakeHomeserver() as fake:
        dm = fake.room("opened-by-ann", ANN, bot=False)
        async with served(fake) as s:
            await fake.invite(dm, ANN, direct=True)  # Element's "Start chat" with the bot
            async with asyncio.timeout(5):
                while not fake.direct:
                    await asyncio.sleep(0.01)
            await s.adapter.send(Target("matrix", "", ANN), "a reminder")
            sent = await fake.next_sent()
    assert (sent["room"], sent["content"]["body"]) == (dm, "a reminder")
    assert fake.direct == {ANN: [dm]}  # kept in the account's m.direct, for the next start


async def test_a_streamed_long_reply_starting_with_a_newline_loses_nothing() -> None:
    answer = "\n" + ("word " * 3000).strip()  # a model's answer may begin with a line break

    async def streaming(message: Message) -> Reply:
        assert message.stream is not None
        await message.stream.delta(answer[:100])
        return Reply(answer, rule="stream", trace_id="t")

    async with FakeHomeserver() as fake:
        room = fake.room("dm", ANN)
        adapter = make_adapter(fake)
        adapter.stream_interval = 0.0
        await adapter.start(streaming)
        await wait_state(adapter, "connected")
        await fake.message(room, ANN, "tell me a lot")
        posted, edited, rest = [await fake.next_sent(timeout=5) for _ in range(3)]
        await adapter.stop()
    assert edited["content"]["m.relates_to"]["event_id"] == posted["id"]
    shown = edited["content"]["m.new_content"]["body"]
    assert f"{shown} {rest['content']['body']}" == answer.strip()


async def test_a_slow_join_does_not_stop_the_bot_answering_elsewhere() -> None:
    async with FakeHomeserver() as fake:
        room = fake.room("dm", ANN)
        far = fake.room("far-away", BOB, bot=False)
        fake.join_gate = asyncio.Event()  # joining that room takes (here: until released)
        async with served(fake):
            await fake.invite(far, BOB)
            async with asyncio.timeout(5):
                while not fake.count("POST", "/join"):
                    await asyncio.sleep(0.01)
            await fake.message(room, ANN, "echo meanwhile")
            sent = await fake.next_sent(timeout=3)
            fake.join_gate.set()
            async with asyncio.timeout(5):
                while fake.rooms[far].members[BOT]["membership"] != "join":
                    await asyncio.sleep(0.01)
    assert sent["content"]["body"].endswith("|meanwhile")


async def test_two_dms_opened_at_once_are_both_kept_in_m_direct() -> None:
    async with FakeHomeserver() as fake:
        one, two = fake.room("from-ann", ANN, bot=False), fake.room("from-bob", BOB, bot=False)
        async with served(fake):
            await fake.invite(one, ANN, direct=True)
            await fake.invite(two, BOB, direct=True)  # the same sync: joined side by side
            async with asyncio.timeout(5):
                while len(fake.direct) < 2:
                    await asyncio.sleep(0.01)
    assert fake.direct == {ANN: [one], BOB: [two]}


async def test_a_retry_after_header_given_as_an_http_date_is_waited_until_that_date() -> None:
    """A 429 without ``retry_after_ms`` (a proxy in front of the homeserver, say) may say
    ``Retry-After`` as an HTTP date; that was read as unreadable and 5 s waited instead."""
    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=90), usegmt=True)

    async def limited(request: web.Request) -> web.Response:
        return web.json_response({"errcode": "M_UNKNOWN", "error": "slow down"}, status=429,
                                 headers={"Retry-After": soon})  # fmt: skip

    app = web.Application()
    app.router.add_route("*", "/{path:.*}", limited)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with aiohttp.ClientSession() as session:
            api = MatrixHttp(f"http://127.0.0.1:{port}", client_session=session)
            with pytest.raises(MatrixRequestError) as refused:
                await api.request(Method.GET, ApiPath.v3.account.whoami, retry_count=0)
    finally:
        await runner.cleanup()
    wait = retry_after(refused.value)
    assert wait is not None and 80 <= wait <= 90
