"""The daemon around the adapters: one failing platform, send(target), /healthz, mention."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tmy.config import load_settings
from tmy.daemon import unprotected_listen
from tmy.errors import AdapterError, ConfigError
from tmy.message import Target
from tmy.testing import Bot, Daemon, LoopbackAdapter, Sent, serving

RULES = """
rules:
  - id: ping
    triggers: [ping]
    steps:
      - {plugin: ADJUST, input: pong}
  - id: addressed
    triggers: ["hey *"]
    mention: true
    steps:
      - {plugin: ADJUST, input: "you said {QUESTION}"}
"""


class BrokenPlatform:
    """A platform whose login is refused, as a bad token would be."""

    name = "broken"

    async def start(self, handle: Any) -> None:
        raise AdapterError("broken: login refused (401 Unauthorized)")

    async def stop(self) -> None:  # pragma: no cover - never started
        raise AssertionError("a platform that did not start is not stopped")

    async def send(self, target: Target, text: str) -> None:  # pragma: no cover
        raise AssertionError("unreachable")

    def health(self) -> dict[str, Any]:  # pragma: no cover
        return {"state": "failed"}

    def routes(self) -> list[Any]:
        return []


@pytest.fixture
async def running(
    tmp_path: Path,
) -> AsyncIterator[tuple[Daemon, httpx.AsyncClient, LoopbackAdapter]]:
    """The daemon with a platform whose login is refused and one that records sends."""
    memo = LoopbackAdapter("memo")
    store = f"sqlite:///{tmp_path / 'tmy.db'}"
    adapters = (BrokenPlatform(), memo)
    async with (
        serving({"r.yaml": RULES}, store=store, adapters=adapters) as daemon,
        httpx.AsyncClient(base_url=daemon.url, timeout=10) as client,
    ):
        yield daemon, client, memo


async def test_a_platform_failing_to_start_leaves_the_others_serving(running) -> None:
    _, client, _ = running
    response = await client.post("/v1/messages", json={"text": "ping"})
    assert response.json()["answer"] == "pong"
    health = await client.get("/healthz")
    assert health.status_code == 200
    report = health.json()
    assert report["status"] == "degraded"
    assert report["store"]["state"] == "ok"
    assert report["adapters"]["broken"] == {
        "state": "failed",
        "error": "broken: login refused (401 Unauthorized)",
    }
    assert report["adapters"]["memo"]["state"] == "connected"
    assert report["adapters"]["http"]["state"] == "connected"


async def test_send_goes_through_the_platform_adapter(running) -> None:
    daemon, _, memo = running
    await daemon.send(Target("memo", "group:1", "ann"), "hello")
    assert memo.sent == [Sent(Target("memo", "group:1", "ann"), "hello")]
    with pytest.raises(AdapterError, match="failed to start: broken: login refused"):
        await daemon.send(Target("broken", "c"), "x")
    with pytest.raises(AdapterError, match="no running adapter for platform 'nowhere'"):
        await daemon.send(Target("nowhere", "c"), "x")
    with pytest.raises(AdapterError, match="cannot send on its own"):
        await daemon.send(Target("http", "c"), "x")


async def test_a_platform_behind_a_bridge_is_sent_through_the_bridge(tmp_path: Path) -> None:
    """``satori:qq`` (PLATFORM of a message that came through Satori) posts through the
    adapter named ``satori``; a rule's ``platforms: [satori]`` answers every satori:*."""
    bridge = LoopbackAdapter("satori")
    rules = (
        RULES
        + """
  - id: bridged
    triggers: [where]
    platforms: [satori]
    steps:
      - {plugin: ADJUST, input: "{PLATFORM}"}
"""
    )
    async with serving({"r.yaml": rules}, adapters=(bridge,)) as daemon:
        await daemon.send(Target("satori:qq", "123"), "hello")
        assert bridge.sent == [Sent(Target("satori:qq", "123"), "hello")]
        with pytest.raises(AdapterError, match="no running adapter for platform 'slack'"):
            await daemon.send(Target("slack", "C1"), "x")
    async with Bot({"r.yaml": rules}) as bot:
        assert (await bot.ask("where", platform="satori:kook")).text == "satori:kook"
        assert (await bot.ask("where", platform="satorix")).rule is None


async def test_healthz_reports_a_dead_store(redis_server, tmp_path: Path) -> None:
    server = redis_server()
    async with (
        serving({"r.yaml": RULES}, store=server.url) as daemon,
        httpx.AsyncClient(base_url=daemon.url, timeout=20) as client,
    ):
        ok = await client.get("/healthz")
        assert ok.status_code == 200 and ok.json()["store"]["state"] == "ok"
        server.stop(kill=True)
        down = await client.get("/healthz")
        assert down.status_code == 503
        assert down.json()["status"] == "error"
        assert down.json()["store"]["state"] == "error"
        assert down.json()["store"]["error"]


async def test_mention_true_answers_in_groups_only_when_addressed() -> None:
    async with Bot({"r.yaml": RULES}) as bot:
        assert (await bot.ask("hey there", chat="group:1")).rule is None
        addressed = await bot.ask("hey there", chat="group:1", mentions_bot=True)
        assert addressed.text == "you said there"
        assert (await bot.ask("hey there")).rule == "addressed"  # private: always addressed
        assert (await bot.ask("ping", chat="group:1")).text == "pong"  # no mention needed


def test_platform_config_is_validated_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "tmy.yaml"
    config.write_text("adapters:\n  onebot:\n    enabled: true\n    mode: sideways\n")
    with pytest.raises(
        ConfigError, match=r"'adapters\.onebot\.mode' must be one of reverse, forward"
    ):
        load_settings(config, env={})
    config.write_text("adapters:\n  onebot:\n    acess_token: x\n")
    with pytest.raises(ConfigError, match=r"unknown key 'adapters\.onebot\.acess_token'"):
        load_settings(config, env={})
    config.write_text("adapters:\n  discord:\n    shards: 0\n")
    with pytest.raises(ConfigError, match=r"'adapters\.discord\.shards' must be a number >= 1"):
        load_settings(config, env={})
    config.write_text("adapters:\n  onebot:\n    send_interval: -1\n")
    with pytest.raises(ConfigError, match=r"'adapters\.onebot\.send_interval' must be >= 0"):
        load_settings(config, env={})
    config.write_text("adapters:\n  onebot: {enabled: true, access_token: from-file}\n")
    settings = load_settings(
        config, env={"TMY_ONEBOT_TOKEN": "from-env", "TMY_HTTP_API_KEYS": "a, b,"}
    )
    assert settings.adapters["onebot"]["access_token"] == "from-env"
    assert settings.http_api_keys == ("a", "b")


@pytest.mark.parametrize(
    ("listen", "keys", "exposed"),
    [
        ("127.0.0.1:8080", "", False),
        ("localhost:8080", "", False),
        ("[::1]:8080", "", False),
        ("0.0.0.0:8080", "", True),
        (":8080", "", False),  # tmy reads ":PORT" as 127.0.0.1
        ("bot.example.org:8080", "", True),
        ("0.0.0.0:8080", "sk-a", False),
    ],
)
def test_a_listener_off_loopback_without_api_keys_is_named(
    tmp_path: Path, listen: str, keys: str, exposed: bool
) -> None:
    """serve logs http.unprotected for it (the Docker image listens on 0.0.0.0)."""
    config = tmp_path / "tmy.yaml"
    config.write_text("timezone: UTC\n")
    settings = load_settings(config, env={"TMY_HTTP": listen, "TMY_HTTP_API_KEYS": keys})
    assert (unprotected_listen(settings) is not None) is exposed
