"""Config validation, load-time checks, budgets, the ``ctx`` inspector, ``ask --json`` and the
sample rules."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from llm_fake_provider import FakeProvider, Reply
from structlog.testing import capture_logs

import tmy.llm
from tmy.app import EXTENSIONS, SERVICE_HOOKS
from tmy.config import Settings
from tmy.errors import ConfigError, RuleError
from tmy.llm.config import MOCK, load_config
from tmy.llm.executor import llm_step
from tmy.llm.inspect import inspect
from tmy.testing import Bot

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
async def provider() -> AsyncIterator[FakeProvider]:
    async with FakeProvider() as fake:
        yield fake


# -- config ---------------------------------------------------------------------------------------


def test_no_key_means_the_mock() -> None:
    config = load_config({}, env={})
    assert config.default == MOCK and config.uses_mock
    assert (config.retries, config.backoff_base, config.backoff_cap) == (2, 0.5, 8.0)
    assert config.max_tool_turns == 12


def test_environment_model_needs_no_config() -> None:
    config = load_config(
        {},
        env={
            "OPENAI_API_KEY": "sk-1",
            "TMY_LLM_MODEL": "deepseek-chat",
            "OPENAI_BASE_URL": "https://api.deepseek.com/v1/",
        },
    )
    model = config.default_model
    assert (model.name, model.model, model.base_url) == (
        "env",
        "deepseek-chat",
        "https://api.deepseek.com/v1",
    )
    assert model.api_key == "sk-1" and not config.uses_mock
    assert load_config({}, env={"TMY_LLM_API_KEY": "k"}).default_model.base_url == (
        "https://api.openai.com/v1"
    )


def test_named_models_fallback_and_default() -> None:
    raw = {
        "models": {
            "fast": {
                "base_url": "http://h/v1",
                "model": "a",
                "fallback": ["slow"],
                "api_key_env": "K",
            },
            "slow": {"base_url": "http://h/v1", "model": "b", "timeout": 5},
        }
    }
    config = load_config(raw, env={"K": "secret"})
    assert config.default == "fast" and config.default_model.api_key == "secret"
    assert config.models["fast"].fallback == ("slow",) and config.models["slow"].timeout == 5
    assert load_config({**raw, "default": "slow"}, env={}).default == "slow"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"modles": {}}, "unknown key 'llm.modles' (did you mean 'models'?)"),
        (
            {"models": {"m": {"base_url": "http://h", "model": "x", "timout": 3}}},
            "unknown key 'llm.models.m.timout' (did you mean 'timeout'?)",
        ),
        (
            {"models": {"m": {"base_url": "http://h", "model": "x", "timeout": "3"}}},
            "'llm.models.m.timeout' has the wrong type",
        ),
        ({"models": {"m": {"model": "x"}}}, "'llm.models.m.base_url' is required"),
        ({"models": {"m": {"base_url": "ftp://h", "model": "x"}}}, "must start with http://"),
        (
            {"models": {"m": {"base_url": "http://h", "model": "x", "fallback": ["n"]}}},
            "'llm.models.m.fallback' names unknown model 'n'",
        ),
        ({"default": "gpt"}, "'llm.default' names unknown model 'gpt'"),
        ({"budget": {"daily": 5}}, "unknown key 'llm.budget.daily'"),
        ({"retries": -1}, "'llm.retries' must not be negative"),
        ({"scene_prompts": {"branch": 1}}, "'llm.scene_prompts.branch' has the wrong type"),
    ],
)
def test_config_errors_name_the_key(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(raw, env={})
    assert message in str(caught.value)


async def test_a_bad_llm_config_stops_start_up() -> None:
    with pytest.raises(ConfigError, match=r"llm\.modles"):
        async with Bot({"r.yaml": "rules: []"}, llm={"modles": {}}):
            pass


def test_install_is_idempotent_and_replaces_the_placeholder() -> None:
    before = (len(EXTENSIONS), len(SERVICE_HOOKS))
    tmy.llm.install()
    tmy.llm.install()
    assert (len(EXTENSIONS), len(SERVICE_HOOKS)) == before
    from tmy.app import build_registry

    assert build_registry(Settings(plugins=Path("/nonexistent"))).get("LLM").run is llm_step


async def test_the_mock_is_announced_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tmy.llm, "_announced", False)
    with capture_logs() as logs:
        for _ in range(2):
            async with Bot({"r.yaml": "rules: []"}):
                pass
    assert [e["event"] for e in logs].count("llm.mock") == 1


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ("{plugin: LLM, returns: long}", "returns 'long' must be one of"),
        ("{plugin: LLM, model: gpt9}", "model 'gpt9' is not configured"),
        ("{plugin: LLM, output: {type: objekt}}", "output is not a valid JSON Schema"),
        ("{plugin: LLM, returns: int, choices: [a]}", "give only one of returns, choices"),
        ("{plugin: LLM, tool_protocol: xml}", "tool_protocol 'xml' must be native or text"),
        ("{plugin: LLM, messages: [{robot: hi}]}", "role 'robot' must be one of"),
        ("{plugin: ADJUST, when_llm: 5}", "when_llm: expected a condition in words"),
        ("{plugin: ADJUST, while_llm: x, max_loops: 0}", "max_loops must be a whole number"),
        ("{plugin: LLM, temprature: 0.1}", "did you mean 'temperature'?"),
    ],
)
async def test_step_options_are_checked_when_rules_load(step: str, message: str) -> None:
    text = f"rules:\n  - id: r\n    triggers: [x]\n    steps:\n      - {step}\n"
    with pytest.raises(RuleError) as caught:
        async with Bot({"bad.yaml": text}):
            pass
    assert "bad.yaml:5" in str(caught.value) and message in str(caught.value)


async def test_tool_key_is_checked_when_rules_load() -> None:
    text = (
        "rules:\n  - id: r\n    triggers: [x]\n    tool: {parameters: {}}\n"
        "    steps: [{plugin: ADJUST}]\n"
    )
    with pytest.raises(RuleError, match=r"bad.yaml:4: rule 'r': tool: 'description' is required"):
        async with Bot({"bad.yaml": text}):
            pass


# -- budgets --------------------------------------------------------------------------------------

BUDGET_RULES = """
rules:
  - id: ask
    triggers: ["ask *"]
    on_error: "Not now: {STEP_ERROR}"
    steps:
      - plugin: LLM
