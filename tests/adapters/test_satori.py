"""The Satori adapter's connection: IDENTIFY/READY/PING, the accounts, reconnecting with
session recovery, a refused token, deduplication, the daemon serving it, ``send``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import httpx
import pytest

from tests.support.adapters import wait_state
from tests.support.log_helpers import read_log
from tests.support.satori_fake import GROUP, QQ_BOT, TOKEN, FakeSatori, driven, make_adapter
from tmy.adapters.satori import SatoriAdapter, from_settings
from tmy.adapters.satori.connection import EventStream
from tmy.config import Settings, load_settings
from tmy.errors import AdapterError, ConfigError
from tmy.message import Target
from tmy.testing import serving
from tmy.types import Adapter

RULES = """
rules:
  - id: echo
    triggers: ["echo *"]
    steps:
      - {plugin: ADJUST, input: "{PLATFORM}|{CHAT}|{USER}|{QUESTION}"}
"""


async def test_identify_ready_and_pings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SatoriAdapter, "ping_interval", 0.02)
    async with driven(RULES) as d:
        async with asyncio.timeout(10):
            while d.fake.pings < 2:
                await asyncio.sleep(0.01)
        report = d.adapter.health()
    assert d.fake.identifies[0] == {"token": TOKEN, "sn": None, "sequence": None}
    assert report["state"] == "connected" and report["error"] is None
    assert [(x["platform"], x["user_id"], x["status"]) for x in report["logins"]] == [
        ("satori:qq", QQ_BOT, "online"),
        ("satori:discord", "20002", "online"),
    ]
    assert TOKEN not in str(report)


async def test_a_lost_connection_is_resumed_from_the_last_sn() -> None:
    async with driven(RULES) as d:
        await d.fake.message("echo one")
        assert (await d.fake.next_sent())["body"]["content"].endswith("|one")
        last = d.fake.buffer[-1]["sn"]
        await d.fake.drop()
        await d.state("reconnecting")
        await d.fake.message("echo while away")  # buffered by the server, not delivered yet
        await d.fake.wait_identified(2)
        await d.state("connected")
        resumed = await d.fake.next_sent()
    assert d.fake.identifies[1]["sn"] == last
    assert resumed["body"]["content"].endswith("|while away")
    assert [m.text for m in d.seen] == ["echo one", "echo while away"]


async def test_a_duplicate_event_runs_once() -> None:
    async with driven(RULES) as d:
        event = await d.fake.message("echo once", message_id="dup1")
        await d.fake.next_sent()
        await d.fake.push({**event, "sn": event["sn"] + 100})  # the same message again
        await d.fake.nothing_sent()
    assert [m.message_id for m in d.seen] == ["dup1"]


async def test_a_wrong_token_fails_once_and_is_not_retried() -> None:
    async with driven(RULES, token="wrong-token", connected=False) as d:
        report = await d.state("failed")
        await asyncio.sleep(0.3)  # backoff here is 0.02 s: a retry loop would show by now
        assert d.fake.refused == 1
    assert "refused the token" in report["error"] and "SATORI_TOKEN" in report["error"]
    assert "code 4004" in report["error"]
    assert "wrong-token" not in str(report)


async def test_a_refused_upgrade_is_a_failed_token() -> None:
    async with FakeSatori() as fake:
        fake.upgrade_status = 401
        adapter = make_adapter(fake.base)

        async def nothing(message: object) -> None:
            raise AssertionError("no message expected")

        await adapter.start(nothing)  # type: ignore[arg-type]
        try:
            await wait_state(adapter, "failed")
        finally:
            await adapter.stop()
    assert "HTTP 401" in adapter.health()["error"]
    assert fake.refused == 1


async def test_login_added_updates_the_accounts_and_is_answered_through() -> None:
    async with driven(RULES) as d:
        await d.fake.add_login("kook", "30003")
        async with asyncio.timeout(10):
            while len(d.adapter.health()["logins"]) < 3:
                await asyncio.sleep(0.01)
        await d.fake.message("echo hi", platform="kook", channel="k1")
        sent = await d.fake.next_sent()
    assert d.adapter.health()["logins"][2]["platform"] == "satori:kook"
    assert (sent["platform"], sent["user"]) == ("kook", "30003")
    assert sent["body"]["content"].endswith("satori:kook|k1|501|hi")


async def test_an_internal_image_is_downloaded_through_the_proxy_and_quotes_are_fetched() -> None:
    async with driven(RULES) as d:
        d.fake.files["internal:qq/10001/_tmp/a.png"] = b"\x89PNG-bytes"
        await d.fake.message("echo the answer", message_id="old1")
        await d.fake.next_sent()
        await d.fake.message(
            '<quote id="old1"/>echo look <img src="internal:qq/10001/_tmp/a.png"/>'
        )
        await d.fake.next_sent()
        message = d.seen[-1]
        assert message.api is not None
        url, headers = await message.api.media_source(message.attachments[0])
        async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as got:
            data = await got.read()
        quoted = await message.api.quoted(message)
    assert url == f"{d.fake.base}/v1/proxy/internal:qq/10001/_tmp/a.png"
    assert headers == {"Authorization": f"Bearer {TOKEN}"} and data == b"\x89PNG-bytes"
    assert message.api.trusted_media_hosts == ("127.0.0.1",)  # type: ignore[attr-defined]
    assert quoted == {"text": "echo the answer", "user": "501", "id": "old1"}


async def test_send_refuses_what_it_cannot_reach() -> None:
    async with driven(RULES) as d:
        with pytest.raises(AdapterError, match="no account on 'telegram'"):
            await d.adapter.send(Target("satori:telegram", "1"), "x")
        with pytest.raises(AdapterError, match="satori:<platform>"):
            await d.adapter.send(Target("satori", "1"), "x")
        with pytest.raises(AdapterError, match="empty"):
            await d.adapter.send(Target("satori:qq", "1"), "  ")
        d.fake.fail["message.create"] = [(403, {}, "login not found")]
        with pytest.raises(AdapterError, match=r"HTTP 403: login not found"):
            await d.adapter.send(Target("satori:qq", GROUP), "x")
    with pytest.raises(AdapterError, match="not connected"):
        await SatoriAdapter().send(Target("satori:qq", "1"), "x")


def test_from_settings_reads_the_token_from_the_key_or_the_environment() -> None:
    assert from_settings(Settings(http_enabled=False), None) is None
    settings = load_settings(env={}, adapters={"satori": {"enabled": True}})
    adapter = from_settings(settings, None, env={"SATORI_TOKEN": " from-env "})
    assert adapter is not None and adapter.token == "from-env"
    given = load_settings(env={}, adapters={"satori": {"enabled": True, "token": "given"}})
    adapter = from_settings(given, None, env={"SATORI_TOKEN": "from-env"})
    assert adapter is not None and adapter.token == "given"
    assert adapter.routes() == [] and adapter.health()["state"] == "starting"
    assert isinstance(adapter, Adapter)  # the contract every platform's adapter keeps


def test_send_interval_is_checked_and_paces_each_channel() -> None:
    on = {"enabled": True, "send_interval": 2}
    adapter = from_settings(load_settings(env={}, adapters={"satori": on}), None, env={})
    assert adapter is not None and adapter.send_interval == 2.0
    assert adapter._outbound.interval == 2.0  # the reply queue paces each channel
    for bad in (-1, 61, "fast", True):
        with pytest.raises(ConfigError, match="send_interval"):
            load_settings(env={}, adapters={"satori": {"enabled": True, "send_interval": bad}})


def _settings(tmp_path: Path, base: str, **satori: object) -> Settings:
    rules = tmp_path / "rules"
    rules.mkdir(exist_ok=True)
    (rules / "r.yaml").write_text(RULES)
    return load_settings(
        env={},
        rules=str(rules),
        plugins=str(tmp_path / "none"),
        store=f"sqlite:///{tmp_path / 'tmy.db'}",
        http_listen="127.0.0.1:0",
        console=False,
        adapters={"satori": {"enabled": True, "api_base": base, **satori}},
    )


async def test_the_daemon_serves_satori_and_sends_to_a_platform_behind_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SATORI_TOKEN", TOKEN)
    async with FakeSatori() as fake, serving(settings=_settings(tmp_path, fake.base)) as daemon:
        async with asyncio.timeout(10):
            while (await daemon.health())["adapters"]["satori"]["state"] != "connected":
                await asyncio.sleep(0.01)
        await fake.message("echo via daemon")
        assert (await fake.next_sent())["body"]["content"].endswith("|via daemon")
        await daemon.send(Target("satori:discord", "c9"), "from the daemon")
        sent = await fake.next_sent()
    assert (sent["platform"], sent["body"]["channel_id"]) == ("discord", "c9")


async def test_a_wrong_token_shows_failed_in_healthz_while_the_daemon_serves(
    tmp_path: Path,
) -> None:
    async with FakeSatori() as fake:
        settings = _settings(tmp_path, fake.base, token="not-the-token")
        async with (
            serving(settings=settings) as daemon,
            httpx.AsyncClient(base_url=daemon.url) as client,
        ):
            async with asyncio.timeout(10):
                while True:
                    report = (await client.get("/healthz")).json()
                    if report["adapters"]["satori"]["state"] == "failed":
                        break
                    await asyncio.sleep(0.02)
            answer = (await client.post("/v1/messages", json={"text": "echo still"})).json()
    assert "refused the token" in report["adapters"]["satori"]["error"]
    assert report["status"] == "degraded"
    assert "not-the-token" not in str(report)
    assert answer["answer"].endswith("|still")


async def test_start_twice_keeps_one_connection_and_stop_twice_is_harmless() -> None:
    """A second start() opened a second session and connection (the first one leaked)."""
    async with driven(RULES) as d:
        session = d.adapter._session
        await d.adapter.start(d.handle)
        await d.fake.message("echo once")
        await d.fake.next_sent()
        await d.fake.nothing_sent()
        assert d.adapter._session is session
        assert len(d.fake.identifies) == 1 and len(d.seen) == 1
        await d.adapter.stop()
        assert session is not None and session.closed
    await d.adapter.stop()  # driven stops it once more
    assert d.adapter.health()["state"] == "stopped"
    never = make_adapter("http://127.0.0.1:9/satori")
    await never.stop()  # stop before start
    assert never.health()["state"] == "stopped"


async def test_an_event_too_large_to_read_is_skipped_not_replayed_forever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A frame over the size limit closed the connection; resuming from the last sn
    replayed it and closed again, forever, and no later event was ever delivered."""
    monkeypatch.setattr(EventStream, "max_frame", 64 * 1024)
    async with driven(RULES) as d:
        await d.fake.message("echo first")
        await d.fake.next_sent()
        await d.fake.message("echo big " + "x" * 100_000)  # over 64 KB: unreadable
        await d.fake.message("echo after")
        after = await d.fake.next_sent()
        await d.fake.nothing_sent()
    assert after["body"]["content"].endswith("|after")
    assert [i["sn"] for i in d.fake.identifies] == [None, 2]  # resumed past the big one (sn 2)
    assert [m.text for m in d.seen] == ["echo first", "echo after"]


