"""tmy.testing.serving(): the real lifespan with the loopback adapter (push, pop, sent)."""

from __future__ import annotations

import httpx
import pytest

from tmy.errors import AdapterError
from tmy.message import Target
from tmy.testing import LoopbackAdapter, Sent, serving
from tmy.types import Adapter

RULES = """
variables:
  seen: {scope: user, default: 0}
rules:
  - id: ping
    triggers: [ping]
    steps:
      - {plugin: ADJUST, input: "?= seen + 1", save: seen}
      - {plugin: ADJUST, input: "pong {seen} to {USER}@{PLATFORM}"}
"""

# The loopback adapter may stand in for a real platform (here OneBot, not enabled, so the
# schedule's posts go to the loopback one).
TICK = """
rules:
  - id: tick
    schedule:
      every: 1s
      send_to: [{platform: onebot, chat: "group:1"}]
      input: tick
    steps:
      - {plugin: ADJUST, input: "{QUESTION} for {CHAT}"}
"""


def test_the_loopback_adapter_is_an_adapter() -> None:
    adapter: Adapter = LoopbackAdapter()  # the Protocol, checked by the type checker too
    assert isinstance(adapter, Adapter)  # and at run time (it is runtime_checkable)
    assert adapter.name == "test" and adapter.routes() == []
    assert adapter.health() == {"state": "stopped"}


async def test_push_answers_and_the_state_is_the_stores() -> None:
    async with serving({"r.yaml": RULES}) as daemon:
        assert (await daemon.push("ping", user="ann")).text == "pong 1 to ann@test"
        assert (await daemon.push("ping", user="ann")).text == "pong 2 to ann@test"
        assert await daemon.var("seen", user="ann") == 2
        assert (await daemon.health())["adapters"]["test"] == {"state": "connected"}


async def test_cron_posts_and_sends_arrive_in_sent_and_pop() -> None:
    async with serving({"r.yaml": TICK}, platform="onebot") as daemon:
        post = await daemon.pop(timeout=10)  # the every-1s schedule fires within a second
        assert post == Sent(Target("onebot", "group:1"), "tick for group:1")
        await daemon.send(Target("onebot", "group:2", "bob"), "hello")
        assert Sent(Target("onebot", "group:2", "bob"), "hello") in daemon.sent
        with pytest.raises(AdapterError, match="no running adapter for platform 'nowhere'"):
            await daemon.send(Target("nowhere", "c"), "x")


async def test_the_listener_serves_on_a_free_port() -> None:
    async with (
        serving({"r.yaml": RULES}) as daemon,
        httpx.AsyncClient(base_url=daemon.url, timeout=10) as client,
    ):
        got = await client.post("/v1/messages", json={"text": "ping", "user": "cy"})
        assert got.json()["answer"] == "pong 1 to cy@http"
        health = (await client.get("/healthz")).json()
        assert health["adapters"]["test"]["state"] == "connected"


async def test_pop_times_out_when_nothing_is_sent() -> None:
    async with serving({"r.yaml": "rules: []\n"}, http_enabled=False) as daemon:
        assert daemon.http is None
        with pytest.raises(TimeoutError):
            await daemon.pop(timeout=0.05)
    with pytest.raises(AdapterError, match="not started"):
        await daemon.push("ping")