"""


def budget(provider: FakeProvider, **limits: int) -> dict[str, Any]:
    return {"models": {"fake": {"base_url": provider.base_url, "model": "fake"}}, "budget": limits}


async def test_per_user_budget_stops_requests(provider: FakeProvider) -> None:
    provider.default = lambda body: Reply("ok", prompt_tokens=10, completion_tokens=5)
    async with Bot({"r.yaml": BUDGET_RULES}, llm=budget(provider, per_user_daily_tokens=20)) as bot:
        assert await bot.say("ask 1", user="ann") == "ok"  # 15 used
        assert await bot.say("ask 2", user="ann") == "ok"  # 30 used: over from now on
        reply = await bot.ask("ask 3", user="ann")
        assert reply.text == (
            "Not now: the daily LLM budget for ann is used up (30 of 20 tokens "
            "today; llm.budget.per_user_daily_tokens)"
        )
        assert await bot.say("ask 1", user="bob") == "ok"  # another user still has a budget
    assert len(provider.seen()) == 3


async def test_daily_budget_for_everyone(provider: FakeProvider) -> None:
    async with Bot({"r.yaml": BUDGET_RULES}, llm=budget(provider, daily_tokens=16)) as bot:
        await bot.say("ask 1", user="ann")
        await bot.say("ask 1", user="bob")
        reply = await bot.ask("ask 1", user="cid")
        assert "the daily LLM budget is used up (30 of 16 tokens" in reply.text
    assert len(provider.seen()) == 2


# -- the inspector and ask --json ---------------------------------------------------------------

INSPECT_RULES = """
rules:
  - id: chat
    triggers: ["chat *"]
    steps:
      - {plugin: LLM, system: "Be kind.", history: 5, tools: [lookup]}
  - id: lookup
    tool: {description: "Look a word up."}
    steps:
      - {plugin: ADJUST, input: "a definition"}
