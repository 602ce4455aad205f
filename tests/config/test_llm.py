"""Config validation, load-time checks, budgets, the ``ctx`` inspector, ``ask --json`` and the
sample rules."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

import tmy.llm
from tests.support.llm_fake_provider import FakeProvider, Fault, Reply
from tests.support.upstream import MB
from tmy.app import App, build_registry
from tmy.builtins import BUILTINS
from tmy.config import Settings
from tmy.config.llm import MOCK, load_config
from tmy.errors import ConfigError, RuleError
from tmy.llm.executor import llm_step
from tmy.llm.inspect import inspect, render
from tmy.llm.usage import keys, today
from tmy.message import Message
from tmy.testing import Bot

REPO = Path(__file__).resolve().parents[2]


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


def test_the_llm_executor_comes_from_the_llm_extension() -> None:
    settings = Settings(plugins=Path("/nonexistent"))
    assert build_registry(settings, [tmy.llm.EXTENSION]).get("LLM").run is llm_step
    assert "LLM" not in build_registry(settings)


async def test_the_mock_is_announced_by_serving_and_never_by_one_shot_runs() -> None:
    with capture_logs() as logs:
        async with Bot({"r.yaml": "rules: []"}) as bot:  # what ask/vars/ctx open
            assert [e["event"] for e in logs].count("llm.mock") == 0
            async with tmy.llm.EXTENSION.serving(bot.engine.services):  # what serve enters once
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


@pytest.mark.parametrize(
    ("limits", "counter", "message"),
    [
        (
            {"per_user_daily_tokens": 100},
            "user",
            "the daily LLM budget for ann is used up (100 of 100 tokens today; "
            "llm.budget.per_user_daily_tokens)",
        ),
        (
            {"daily_tokens": 100},
            "all",
            "the daily LLM budget is used up (100 of 100 tokens today; llm.budget.daily_tokens)",
        ),
    ],
)
async def test_a_spent_budget_sends_no_request_at_all(
    provider: FakeProvider, limits: dict[str, int], counter: str, message: str
) -> None:
    steps = BUDGET_RULES + '        system: "x"\n  - {id: j, triggers: ["judge *"], steps: '
    steps += '[{plugin: ADJUST, when_llm: "it is a question"}]}\n'
    async with Bot({"r.yaml": steps}, llm=budget(provider, **limits)) as bot:
        ann = Message("", user="ann", platform="test")
        spent = {"prompt": 60, "completion": 40, "cached": 0, "calls": 3}
        await bot.engine.services.store.set(keys(today(bot.engine.tz), ann)[counter], spent)
        reply = await bot.ask("ask anything", user="ann")
        assert reply.error == message
        assert reply.text == f"Not now: {message}"
        reply = await bot.ask("judge anything?", user="ann")  # judgements are LLM calls too
        assert reply.error == f"when_llm: {message}"
    assert provider.requests == []  # the server saw nothing


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


async def _ctx(settings: Settings, text: str, who: dict[str, str]) -> tuple[int, str]:
    """What ``run.py ctx`` prints for ``text`` and its exit status (nothing is sent)."""
    async with App(settings, extensions=BUILTINS) as app:
        seen = await inspect(app, Message(text, **who))
    return (0 if seen.request is not None else 1), render(seen)


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
    code, text = await _ctx(settings, "chat second", who)
    assert code == 0
    assert len(provider.seen()) == 1  # nothing was sent
    header, body = text.split("\n{", 1)
    body = json.loads("{" + body)
    assert "# rule chat · step chat/0 · scene general" in header
    assert "stable prefix: 1 messages + tools" in header and "then 2 history messages" in header
    # the history keeps the user message exactly as sent (Time/From lines first)
    assert body["messages"][1]["content"].endswith("\n\nfirst")
    assert body["messages"][2]["content"] == "echo: first"
    assert body["messages"][-1]["content"].endswith("\n\nsecond")
    assert body["tools"][0]["function"]["name"] == "lookup"
    signature = header.split("sha256 ")[1][:16]
    _, text = await _ctx(settings, "chat another topic", {**who, "user": "bob"})
    assert f"sha256 {signature}" in text  # the stable prefix is the same for everyone
    # text no rule answers is a follow-up of the user's last LLM message in this chat …
    code, text = await _ctx(settings, "unmatched", who)
    assert code == 0 and "# rule chat" in text
    # … and, for a user with no LLM message yet, says that no rule matched
    code, text = await _ctx(settings, "unmatched", {**who, "user": "carol"})
    assert code == 1 and "no rule matched" in text


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


def _common(tmp_path: Path, llm: dict[str, Any] | None = None) -> list[str]:
    (tmp_path / "tmy.yaml").write_text(json.dumps({"llm": llm or {}}))  # JSON is YAML
    return [
        "--config",
        str(tmp_path / "tmy.yaml"),
        "--rules",
        str(REPO / "examples" / "llm.yaml"),
        "--store",
        f"sqlite:///{tmp_path / 'db.sqlite'}",
        "--user",
        "u1",
    ]


@pytest.mark.slow
async def test_ctx_command(tmp_path: Path) -> None:
    code, out, err = await _cli("run.py", "ctx", *_common(tmp_path), "--chat", "team", "ai hello")
    assert code == 0, err
    assert out.startswith("# rule llm-chat · step llm-chat/0 · scene general\n")
    assert "# tokens today for u1: 0 prompt" in out
    body = json.loads(out[out.index("\n{") :])
    assert "From: u1 (chat team on console)" in body["messages"][-1]["content"]
    code, out, _ = await _cli("run.py", "ctx", "--json", *_common(tmp_path), "ai hello")
    assert json.loads(out)["messages"][-1]["content"].endswith("\n\nhello")
    code, out, _ = await _cli("run.py", "ctx", *_common(tmp_path), "nothing matches this")
    assert code == 1 and "no rule matched" in out


@pytest.mark.slow
async def test_ask_json_shows_model_tokens_and_retries(tmp_path: Path) -> None:
    code, out, err = await _cli("run.py", "ask", "--json", *_common(tmp_path), "translate hallo")
    assert code == 0, err
    reply = json.loads(out)
    assert reply["answer"] == "hallo (from hallo)"
    stats = reply["steps"][0]["extra"]["llm"]
    assert stats["model"] == MOCK and stats["retries"] == 0 and stats["repairs"] == 0
    assert stats["prompt_tokens"] > 0 and stats["calls"][0]["completion_tokens"] > 0


@pytest.mark.slow
async def test_cli_against_a_provider_ctx_sends_nothing_ask_json_shows_the_calls(
    provider: FakeProvider, tmp_path: Path
) -> None:
    config = {
        "models": {"fake": {"base_url": provider.base_url, "model": "fake-id"}},
        "backoff_base": 0.001,
    }
    args = _common(tmp_path, config)
    code, out, err = await _cli("run.py", "ctx", *args, "--chat", "room", "ai hello")
    assert code == 0, err
    assert f"# POST {provider.base_url}/chat/completions · model fake (fake-id)" in out
    body = json.loads(out[out.index("\n{") :])
    assert body["model"] == "fake-id" and "From: u1 (chat room on console)" in str(body)
    assert provider.requests == []  # ctx sent nothing
    provider.script("fake-id", [Fault.http(503, "busy"), Reply("hi there", cached_tokens=4)])
    code, out, err = await _cli("run.py", "ask", "--json", *args, "--chat", "room", "ai hello")
    assert code == 0, err
    reply = json.loads(out)
    assert reply["answer"] == "hi there"
    stats = reply["steps"][0]["extra"]["llm"]
    assert (stats["model"], stats["retries"], stats["prompt_tokens"]) == ("fake", 1, 10)
    assert (stats["completion_tokens"], stats["cached_tokens"]) == (5, 4)
    (call,) = stats["calls"]
    assert call["requests"] == 2 and len(call["waited_s"]) == 1
    assert len(provider.requests) == 2
    # what ctx printed is what ask sent (but for the time in the dynamic tail)
    sent = provider.seen()[1]
    assert {**sent, "messages": None} == {**body, "messages": None}
    assert sent["messages"][:-1] == body["messages"][:-1]
    tail = lambda m: m[-1]["content"].split("\n")[1:]  # noqa: E731
    assert tail(sent["messages"]) == tail(body["messages"])


# -- from test_hardening_io.py (issue 7 hardening, defects 6, 9, 11: bounded bodies, encoded URLs,
#    redacted secrets)


def test_llm_max_response_bytes_is_validated() -> None:
    from tmy.config.llm import load_config
    from tmy.errors import ConfigError

    assert load_config({}, env={}).max_response_bytes == 8 * MB
    assert load_config({"max_response_bytes": 1000}, env={}).max_response_bytes == 1000
    with pytest.raises(ConfigError, match="max_response_bytes"):
        load_config({"max_response_bytes": 0}, env={})
