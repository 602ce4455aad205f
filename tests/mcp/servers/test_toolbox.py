"""The toolbox test server answers the SDK's own client over stdio, streamable HTTP and SSE —
so a failing tmy MCP test points at tmy, not at the server it talks to."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.sse import sse_client

from tests.mcp.conftest import TOOLBOX_TOOLS, HttpToolbox, StdioToolbox
from tests.mcp.servers.toolbox import STRUCTURED

pytestmark = pytest.mark.slow


async def _names(client: Client) -> list[str]:
    return sorted(tool.name for tool in (await client.list_tools()).tools)


async def _basics(client: Client) -> None:
    assert await _names(client) == TOOLBOX_TOOLS
    echoed = await client.call_tool("echo", {"text": "hello"})
    assert [block.text for block in echoed.content] == ["hello"]  # type: ignore[union-attr]
    summed = await client.call_tool("add", {"a": 2, "b": 3})
    assert [block.text for block in summed.content] == ["5"]  # type: ignore[union-attr]
    structured = await client.call_tool("structured", {})
    assert structured.content == [] and structured.structured_content == STRUCTURED
    picture = await client.call_tool("picture", {})
    assert [(block.type, block.mime_type) for block in picture.content] == [("image", "image/png")]  # type: ignore[union-attr]
    failed = await client.call_tool("fail", {"message": "nope"})
    assert failed.is_error and "nope" in failed.content[0].text  # type: ignore[union-attr]


def _stdio(box: StdioToolbox) -> StdioServerParameters:
    config = box.config
    return StdioServerParameters(command=config["command"], args=config["args"], env=config["env"])


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_stdio_answers_the_sdk_client(toolbox_stdio: StdioToolbox, mode: str) -> None:
    async with Client(_stdio(toolbox_stdio), mode=mode) as client:  # type: ignore[arg-type]
        await _basics(client)
        pid = int((await client.call_tool("whoami", {})).content[0].text)  # type: ignore[union-attr]
    assert [call["tool"] for call in toolbox_stdio.calls()] == [
        "echo", "add", "structured", "picture", "fail", "whoami"
    ]  # fmt: skip
    assert toolbox_stdio.calls()[0] == {"tool": "echo", "arguments": {"text": "hello"}, "pid": pid}


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_http_answers_the_sdk_client(toolbox_http: HttpToolbox, mode: str) -> None:
    async with Client(toolbox_http.url, mode=mode) as client:  # type: ignore[arg-type]
        await _basics(client)
        pid = int((await client.call_tool("whoami", {})).content[0].text)  # type: ignore[union-attr]
    assert pid == toolbox_http.pid
    assert toolbox_http.config == {"url": toolbox_http.url, "timeout": toolbox_http.timeout}


async def test_sse_answers_the_sdk_client(toolbox_sse: HttpToolbox) -> None:
    async with Client(sse_client(toolbox_sse.url), mode="legacy") as client:
        await _basics(client)


async def test_restart_serves_again_on_the_same_url(toolbox_http: HttpToolbox) -> None:
    before = toolbox_http.pid
    await toolbox_http.restart()
    assert toolbox_http.pid != before
    async with Client(toolbox_http.url) as client:
        pid = int((await client.call_tool("whoami", {})).content[0].text)  # type: ignore[union-attr]
    assert pid == toolbox_http.pid
    assert {call["pid"] for call in toolbox_http.calls()} == {pid}


async def test_slow_hangs_and_is_logged_before_it_answers(toolbox_http: HttpToolbox) -> None:
    async with Client(toolbox_http.url) as client:
        with anyio.move_on_after(0.3):
            await client.call_tool("slow", {"seconds": 30})
            pytest.fail("slow answered")
    assert toolbox_http.calls()[0]["tool"] == "slow"


async def _grown_legacy(client_target: Any) -> list[str]:
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            changed.set()

    async with Client(client_target, mode="legacy", message_handler=on_message) as client:
        tools = client.server_capabilities.tools
        assert tools is not None and tools.list_changed
        await client.call_tool("grow", {})
        with anyio.fail_after(10):
            await changed.wait()
        return await _names(client)


async def test_grow_announces_the_change_on_a_handshake_connection(
    toolbox_stdio: StdioToolbox, toolbox_http: HttpToolbox
) -> None:
    assert await _grown_legacy(_stdio(toolbox_stdio)) == sorted([*TOOLBOX_TOOLS, "extra"])
    assert await _grown_legacy(toolbox_http.url) == sorted([*TOOLBOX_TOOLS, "extra"])


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_grow_announces_the_change_to_a_modern_listener(
    transport: str, toolbox_stdio: StdioToolbox, request: pytest.FixtureRequest
) -> None:
    target: Any = _stdio(toolbox_stdio)
    if transport == "http":
        target = request.getfixturevalue("toolbox_http").url
    async with Client(target, mode="2026-07-28") as client:
        async with client.listen(tools_list_changed=True) as subscription:
            await client.call_tool("grow", {})
            with anyio.fail_after(10):
                async for _event in subscription:
                    break
        assert "extra" in await _names(client)
        assert [block.text for block in (await client.call_tool("extra", {})).content] == ["extra!"]  # type: ignore[union-attr]
