"""The LLM transport against a real chat-completions server on loopback.

Non-streaming and SSE answers, cached-token usage in both providers' shapes,
and the faults: 429 with Retry-After, 500 then success, a slow answer past the
timeout, a non-JSON body, a stream cut mid-way, fallback models — each with the
number of requests the server saw; odd bodies, the step deadline, API keys from
the environment, and 100 concurrent conversations. Backoff is shrunk
(``backoff_base``, ``retry_after_cap``) so the retries cost milliseconds; nothing
asserts time. The retry policy in detail is in test_llm_retry.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

import tmy.llm
from tests.support.llm_fake_provider import FakeProvider, Fault, Reply
from tests.support.llm_helpers import RULES, llm, llm_stats
from tests.support.steps import one_rule, run_steps
from tests.support.upstream import Upstream
from tmy import logs
from tmy.llm.usage import keys, today
from tmy.message import Message
from tmy.testing import Bot, serving


async def test_non_streaming_answer_and_openai_cached_tokens(provider: FakeProvider) -> None:
    provider.script(
        "main-model", [Reply("Paris.", prompt_tokens=120, completion_tokens=3, cached_tokens=96)]
    )
    async with Bot({"r.yaml": RULES}, llm=llm(provider)) as bot:
        reply = await bot.ask("ask capital of France?")
        assert reply.error is None and reply.text == "Paris."
        stats = llm_stats(reply)
        assert stats["model"] == "main"
        assert (stats["prompt_tokens"], stats["completion_tokens"], stats["cached_tokens"]) == (
            120,
            3,
            96,
        )
        assert stats["calls"][0]["requests"] == 1 and stats["retries"] == 0
        body = provider.seen()[0]
        assert body["model"] == "main-model" and "stream" not in body
        assert body["messages"][-1]["content"].endswith("capital of France?")
        message = Message("", user="tester", platform="test")
        counters = keys(today(bot.engine.tz), message)
        store = bot.engine.services.store
        await tmy.llm.runtime_of(bot.engine.services).tally.flush()  # counted in memory first
        for scope in ("user", "chat", "all"):  # per user, per chat, everyone; for today
            counted = await store.get(counters[scope])
            assert (counted["prompt"], counted["completion"], counted["cached"]) == (120, 3, 96)
            assert counted["calls"] == 1 and counted["models"] == {"main": 123}
            assert counted["latency_ms"] == stats["calls"][0]["latency_ms"] > 0
        assert counters["user"].endswith("/user/test/tester")


async def test_sse_stream_with_usage_chunk_and_deepseek_cache_field(provider: FakeProvider) -> None:
    provider.script(
        "main-model",
        [
            Reply(
                "A streamed answer, in pieces.",
                prompt_tokens=50,
                cached_tokens=32,
                cache_style="deepseek",
            )
        ],
    )
    async with Bot({"r.yaml": RULES}, llm=llm(provider, stream=True)) as bot:
        reply = await bot.ask("ask stream please")
        assert reply.error is None and reply.text == "A streamed answer, in pieces."
        assert llm_stats(reply)["cached_tokens"] == 32
        body = provider.seen()[0]
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


async def test_429_with_retry_after_is_retried(provider: FakeProvider) -> None:
    provider.script("main-model", [Fault.http(429, "slow down", retry_after="1"), Reply("fine")])
    async with Bot({"r.yaml": RULES}, llm=llm(provider)) as bot:
        reply = await bot.ask("ask hi")
        assert reply.text == "fine"
        assert len(provider.seen("main-model")) == 2
        assert llm_stats(reply)["retries"] == 1
        # Retry-After: 1 was honoured, up to retry_after_cap (0.02 s here)
        assert llm_stats(reply)["calls"][0]["waited_s"] == [0.02]


async def test_429_retry_after_ms_then_exhausted_falls_back(provider: FakeProvider) -> None:
    provider.script("main-model", [Fault.http(429, "quota", retry_after_ms="5")] * 3)
    provider.script("backup-model", [Reply("from the backup")])
    async with Bot({"r.yaml": RULES}, llm=llm(provider, fallback=["backup"])) as bot:
        reply = await bot.ask("ask hi")
        assert reply.text == "from the backup"
        assert len(provider.seen("main-model")) == 3  # 1 + 2 retries
        assert len(provider.seen("backup-model")) == 1
        call = llm_stats(reply)["calls"][0]
        assert call["model"] == "backup" and call["requests"] == 4
        assert "HTTP 429: quota" in call["failed_models"][0]
        assert "(gave up after 3 attempts)" in call["failed_models"][0]
        assert call["waited_s"] == [0.005, 0.005]  # retry-after-ms: 5, before each retry


async def test_500_then_success(provider: FakeProvider) -> None:
    provider.script("main-model", [Fault.http(500, "internal"), Reply("recovered")])
    async with Bot({"r.yaml": RULES}, llm=llm(provider)) as bot:
        reply = await bot.ask("ask hi")
        assert reply.error is None and reply.text == "recovered"
        assert len(provider.seen("main-model")) == 2
        (waited,) = llm_stats(reply)["calls"][0]["waited_s"]  # no Retry-After: backoff
        assert 0.00075 <= waited <= 0.001  # backoff_base 0.001 · 2⁰, jitter in (0.75, 1]


async def test_every_model_failing_names_each(provider: FakeProvider) -> None:
    provider.script("main-model", [Fault.http(503, "down")] * 2)
    provider.script("backup-model", [Fault.http(502, "also down")] * 2)
    async with Bot({"r.yaml": RULES}, llm=llm(provider, retries=1, fallback=["backup"])) as bot:
        reply = await bot.ask("ask hi")
        assert reply.error is not None
        assert "every model failed" in reply.error
        assert "main:" in reply.error and "HTTP 503: down" in reply.error
        assert "backup:" in reply.error and "HTTP 502: also down" in reply.error
        assert reply.text.startswith("LLM trouble: ")
        assert len(provider.seen()) == 4


async def test_slow_answer_past_the_timeout(provider: FakeProvider) -> None:
    provider.script("main-model", [Fault.slow(0.5), Fault.slow(0.5)])
    async with Bot({"r.yaml": RULES}, llm=llm(provider, retries=1, timeout=0.1)) as bot:
        reply = await bot.ask("ask hi")
        assert reply.error is not None
        assert "timed out after 0.1 s" in reply.error and "gave up after 2 attempts" in reply.error
        assert len(provider.seen()) == 2


async def test_step_deadline_bounds_the_whole_step(provider: FakeProvider) -> None:
    rules = RULES.replace('system: "Answer briefly."', "deadline: 0.2")
    provider.script("main-model", [Fault.slow(1.0)])
    async with Bot({"r.yaml": rules}, llm=llm(provider, timeout=30)) as bot:
        reply = await bot.ask("ask hi")
        assert reply.error is not None and "deadline" in reply.error
        assert len(provider.seen()) == 1


@pytest.mark.slow  # a deadline long enough for the shared timer (tmy.llm.deadline): 1 s
async def test_a_step_deadline_on_the_shared_timer_reads_the_same(provider: FakeProvider) -> None:
    rules = RULES.replace('system: "Answer briefly."', "deadline: 1")
    provider.script("main-model", [Fault.trickle(0.02)])  # never silent long enough to time out
    async with Bot({"r.yaml": rules}, llm=llm(provider, timeout=30, stream=True)) as bot:
        reply = await bot.ask("ask hi")
        assert reply.error == "the LLM step ran past its deadline of 1 s"
    assert len(provider.seen()) == 1


async def test_a_non_streaming_answer_that_trickles_is_bounded_whole(
    provider: FakeProvider,
) -> None:
    """A model's ``timeout`` bounds a non-streaming attempt whole: bytes arriving now
    and then do not keep it going (a stream's timeout is per wait for data)."""
    provider.script("main-model", [Fault.trickle(0.02)])
    async with Bot({"r.yaml": RULES}, llm=llm(provider, retries=0, timeout=0.3)) as bot:
        reply = await bot.ask("ask hi")
        assert reply.error is not None and "timed out after 0.3 s" in reply.error
    assert len(provider.seen()) == 1


@pytest.mark.slow  # a timeout long enough for the shared timer (tmy.llm.deadline.attempt): 1 s
async def test_an_attempt_timeout_on_the_shared_timer_reads_the_same(
    provider: FakeProvider,
) -> None:
    provider.script("main-model", [Fault.slow(1.6), Fault.trickle(0.02), Reply("third time")])
    async with Bot({"r.yaml": RULES}, llm=llm(provider, retries=2, timeout=1)) as bot:
        reply = await bot.ask("ask hi")
        assert reply.error is None and reply.text == "third time"
        call = llm_stats(reply)["calls"][0]
        assert call["requests"] == 3 and call["retries"] == 2
    provider.script("main-model", [Fault.slow(1.6)])
    async with Bot({"r.yaml": RULES}, llm=llm(provider, retries=0, timeout=1)) as bot:
        reply = await bot.ask("ask again")
        assert reply.error is not None and "timed out after 1 s" in reply.error
    assert len(provider.seen()) == 4


async def test_a_silent_provider_is_stopped_by_the_step_deadline(provider: FakeProvider) -> None:
    """A model ``timeout`` longer than what is left of the step's deadline: the step's
    deadline ends the attempt, and its error says so."""
    rules = RULES.replace('system: "Answer briefly."', "deadline: 0.3")
    provider.script("main-model", [Fault.slow(5)])
    async with Bot({"r.yaml": rules}, llm=llm(provider, timeout=30)) as bot:
        reply = await bot.ask("ask hi")
        assert reply.error == "the LLM step ran past its deadline of 0.3 s"
    assert len(provider.seen()) == 1


@pytest.mark.parametrize("deadline", ["0.3", "1.5"])
async def test_the_step_deadline_ends_an_attempt_whose_timeout_reaches_past_it(
    provider: FakeProvider, deadline: str
) -> None:
    """The last message is written to the store at once (``flush_interval: 0``) between
    the step's deadline being fixed and its timer starting: an attempt whose ``timeout``
    reaches past the deadline sets no timer of its own, so the step's error is the one
    read, whatever the store took."""
    rules = RULES.replace('system: "Answer briefly."', f"deadline: {deadline}")
    provider.script("main-model", [Fault.slow(5)])
    config = {**llm(provider, timeout=30), "budget": {"flush_interval": 0}}
    async with Bot({"r.yaml": rules}, llm=config) as bot:
        reply = await bot.ask("ask hi")
        assert reply.error == f"the LLM step ran past its deadline of {deadline} s"
    assert len(provider.seen()) == 1


async def test_a_stream_that_never_ends_is_stopped_by_the_step_deadline(
    provider: FakeProvider,
) -> None:
    rules = RULES.replace('system: "Answer briefly."', "deadline: 0.3")
    provider.script("main-model", [Fault.trickle(0.02)])  # never silent long enough to time out
    async with Bot({"r.yaml": rules}, llm=llm(provider, timeout=30, stream=True)) as bot:
        reply = await bot.ask("ask hi")
        assert reply.error == "the LLM step ran past its deadline of 0.3 s"
        assert reply.text == "LLM trouble: the LLM step ran past its deadline of 0.3 s"
    assert len(provider.seen()) == 1


async def test_non_json_body_is_a_clear_error(provider: FakeProvider) -> None:
    provider.script("main-model", [Fault.not_json("<html>Bad Gateway from the proxy</html>")])
    async with Bot({"r.yaml": RULES}, llm=llm(provider)) as bot:
        reply = await bot.ask("ask hi")
        assert reply.error == (
            "Failed to parse API response as JSON. Raw response: "
            "<html>Bad Gateway from the proxy</html>"
        )
        assert len(provider.seen()) == 1  # the same answer would come again: not retried


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("", "Failed to parse API response as JSON. Raw response: "),
        ('{"choices": 5}', "unexpected API response shape ("),
        ('{"choices": [{"message": "hi"}]}', "unexpected API response shape ("),
        ('{"choices": [{"message": {"tool_calls": [7]}}]}', "unexpected API response shape ("),
        ("[1, 2]", "unexpected API response (not an object): [1, 2]"),
        ('{"id": "x"}', 'the API response has no choices: {"id":"x"}'),
        ('{"error": {"message": "quota exceeded"}}', "the provider returned an error: quota"),
    ],
)
async def test_odd_bodies_are_clear_errors(provider: FakeProvider, body: str, error: str) -> None:
    provider.script("main-model", [Fault.not_json(body)])
    async with Bot({"r.yaml": RULES}, llm=llm(provider)) as bot:
        reply = await bot.ask("ask hi")
        assert reply.error is not None and reply.error.startswith(error), reply.error
        assert reply.text == f"LLM trouble: {reply.error}"
    assert len(provider.seen()) == 1


