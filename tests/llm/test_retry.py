"""Retries and fallback against a real chat-completions server on loopback.

Which statuses are retried (and ``x-should-retry``), the openai-SDK backoff with
jitter, ``Retry-After`` / ``retry-after-ms`` honoured up to ``retry_after_cap``,
fallback models in order, an unreachable endpoint, and a retry wait that would
pass the step deadline. Waits are read from ``extra.llm.calls[].waited_s`` (what
tmy slept), never measured by the clock.
"""

from __future__ import annotations

import email.utils
import socket
import time

import httpx
import pytest

from tests.support.llm_fake_provider import FakeProvider, Fault, Reply
from tests.support.llm_helpers import RULES, llm, llm_stats
from tmy.config.llm import load_config
from tmy.llm.retry import retry_after_seconds, retry_delay
from tmy.testing import Bot


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504])
async def test_retryable_statuses_are_retried(provider: FakeProvider, status: int) -> None:
    provider.script("main-model", [Fault.http(status, "try again"), Reply("second time lucky")])
    async with Bot({"r.yaml": RULES}, llm=llm(provider)) as bot:
        assert await bot.say("ask hi") == "second time lucky"
    assert len(provider.seen()) == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_other_client_errors_are_not_retried(provider: FakeProvider, status: int) -> None:
    provider.script("main-model", [Fault.http(status, "no")])
    async with Bot({"r.yaml": RULES}, llm=llm(provider)) as bot:
        reply = await bot.ask("ask hi")
        assert reply.error.startswith(
            f"main (main-model at {provider.base_url}) answered HTTP {status}: no"
        )
    assert len(provider.seen()) == 1


@pytest.mark.parametrize(("status", "should", "seen"), [(500, "false", 1), (400, "true", 2)])
async def test_x_should_retry_overrides_the_status(
    provider: FakeProvider, status: int, should: str, seen: int
) -> None:
    provider.script("main-model", [Fault.http(status, "hm", x_should_retry=should), Reply("ok")])
    async with Bot({"r.yaml": RULES}, llm=llm(provider)) as bot:
        reply = await bot.ask("ask hi")
        assert (reply.error is None) == (seen == 2)
    assert len(provider.seen()) == seen


async def test_fallback_models_are_tried_in_order(provider: FakeProvider) -> None:
    config = llm(provider, retries=1, fallback=["second", "third"])
    config["models"]["second"] = {"base_url": provider.base_url, "model": "second-model"}
    config["models"]["third"] = {"base_url": provider.base_url, "model": "third-model"}
    provider.script("main-model", [Fault.http(500, "down")] * 2)
    provider.script("second-model", [Fault.http(401, "bad key")])  # not retried: next model
    provider.script("third-model", [Reply("third time")])
    async with Bot({"r.yaml": RULES}, llm=config) as bot:
        reply = await bot.ask("ask hi")
        assert reply.text == "third time"
        call = llm_stats(reply)["calls"][0]
        assert call["model"] == "third" and call["requests"] == 4
        assert [f.split(":")[0] for f in call["failed_models"]] == ["main", "second"]
    assert [b["model"] for b in provider.seen()] == [
        "main-model",
        "main-model",
        "second-model",
        "third-model",
    ]


async def test_unreachable_endpoint_is_retried_then_falls_back(provider: FakeProvider) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    config = llm(provider, base_url=dead, fallback=["backup"])
    async with Bot({"r.yaml": RULES}, llm=config) as bot:
        reply = await bot.ask("ask hi")
        assert reply.error is None and reply.text == "echo: hi"
        call = llm_stats(reply)["calls"][0]
        assert call["model"] == "backup" and call["requests"] == 4  # 3 refused + 1
        assert f"cannot reach {dead}/chat/completions: ConnectError" in call["failed_models"][0]
        assert len(call["waited_s"]) == 2
    assert [b["model"] for b in provider.seen()] == ["backup-model"]
    async with Bot({"r.yaml": RULES}, llm=llm(provider, base_url=dead, retries=0)) as bot:
        reply = await bot.ask("ask hi")
        assert reply.error.startswith(f"cannot reach {dead}/chat/completions: ConnectError")
        assert reply.text.startswith("LLM trouble: cannot reach")


async def test_a_retry_after_past_the_deadline_goes_to_the_fallback(
    provider: FakeProvider,
) -> None:
    rules = RULES.replace('system: "Answer briefly."', "deadline: 2")
    config = {**llm(provider, fallback=["backup"]), "retry_after_cap": 60}
    provider.script("main-model", [Fault.http(429, "busy", retry_after="30")])
    provider.script("backup-model", [Reply("backup, at once")])
    async with Bot({"r.yaml": rules}, llm=config) as bot:
        reply = await bot.ask("ask hi")
        assert reply.text == "backup, at once"
        failed = llm_stats(reply)["calls"][0]["failed_models"][0]
        assert "no time left to retry before the step deadline" in failed
    assert [b["model"] for b in provider.seen()] == ["main-model", "backup-model"]


def test_retry_policy_defaults_match_the_openai_sdk() -> None:
    config = load_config({}, env={})
    assert config.retries == 2
    for n, base in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 8.0), (9, 8.0)]:
        waits = {retry_delay(config, n, None) for _ in range(50)}
        assert all(0.75 * base <= w <= base for w in waits), (n, waits)  # jitter in (0.75, 1]
        assert len(waits) > 1  # jittered, not lockstep
    assert retry_delay(config, 0, 3.0) == 3.0  # the server's Retry-After wins
    assert retry_delay(config, 0, 0.0) == 0.0
    assert retry_delay(config, 0, 500.0) == 20.0  # ... up to retry_after_cap
    capped = load_config({"retry_after_cap": 2, "backoff_cap": 1}, env={})
    assert retry_delay(capped, 0, 5.0) == 2.0 and retry_delay(capped, 6, None) <= 1.0


def test_retry_after_headers() -> None:
    assert retry_after_seconds(httpx.Headers({"retry-after-ms": "1500"})) == 1.5
    assert retry_after_seconds(httpx.Headers({"retry-after": "2"})) == 2.0
    both = httpx.Headers({"retry-after": "9", "retry-after-ms": "250"})
    assert retry_after_seconds(both) == 0.25  # the precise one wins
    later = email.utils.formatdate(time.time() + 3600, usegmt=True)
    assert 3000 < retry_after_seconds(httpx.Headers({"retry-after": later})) <= 3600
    assert retry_after_seconds(httpx.Headers({"retry-after": "soon"})) is None
    assert retry_after_seconds(httpx.Headers({})) is None