"""


async def test_ctx_prints_the_request_without_sending_it(
    provider: FakeProvider, tmp_path: Path
) -> None:
    settings = Settings(
        rules=tmp_path / "rules.yaml",
        plugins=tmp_path / "none",
        store=f"sqlite:///{tmp_path / 'db.sqlite'}",
        llm=budget(provider),
    )
    (tmp_path / "rules.yaml").write_text(INSPECT_RULES)
    async with Bot(tmp_path / "rules.yaml", store=settings.store, llm=settings.llm) as bot:
        await bot.say("chat first", user="alice", platform="console")
    assert len(provider.seen()) == 1
    who = {"user": "alice", "chat": "", "platform": "console"}
    out = io.StringIO()
    assert await inspect(settings, "chat second", who, out=out) == 0
    text = out.getvalue()
    assert len(provider.seen()) == 1  # nothing was sent
    header, body = text.split("\n{", 1)
    body = json.loads("{" + body)
    assert "# rule chat · step chat/0 · scene general" in header
    assert "stable prefix: 1 messages + tools" in header and "then 2 history messages" in header
    assert [m["content"] for m in body["messages"][1:3]] == ["first", "echo: first"]
    assert body["messages"][-1]["content"].endswith("\n\nsecond")
    assert body["tools"][0]["function"]["name"] == "lookup"
    signature = header.split("sha256 ")[1][:16]
    out = io.StringIO()
    await inspect(settings, "chat another topic", {**who, "user": "bob"}, out=out)
    assert f"sha256 {signature}" in out.getvalue()  # the stable prefix is the same for everyone
    out = io.StringIO()
    assert await inspect(settings, "unmatched", who, out=out) == 1
    assert "no rule matched" in out.getvalue()


def _cli_env() -> dict[str, str]:
    drop = ("TMY_", "OPENAI_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


async def _cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        cwd=REPO,
        env=_cli_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


def _common(tmp_path: Path) -> list[str]:
    (tmp_path / "tmy.yaml").write_text("llm: {}\n")
    return [
        "--config",
        str(tmp_path / "tmy.yaml"),
        "--rules",
        str(REPO / "rules" / "llm.yaml"),
        "--store",
        f"sqlite:///{tmp_path / 'db.sqlite'}",
        "--user",
        "u1",
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    "entry",
    [
        ["run.py"],
        ["-m", "tmy.llm"],
    ],
)
async def test_ctx_command(entry: list[str], tmp_path: Path) -> None:
    code, out, err = await _cli(*entry, "ctx", *_common(tmp_path), "ai hello")
    assert code == 0, err
    assert out.startswith("# rule llm-chat · step llm-chat/0 · scene general\n")
    code, out, _ = await _cli(*entry, "ctx", "--json", *_common(tmp_path), "ai hello")
    assert json.loads(out)["messages"][-1]["content"].endswith("\n\nhello")


@pytest.mark.slow
async def test_ask_json_shows_model_tokens_and_retries(tmp_path: Path) -> None:
    code, out, err = await _cli("run.py", "ask", "--json", *_common(tmp_path), "translate hallo")
    assert code == 0, err
    reply = json.loads(out)
    assert reply["answer"] == "hallo (from hallo)"
    stats = reply["steps"][0]["extra"]["llm"]
    assert stats["model"] == MOCK and stats["retries"] == 0 and stats["repairs"] == 0
    assert stats["prompt_tokens"] > 0 and stats["calls"][0]["completion_tokens"] > 0


# -- the sample rules ----------------------------------------------------------------------------


async def test_sample_rules_work_offline_on_the_mock() -> None:
    async with Bot(REPO / "rules" / "llm.yaml") as bot:
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
