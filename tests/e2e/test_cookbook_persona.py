"""The cookbook's per-chat persona and model (examples/per-chat-persona/, recipe 11).

The recipe's own YAML tests run through ``run.py test`` as a user runs them, with the
shipped config and with one that names two models (its cases must hold under any
``llm.models``: in tests every model is the TESTONLY mock). Then the same rules answer
through a real chat-completions server on loopback, so what the chat variables change
is checked on the wire — the request's ``model`` and system prompt — for ``.tmy vars
set`` in chat and for an edit in the web console.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import tmy.ruletests  # noqa: F401  (registers the `test` command)
from tests.support.console import console_daemon, logged_in
from tests.support.llm_fake_provider import FakeProvider
from tmy import cli
from tmy.testing import Bot

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "examples" / "per-chat-persona"
DEFAULT = "You are a friendly, concise assistant."
PIRATE = "a pirate who answers in rhymes"


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict[str, Any]]]:
    code = cli.main([*args, "test", str(RECIPE.relative_to(REPO)), "--json"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    return code, json.loads(out)["cases"]


def two_models(provider: FakeProvider) -> dict[str, Any]:
    """``fast`` (the default) and ``smart``, both on the loopback provider."""
    return {
        "default": "fast",
        "models": {
            "fast": {"base_url": provider.base_url, "model": "fast-model"},
            "smart": {"base_url": provider.base_url, "model": "smart-model"},
        },
        "backoff_base": 0.001,
    }


def system_of(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"]) if body["messages"][0]["role"] == "system" else ""


@pytest.mark.usefixtures("in_checkout")
def test_the_recipe_passes_its_own_tests(capsys: pytest.CaptureFixture[str]) -> None:
    code, cases = run_json(capsys)
    failed = [c for c in cases if not c["ok"]]
    assert code == 0 and not failed, failed
    names = " | ".join(c["name"] for c in cases)
    for said in (
        "the default persona is in the system prompt",
        "and not in another chat",
        "the model follows the chat's variable",
        "an unknown model fails the step",
    ):
        assert said in names
    assert any(c["expectation"] == "expect_error" and "gpt-9" in c["expected"] for c in cases)


@pytest.mark.usefixtures("in_checkout")
def test_its_cases_hold_under_a_config_naming_other_models(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An operator who copies the recipe has their own llm.models; its tests still pass."""
    config = tmp_path / "tmy.yaml"
    config.write_text(
        "llm:\n  default: fast\n  models:\n"
        "    fast: {base_url: https://api.deepseek.com/v1, model: deepseek-chat}\n"
        "    smart: {base_url: https://api.openai.com/v1, model: gpt-4o}\n",
        encoding="utf-8",
    )
    code, cases = run_json(capsys, "--config", str(config))
    assert code == 0, [c for c in cases if not c["ok"]]


def test_the_cookbook_shows_the_recipe_file_exactly() -> None:
    doc = (REPO / "docs" / "cookbook.md").read_text(encoding="utf-8")
    link = "[`examples/per-chat-persona/persona.yaml`](../examples/per-chat-persona/persona.yaml)"
    shown = re.findall(re.escape(link) + r":\n\n```yaml\n(.*?)\n```", doc, re.S)
    assert shown == [(RECIPE / "persona.yaml").read_text(encoding="utf-8").rstrip("\n")]
    assert "(#11-per-chat-persona-and-model)" in doc


async def test_the_chat_variables_change_the_request_on_the_wire(provider: FakeProvider) -> None:
    async with Bot(RECIPE, llm=two_models(provider)) as bot:
        first = await bot.ask("bot hello", chat="group:1")
        assert first.text == "echo: hello"
        (sent,) = provider.seen()
        assert sent["model"] == "fast-model" and DEFAULT in system_of(sent)

        admin = {"chat": "group:1", "is_admin": True}
        assert await bot.say(f".tmy vars set persona {PIRATE}", **admin) == json.dumps(PIRATE)
        assert await bot.say(".tmy vars set model smart", **admin) == '"smart"'
        await bot.say("bot hello again", chat="group:1")
        await bot.say("bot hello", chat="group:2")
        here, there = provider.seen()[1:]
        assert here["model"] == "smart-model" and f"You are {PIRATE}." in system_of(here)
        assert there["model"] == "fast-model" and system_of(there) == system_of(sent)
        assert len(here["messages"]) == 4  # the chat's history went along (history: 10)

        await bot.say("bot once more", chat="group:1")
        assert system_of(provider.seen()[-1]) == system_of(here)  # a stable prefix per chat

        await bot.say(".tmy vars set model gpt-9", **admin)  # vars set does not check names
        failed = await bot.ask("bot hello", chat="group:1")
        assert failed.error == "unknown LLM model 'gpt-9'; configured models: TESTONLY, fast, smart"
        assert failed.text.startswith("The assistant is unavailable right now (unknown LLM")
        assert len(provider.seen()) == 4  # nothing was sent
        assert await bot.say("bot still here?", chat="group:2") == "echo: still here?"
        assert await bot.say(".tmy vars del model", **admin) == "model reset to its default"
        await bot.say("bot back", chat="group:1")
        assert provider.seen()[-1]["model"] == "fast-model"


async def test_an_edit_in_the_console_sets_one_chats_persona(provider: FakeProvider) -> None:
    async with (
        console_daemon(RECIPE, llm=two_models(provider)) as daemon,
        logged_in(daemon) as admin,
    ):
        chat = {"scope": "chat", "platform": "test", "chat": "group:7", "name": "persona"}
        page = await admin.get("variables/view", params=chat)  # not stored yet: the default
        assert page.status_code == 200 and "friendly, concise" in page.text
        assert "variables/set" in page.text  # with the edit form
        saved = await admin.post("variables/set", {**chat, "value": PIRATE})
        assert saved.status_code == 303
        await daemon.push("bot hello", chat="group:7")
        await daemon.push("bot hello", chat="group:8")
        seven, eight = provider.seen()
        assert f"You are {PIRATE}." in system_of(seven) and DEFAULT in system_of(eight)
        listed = await admin.json("variables", scope="chat")
        assert [(r["name"], r["value"]) for r in listed["rows"]] == [("persona", PIRATE)]