async def test_frames_that_are_no_signal_are_skipped_on_the_same_connection() -> None:
    """JSON nested too deep raised RecursionError out of the reader: the connection was
    dropped, and the resume from the last sn could meet the same frame again."""
    async with driven(RULES) as d:
        for frame in ("[" * 100_000 + "]" * 100_000, "not json", "[1]", '{"op": 0, "body": 5}',
                      '{"op": 0, "body": {"type": "message-created"}}', '{"op": 99}'):  # fmt: skip
            await d.fake.push_raw(frame)
        await d.fake.message("echo still here")
        sent = await d.fake.next_sent()
    assert sent["body"]["content"].endswith("|still here")
    assert len(d.fake.identifies) == 1  # never reconnected


async def test_a_server_that_closes_after_ready_is_retried_with_growing_pauses(
    log_file: Path,
) -> None:
    """Every READY reset the backoff, so a server that answered READY and closed at once
    was reconnected to every second, forever."""
    async with FakeSatori() as fake:
        fake.close_after_ready = True
        adapter = make_adapter(fake.base)
        adapter.backoff_base, adapter.backoff_cap = 0.001, 0.002

        async def nothing(message: object) -> None:
            raise AssertionError("no message expected")

        await adapter.start(nothing)  # type: ignore[arg-type]
        try:
            await fake.wait_identified(6)
        finally:
            await adapter.stop()
    attempts = [e["attempt"] for e in read_log(log_file) if e["event"] == "satori.reconnecting"]
    assert attempts[:5] == [1, 2, 3, 4, 5]  # the pauses keep growing (to backoff_cap)