async def test_non_json_body_is_truncated(provider: FakeProvider) -> None:
    provider.script("main-model", [Fault.not_json("x" * 5000)])
    async with Bot({"r.yaml": RULES}, llm=llm(provider)) as bot:
        reply = await bot.ask("ask hi")
        assert reply.error.startswith("Failed to parse API response as JSON. Raw response: xxx")
        assert "(5000 characters)" in reply.error and len(reply.error) < 700


async def test_stream_cut_mid_way_is_an_error_not_a_half_answer(provider: FakeProvider) -> None:
    provider.script("main-model", [Fault.cut(), Fault.cut()])
    async with Bot({"r.yaml": RULES}, llm=llm(provider, retries=1, stream=True)) as bot:
        reply = await bot.ask("ask hi")
        assert reply.error is not None and "cut mid-way" in reply.error
        assert "Half an" not in reply.text
        assert len(provider.seen()) == 2


async def test_stream_cut_once_then_whole_answer(provider: FakeProvider) -> None:
    provider.script("main-model", [Fault.cut(), Reply("the whole answer")])
    async with Bot({"r.yaml": RULES}, llm=llm(provider, stream=True)) as bot:
        assert await bot.say("ask hi") == "the whole answer"
        assert len(provider.seen()) == 2


async def test_body_cut_mid_way_without_streaming(provider: FakeProvider) -> None:
    provider.script("main-model", [Fault.cut()])
    async with Bot({"r.yaml": RULES}, llm=llm(provider, retries=0)) as bot:
        reply = await bot.ask("ask hi")
        assert reply.error is not None
        assert "the connection failed to" in reply.error
        assert "ReadError: Response payload is not completed" in reply.error
        assert len(provider.seen()) == 1


