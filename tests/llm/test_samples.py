"""The sample rules in examples/llm.yaml: offline on the TESTONLY mock, and against a provider
selected by the environment alone (as with a real key), each sample doing its job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.llm_fake_provider import FakeProvider, Reply
from tmy.testing import Bot

SAMPLES = Path(__file__).resolve().parents[2] / "examples" / "llm.yaml"


async def test_sample_rules_work_offline_on_the_mock() -> None:
    async with Bot(SAMPLES) as bot:
        assert await bot.say("ai hello") == "[TESTONLY mock · 0 earlier turns] You said: hello"
        assert await bot.say("and then?") == (  # the session keeps the chat going
            "[TESTONLY mock · 1 earlier turns] You said: and then?"
        )
        assert await bot.say("ai reset") == "Done — I start afresh."
        assert (await bot.say("ai again")).startswith("[TESTONLY mock · 1 earlier turns]")
        assert await bot.say("translate bonjour") == "bonjour (from bonjour)"
        assert (await bot.say("question is the weather nice?")).startswith("(Tip: for a forecast")
        assert not (await bot.say("question who wrote Hamlet?")).startswith("(Tip")
        answer = await bot.say('assistant MOCK:TOOL:forecast:{"city": "Paris"}')
        assert (
            answer == "[TESTONLY mock] tool results: Paris: sunny, 21 °C, light wind (sample data)"
        )


async def test_sample_rules_against_a_provider_chosen_by_the_environment(
    provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("TMY_LLM_API_KEY", "TMY_LLM_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-sample")
    monkeypatch.setenv("OPENAI_BASE_URL", provider.base_url)
    monkeypatch.setenv("TMY_LLM_MODEL", "real-model")

    def model(body: dict[str, Any]) -> Reply:
        """A stand-in for a real model, answering each sample the way one would."""
        system = body["messages"][0]["content"]
        ask = body["messages"][-1]["content"].split("\n")[-1]
        if "Output format: 1-or-0" in system:
            return Reply("1" if "weather" in ask else "0")
        if "Output format: JSON" in system:
            return Reply(json.dumps({"translation": "good day", "source_language": "French"}))
        if body.get("tools") and body["messages"][-1]["role"] != "tool":
            return Reply(None, tool_calls=[{"name": "forecast", "arguments": {"city": "Oslo"}}])
        if body["messages"][-1]["role"] == "tool":
            return Reply(f"Forecast says: {body['messages'][-1]['content']}")
        return Reply(f"Hello! ({len(body['messages']) - 2} earlier messages)")

    provider.default = model
    async with Bot(SAMPLES) as bot:
        assert await bot.say("ai hello") == "Hello! (0 earlier messages)"
        assert await bot.say("and then?") == "Hello! (2 earlier messages)"  # history + session
        assert await bot.say("translate bonjour") == "good day (from French)"
        tip = await bot.say("question is the weather nice in Rome?")
        assert tip.startswith("(Tip: for a forecast") and tip.endswith("earlier messages)")
        assert (await bot.say("question who wrote Hamlet?")).startswith("Hello!")
        answer = await bot.say("assistant weather in Oslo?")
        assert answer == "Forecast says: Oslo: sunny, 21 °C, light wind (sample data)"
    seen = provider.seen()
    assert {b["model"] for b in seen} == {"real-model"}
    assert {r["headers"]["Authorization"] for r in provider.requests} == {"Bearer sk-sample"}
    translate = next(b for b in seen if "response_format" in b)
    assert translate["response_format"] == {"type": "json_object"}
    assert translate["temperature"] == 0.2
