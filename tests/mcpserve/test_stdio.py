"""``python run.py mcp-serve``: an MCP SDK client starts it over stdio, as Claude Desktop does,
lists the tool rules and calls them as the caller the command line names."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import mcp_types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.mcpserve.conftest import ADMIN, NOT_ADMIN

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # each test starts a tmy process


def mcp_serve(rules: Path, *flags: str) -> StdioServerParameters:
    """The command an MCP client's config would hold, with a private config and store."""
    config = rules.parent / "tmy.yaml"
    config.write_text('store: "sqlite:///tmy.db"\nadmins: ["mcp:boss"]\n', encoding="utf-8")
    command = ["mcp-serve", "--config", str(config), "--rules", str(rules), *flags]
    return StdioServerParameters(
        command=sys.executable,
        args=[str(ROOT / "run.py"), *command],
        cwd=str(rules.parent),
    )


def text(result: Any) -> str:
    return "".join(part.text for part in result.content)


async def test_a_client_lists_and_calls_the_tool_rules_as_the_user(rules_dir: Path) -> None:
    async with Client(mcp_serve(rules_dir, "--user", "ann")) as c:
        assert [t.name for t in (await c.list_tools()).tools] == NOT_ADMIN
        result = await c.call_tool("weather", {"city": "Oslo"})
        assert (text(result), result.is_error) == ("Sunny in Oslo for ann@mcp", False)
        refused = await c.call_tool("wipe_all", {})
        assert refused.is_error and "admin_only" in text(refused)
        # it never ran: an admin's first run counts 1
    async with Client(mcp_serve(rules_dir, "--user", "boss")) as c:
        assert [t.name for t in (await c.list_tools()).tools] == ADMIN
        assert text(await c.call_tool("wipe_all", {})) == "wiped 1 times"


async def test_admin_flag_and_platform_option(rules_dir: Path) -> None:
    flags = ("--user", "ann", "--admin", "--platform", "telegram")
    async with Client(mcp_serve(rules_dir, *flags), mode="legacy") as c:
        assert [t.name for t in (await c.list_tools()).tools] == [
            "broken",
            "telegram_only",
            "weather",
            "wipe_all",
        ]
        result = await c.call_tool("weather", {"city": "Rome"})
        assert text(result) == "Sunny in Rome for ann@telegram"
        assert text(await c.call_tool("wipe_all", {})) == "wiped 1 times"


async def test_an_edited_rules_folder_reloads_and_the_client_is_told(rules_dir: Path) -> None:
    changed = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            changed.set()

    params = mcp_serve(rules_dir, "--user", "ann")
    async with Client(params, mode="legacy", message_handler=on_message) as c:
        assert c.server_capabilities.tools is not None
        assert c.server_capabilities.tools.list_changed
        assert [t.name for t in (await c.list_tools()).tools] == NOT_ADMIN
        (rules_dir / "more.yaml").write_text(
            "rules:\n  - id: echo\n    tool: {description: Echo.}\n"
            "    steps:\n      - {plugin: ADJUST, input: echoed}\n",
            encoding="utf-8",
        )
        await asyncio.wait_for(changed.wait(), 20)
        assert [t.name for t in (await c.list_tools()).tools] == ["broken", "echo", "weather"]
        assert text(await c.call_tool("echo", {})) == "echoed"