async def test_a_missing_key_is_named_when_the_provider_refuses(
    provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MY_PROVIDER_KEY", raising=False)
    provider.script("main-model", [Fault.http(401, "Incorrect API key provided")])
    async with Bot({"r.yaml": RULES}, llm=llm(provider, api_key_env="MY_PROVIDER_KEY")) as bot:
        reply = await bot.ask("ask hi")
        assert reply.error.endswith(
            "answered HTTP 401: Incorrect API key provided "
            "(no API key was sent: $MY_PROVIDER_KEY is not set)"
        )
    assert "Authorization" not in provider.requests[0]["headers"]


async def test_api_key_from_the_named_environment_variable(
    provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_PROVIDER_KEY", "sk-test-123")
    async with Bot({"r.yaml": RULES}, llm=llm(provider, api_key_env="MY_PROVIDER_KEY")) as bot:
        await bot.say("ask hi")
    assert provider.requests[0]["headers"]["Authorization"] == "Bearer sk-test-123"


@pytest.mark.parametrize("key_var", ["TMY_LLM_API_KEY", "OPENAI_API_KEY"])
async def test_environment_alone_selects_the_endpoint(
    provider: FakeProvider, monkeypatch: pytest.MonkeyPatch, key_var: str
) -> None:
    for var in ("TMY_LLM_API_KEY", "OPENAI_API_KEY", "TMY_LLM_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(key_var, "sk-env")
    monkeypatch.setenv("OPENAI_BASE_URL", provider.base_url)
    monkeypatch.setenv("TMY_LLM_MODEL", "env-model")
    async with Bot({"r.yaml": RULES}) as bot:  # no llm config at all
        assert (await bot.say("ask hi")).startswith("echo: ")
    request = provider.requests[0]
    assert request["body"]["model"] == "env-model"
    assert request["headers"]["Authorization"] == "Bearer sk-env"


async def test_100_concurrent_conversations(provider: FakeProvider) -> None:
    provider.delay = 0.2
    rules = RULES.replace('system: "Answer briefly."', "history: 3")
    async with Bot({"r.yaml": rules}, llm=llm(provider)) as bot:
        replies = await asyncio.gather(
            *(bot.ask(f"ask question number {i}", user=f"user{i}") for i in range(100))
        )
        for i, reply in enumerate(replies):
            assert reply.error is None, reply.error
            assert reply.text == f"echo: question number {i}"
    assert len(provider.seen()) == 100


# -- from test_hardening_io.py (issue 7 hardening, defects 6, 9, 11: bounded bodies, encoded URLs,
#    redacted secrets)


def _llm(up: Upstream, model: str, **extra: Any) -> dict[str, Any]:
    spec = {"base_url": f"{up.url}/v1", "model": model, **extra.pop("spec", {})}
    return {"models": {"m": spec}, "default": "m", "retries": 0, **extra}


LLM_STEP = "- {plugin: LLM, deadline: 30}"


async def test_llm_body_that_never_ends_is_too_large(upstream: Upstream) -> None:
    llm = _llm(upstream, "endless-json", max_response_bytes=1_000_000)
    reply = await run_steps(LLM_STEP, llm=llm)
    assert reply.error is not None
    assert "too large" in reply.error and "1000000" in reply.error and "endless-json" in reply.error


async def test_llm_sse_stream_that_never_ends_is_too_large(upstream: Upstream) -> None:
    llm = _llm(upstream, "endless-sse", max_response_bytes=1_000_000, spec={"stream": True})
    reply = await run_steps(LLM_STEP, llm=llm)
    assert reply.error is not None
    assert "too large" in reply.error and "endless-sse" in reply.error, reply.error
    assert "deadline" not in reply.error  # the cap ended it, not the 30 s deadline


API_KEY = "sk-test-5ecret-K3y-0123456789"


async def test_echoed_api_key_is_redacted(
    upstream: Upstream, log_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMY_TEST_ECHO_KEY", API_KEY)
    llm = _llm(upstream, "echo-key", spec={"api_key_env": "TMY_TEST_ECHO_KEY"})
    rules = one_rule(LLM_STEP)
    async with serving(rules, llm=llm) as daemon:
        async with httpx.AsyncClient() as client:
            got = await client.post(f"{daemon.url}/v1/messages", json={"text": "go"})
        reply = await daemon.push("go")
    assert upstream.hits[0]["headers"]["Authorization"] == f"Bearer {API_KEY}"  # it was sent
    error = got.json()["error"]
    assert "Incorrect API key provided" in error and "***" in error
    assert API_KEY not in error
    assert reply.error is not None and API_KEY not in reply.error and "***" in reply.error
    assert API_KEY not in reply.text and API_KEY not in (reply.steps[0].error or "")
    assert API_KEY not in json.dumps(reply.steps[0].extra, default=str)
    logs.flush()
    text = log_file.read_text()
    assert "Incorrect API key provided" in text
    assert API_KEY not in text


async def test_password_in_base_url_is_not_logged(log_file: Path) -> None:
    password = "hunter2-pa55word"
    llm = {"models": {"m": {"base_url": f"http://bob:{password}@127.0.0.1:9/v1", "model": "x"}},
           "default": "m", "retries": 0}  # fmt: skip
    async with Bot(one_rule(LLM_STEP), llm=llm) as bot:
        async with tmy.llm.EXTENSION.serving(bot.engine.services):  # what serve logs at start
            pass
        reply = await bot.ask("go")  # nothing listens on port 9: the error names the endpoint
    logs.flush()
    text = log_file.read_text()
    assert '"llm.model"' in text and "bob:***@127.0.0.1:9" in text
    assert password not in text
    assert reply.error is not None and password not in reply.error
