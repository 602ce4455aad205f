"""The rules marked tool: as MCP tools, in process: the SDK's client against the server tmy
builds (tmy.mcpserve.server), on a real bot (engine, store, rules) — no process, no socket."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp import Client

from tests.mcpserve.conftest import ADMIN, NOT_ADMIN, RULES
from tmy.mcpserve.server import build_server
from tmy.mcpserve.tools import Caller, offered, rule_tools
from tmy.testing import Bot


def client(bot: Bot, caller: Caller) -> Client:
    return Client(build_server(lambda: bot.engine, lambda ctx: caller))


async def names(c: Client) -> list[str]:
    return [t.name for t in (await c.list_tools()).tools]


def text(result: Any) -> str:
    return "".join(part.text for part in result.content)


async def test_lists_the_tool_rules_a_caller_may_reach_with_their_schemas() -> None:
    async with Bot({"t.yaml": RULES}) as bot, client(bot, Caller("ann")) as c:
        listed = (await c.list_tools()).tools
        assert [t.name for t in listed] == NOT_ADMIN  # no admin_only, no telegram-only, no plain
        weather = next(t for t in listed if t.name == "weather")
        assert weather.description == "The weather in a city today."
        assert weather.input_schema["required"] == ["city"]


async def test_a_call_runs_the_rule_as_the_caller_and_answers_its_reply() -> None:
    async with Bot({"t.yaml": RULES}) as bot, client(bot, Caller("ann")) as c:
        result = await c.call_tool("weather", {"city": "Oslo"})
        assert not result.is_error
        assert text(result) == "Sunny in Oslo for ann@mcp"


async def test_an_admin_only_rule_is_refused_to_a_non_admin_and_never_runs() -> None:
    async with Bot({"t.yaml": RULES}) as bot, client(bot, Caller("ann")) as c:
        result = await c.call_tool("wipe_all", {})
        assert result.is_error
        assert text(result).startswith("permission denied: tool 'wipe_all'")
        assert "admin_only" in text(result)
        assert await bot.var("wiped") == 0


async def test_an_admin_sees_and_runs_it_by_the_config_or_by_the_flag() -> None:
    async with Bot({"t.yaml": RULES}, admins=("mcp:boss",)) as bot:
        for caller in (Caller("boss"), Caller("ann", admin=True)):
            async with client(bot, caller) as c:
                assert await names(c) == ADMIN
                result = await c.call_tool("wipe_all", {})
                assert not result.is_error, text(result)
        assert await bot.var("wiped") == 2
        async with client(bot, Caller("boss", platform="telegram")) as c:
            # admins: names boss on mcp only; on telegram the platform filter admits instead
            assert await names(c) == ["broken", "telegram_only", "weather"]


async def test_bad_calls_are_tool_errors() -> None:
    async with Bot({"t.yaml": RULES}) as bot, client(bot, Caller("ann")) as c:
        missing = await c.call_tool("weather", {})
        assert missing.is_error and "'city' is a required property" in text(missing)
        unknown = await c.call_tool("plain", {})
        assert unknown.is_error and text(unknown) == "unknown tool 'plain'"
        elsewhere = await c.call_tool("telegram_only", {})
        assert elsewhere.is_error and "telegram" in text(elsewhere)
        failed = await c.call_tool("broken", {})
        assert failed.is_error and text(failed).startswith("error: ")


async def test_the_list_follows_a_reload(tmp_path: Path) -> None:
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "t.yaml").write_text(RULES, encoding="utf-8")
    async with Bot(folder) as bot, client(bot, Caller("ann")) as c:
        assert await names(c) == NOT_ADMIN
        (folder / "more.yaml").write_text(
            "rules:\n  - id: echo\n    tool: {description: Echo.}\n"
            "    steps:\n      - {plugin: ADJUST, input: echoed}\n",
            encoding="utf-8",
        )
        assert (await bot.app.reload("test")).ok
        assert await names(c) == ["broken", "echo", "weather"]
        assert text(await c.call_tool("echo", {})) == "echoed"


async def test_rule_ids_become_tool_names_as_the_llm_answerer_names_them() -> None:
    async with Bot({"t.yaml": RULES}) as bot:
        tools = rule_tools(bot.engine)
        assert tools["wipe_all"].rule.id == "wipe.all"
        assert "plain" not in tools
        assert [t.name for t in offered(bot.engine, Caller("x", platform="telegram"))] == [
            "broken",
            "telegram_only",
            "weather",
        ]