async def test_a_refusal_that_is_not_about_the_token_does_not_blame_the_token() -> None:
    """LLOneBot closes 1008 "invalid address" on a wrong path: ``failed`` said "refused
    the token" and sent the operator after the wrong setting."""
    async with driven(RULES, connected=False) as d:
        d.fake.close_on_identify = (1008, b"invalid address")
        report = await d.state("failed")
    assert "refused the connection" in report["error"] and "api_base" in report["error"]
    assert "code 1008: invalid address" in report["error"]
    assert "refused the token" not in report["error"]
    assert d.fake.refused == 1


async def test_a_server_that_never_answers_the_upgrade_is_given_up_and_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The upgrade had only aiohttp's 5-minute session timeout: a server that took the
    TCP connection and said nothing kept the adapter in ``starting`` for 5 minutes."""
    monkeypatch.setattr(EventStream, "identify_timeout", 0.2)
    accepted: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # read nothing, answer nothing

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    adapter = make_adapter(f"http://127.0.0.1:{port}/satori")

    async def nothing(message: object) -> None:
        raise AssertionError("no message expected")

    await adapter.start(nothing)  # type: ignore[arg-type]
    try:
        async with asyncio.timeout(5):
            while len(accepted) < 2:  # given up, and tried again
                await asyncio.sleep(0.01)
        report = adapter.health()
    finally:
        await adapter.stop()
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()
    assert report["state"] == "reconnecting"
    assert "no answer to the upgrade" in report["error"]
