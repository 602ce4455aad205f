"""Servers against real MCP servers (the toolbox, on the SDK's server side): over stdio, streamable
HTTP and SSE; crashes and restarts, a hanging tool, a tool list change, a server that cannot start,
and no process left behind."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.mcp.conftest import TOOLBOX, TOOLBOX_TOOLS, HttpToolbox
from tmy import logs, metrics
from tmy.mcp import connection
from tmy.mcp.config import parse_mcp
from tmy.mcp.servers import McpError, McpTimeout, Servers, ToolInfo

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# The toolbox, but without server/discover (as a server from before 2026), so a client falls back
# to the initialize handshake: a stateful streamable HTTP session with Mcp-Session-Id (and, over
# stdio, notifications/tools/list_changed instead of subscriptions/listen).
LEGACY = textwrap.dedent(
    f"""
    import sys
    sys.path.insert(0, {str(ROOT)!r})
    import anyio
    import mcp_types as types
    from mcp.shared.exceptions import MCPError
    from tests.mcp.servers import toolbox

    server = toolbox.build()

    async def discover(ctx, params):
        raise MCPError(types.METHOD_NOT_FOUND, "Method not found")

    server._lowlevel_server.add_request_handler("server/discover", types.RequestParams, discover)
    async def stdio():
        from mcp.server.runner import serve_loop  # the handshake-only loop
        from mcp.server.stdio import stdio_server

        low = server._lowlevel_server
        async with stdio_server() as (read, write), low.lifespan(low) as state:
            options = low.create_initialization_options()
            await serve_loop(low, read, write, lifespan_state=state, init_options=options)

    if sys.argv[1] == "stdio":
        anyio.run(stdio)
    else:
        anyio.run(toolbox.serve_http, server, "http", int(sys.argv[2]))
    """
)


# A server on the SDK's low-level Server that hands its seven tools out three per page.
PAGED = textwrap.dedent(
    """
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    TOOLS = [
        types.Tool(name=f"t{i}", description=f"tool {i}", input_schema={"type": "object"})
        for i in range(7)
    ]

    async def list_tools(ctx, params):
        start = int(params.cursor) if params is not None and params.cursor else 0
        after = str(start + 3) if start + 3 < len(TOOLS) else None
        return types.ListToolsResult(tools=TOOLS[start : start + 3], next_cursor=after)

    async def call_tool(ctx, params):
        ran = types.TextContent(type="text", text="ran " + params.name)
        return types.CallToolResult(content=[ran])

    server = Server("paged", on_list_tools=list_tools, on_call_tool=call_tool)

    async def main():
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
    """
)


def servers(**entries: dict[str, Any]) -> Servers:
    return Servers(parse_mcp({"servers": entries}))


async def until(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.02)


def children() -> set[int]:
    """Pids of this process's live children (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            found.add(int(entry.name))
    return found


@contextlib.contextmanager
def logged(path: Path) -> Iterator[list[dict[str, Any]]]:
    """The log's events (info and up) while the block runs, parsed, in the list yielded."""
    events: list[dict[str, Any]] = []
    logs.configure("info", file=path)
    try:
        yield events
    finally:
        logs.flush()
        logs.configure("warning")
        events.extend(json.loads(line) for line in path.read_text().splitlines() if line)


def sample(name: str, **labels: str) -> float:
    body, _ = metrics.render()
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return s.value
    return 0.0


async def pid_of(s: Servers, name: str) -> int:
    return int((await s.call(name, "whoami", {})).text)


@pytest.fixture
def legacy_script(tmp_path: Path) -> Path:
    script = tmp_path / "legacy_toolbox.py"
    script.write_text(LEGACY, encoding="utf-8")
    return script


class LegacyHttpToolbox(HttpToolbox):
    """The toolbox over streamable HTTP, handshake era only (sessions with Mcp-Session-Id)."""

    script: Path = Path()

    def command(self) -> list[str]:
        return [sys.executable, str(self.script), "http", str(self.port)]


@pytest.fixture
def legacy_http(tmp_path: Path, legacy_script: Path) -> Iterator[LegacyHttpToolbox]:
    directory = tmp_path / "legacy-http"
    directory.mkdir()
    box = LegacyHttpToolbox(directory)
    box.script = legacy_script
    box.start_now()
    try:
        yield box
    finally:
        box.kill_now()


# -- connecting and listing -----------------------------------------------------------------


async def test_stdio_connects_lists_and_calls(toolbox_stdio) -> None:
    ok_before = sample("tmy_mcp_calls_total", server="box", outcome="ok")
    async with servers(box=toolbox_stdio.config) as s:
        assert s.names() == ["box"]
        assert s.state("box")["state"] == "starting"
        assert s.tools("box") is None
        await s.wait_listed(20)
        state = s.state("box")
        assert state | {"since": 0} == {
            "state": "connected",
            "transport": "stdio",
            "tools": len(TOOLBOX_TOOLS),
            "error": None,
            "since": 0,
            "reconnects": 0,
        }
        tools = s.tools("box")
        assert sorted(t.name for t in tools) == TOOLBOX_TOOLS
        echo = next(t for t in tools if t.name == "echo")
        assert echo == ToolInfo("box", "echo", "Say the text back.", echo.input_schema)
        assert echo.input_schema["properties"]["text"]["type"] == "string"
        result = await s.call("box", "echo", {"text": "hello"})
        assert (result.text, result.is_error) == ("hello", False)
        assert result.content == ({"type": "text", "text": "hello"},)
        assert toolbox_stdio.calls()[-1]["arguments"] == {"text": "hello"}
        assert sample("tmy_mcp_server_up", server="box") == 1
        picture = await s.call("box", "picture", {})
        assert picture.text == "[image image/png, 69 B]"
        structured = await s.call("box", "structured", {})
        assert structured.text == '{"answer":42,"unit":"widgets"}'
        failed = await s.call("box", "fail", {"message": "boom"})
        assert failed.is_error and "boom" in failed.text
    assert sample("tmy_mcp_calls_total", server="box", outcome="ok") - ok_before == 3
    assert sample("tmy_mcp_calls_total", server="box", outcome="tool_error") >= 1
    assert sample("tmy_mcp_server_up", server="box") == 0


async def test_streamable_http_and_sse_connect_list_and_call(toolbox_http, toolbox_sse) -> None:
    async with servers(web=toolbox_http.config, old=toolbox_sse.config) as s:
        await s.wait_listed(20)
        for name, transport in (("web", "http"), ("old", "sse")):
            assert s.state(name)["state"] == "connected", s.state(name)
            assert s.state(name)["transport"] == transport
            assert sorted(t.name for t in s.tools(name)) == TOOLBOX_TOOLS
            assert (await s.call(name, "add", {"a": 2, "b": 3})).text == "5"
        assert await pid_of(s, "web") == toolbox_http.pid
        assert await pid_of(s, "old") == toolbox_sse.pid


async def test_unknown_servers_and_tools_are_named() -> None:
    async with servers() as s:
        await s.wait_listed(1)
        with pytest.raises(McpError, match=r"unknown MCP server 'gh' \(none is configured\)"):
            await s.call("gh", "x", {})
    async with servers(github={"command": sys.executable, "args": [str(TOOLBOX), "stdio"]}) as s:
        with pytest.raises(
            McpError, match=r"unknown MCP server 'githb' \(did you mean 'github'\?\)"
        ):
            s.state("githb")
        await s.wait_listed(20)
        result = await s.call("github", "ecko", {"text": "x"})  # the server's answer: a tool error
        assert result.is_error and "ecko" in result.text


async def test_every_page_of_tools_is_listed(tmp_path) -> None:
    script = tmp_path / "paged.py"
    script.write_text(PAGED, encoding="utf-8")
    async with servers(paged={"command": sys.executable, "args": [str(script)]}) as s:
        await s.wait_listed(20)
        assert [t.name for t in s.tools("paged")] == [f"t{i}" for i in range(7)]
        assert (await s.call("paged", "t6", {})).text == "ran t6"


# -- failures -------------------------------------------------------------------------------


async def test_a_server_that_cannot_start_fails_alone_and_calls_to_it_fail_fast(tmp_path) -> None:
    secret = "h1a-never-shown-secret"
    with logged(tmp_path / "tmy.log") as events:
        async with servers(
            missing={"command": str(tmp_path / "no-such-program"), "env": {"API_TOKEN": secret}},
            dies={"command": sys.executable, "args": ["-c", "import sys; sys.exit(3)"]},
        ) as s:
            await s.wait_listed(20)
            missing, dies = s.state("missing"), s.state("dies")
            assert missing["state"] == dies["state"] == "failed"
            assert "No such file or directory" in missing["error"]
            assert "no-such-program" in missing["error"]
            assert dies["error"].startswith("the server closed the connection during the handshake")
            assert secret not in str(missing) + str(dies)
            assert s.tools("missing") is None
            started = time.monotonic()
            with pytest.raises(McpError, match=r"MCP server 'missing' is not connected \(failed: "):
                await s.call("missing", "echo", {"text": "x"})
            assert time.monotonic() - started < 1.0  # no waiting for a server that is down
            assert sample("tmy_mcp_server_up", server="missing") == 0
            assert sample("tmy_mcp_calls_total", server="missing", outcome="down") >= 1
    failed = {e["server"] for e in events if e["event"] == "mcp.connect_failed"}
    assert failed == {"missing", "dies"}
    assert secret not in json.dumps(events)


async def test_a_hanging_tool_times_out_and_the_server_keeps_serving(toolbox_stdio) -> None:
    config = toolbox_stdio.config | {"timeout": 1}
    async with servers(box=config) as s:
        await s.wait_listed(20)
        hanging = asyncio.create_task(s.call("box", "slow", {"seconds": 30}))
        assert (await s.call("box", "echo", {"text": "meanwhile"})).text == "meanwhile"
        with pytest.raises(McpTimeout) as caught:
            await hanging
        assert str(caught.value) == "MCP server 'box': tool 'slow' did not answer within 1 s"
        with pytest.raises(McpTimeout, match=r"tool 'slow' did not answer within 0.5 s"):
            await s.call("box", "slow", {"seconds": 30}, timeout=0.5)
        assert (await s.call("box", "slow", {"seconds": 0.01}, timeout=5)).text == "slept 0.01"
        assert (await s.call("box", "echo", {"text": "after"})).text == "after"
        assert s.state("box")["state"] == "connected"
        assert s.state("box")["reconnects"] == 0
    assert sample("tmy_mcp_calls_total", server="box", outcome="timeout") >= 2


# -- crashes and restarts -------------------------------------------------------------------


async def test_a_killed_stdio_server_is_started_again(toolbox_stdio) -> None:
    before = sample("tmy_mcp_reconnects_total", server="box")
    async with servers(box=toolbox_stdio.config) as s:
        await s.wait_listed(20)
        first = await pid_of(s, "box")
        os.kill(first, signal.SIGKILL)
        await until(lambda: s.state("box")["reconnects"] == 1)
        await until(lambda: s.state("box")["state"] == "connected")
        second = await pid_of(s, "box")
        assert second != first
        assert (await s.call("box", "echo", {"text": "back"})).text == "back"
    assert sample("tmy_mcp_reconnects_total", server="box") - before == 1


async def test_a_restarted_http_server_answers_the_next_call(toolbox_http) -> None:
    async with servers(web=toolbox_http.config) as s:
        await s.wait_listed(20)
        assert await pid_of(s, "web") == toolbox_http.pid
        await toolbox_http.restart()
        assert await pid_of(s, "web") == toolbox_http.pid


async def test_an_expired_http_session_is_replaced_and_the_call_sent_again(legacy_http) -> None:
    """A handshake-era server restarted forgets its sessions: the next call is answered 404 for
    its Mcp-Session-Id; a new session is started and the call (which never ran) sent once more."""
    async with servers(web=legacy_http.config) as s:
        await s.wait_listed(20)
        assert await pid_of(s, "web") == legacy_http.pid
        await legacy_http.restart()
        assert await pid_of(s, "web") == legacy_http.pid
        assert [c["tool"] for c in legacy_http.calls()] == ["whoami", "whoami"]  # no lost call
        assert s.state("web")["reconnects"] == 1


async def test_calls_to_a_down_http_server_fail_fast_until_it_is_back(toolbox_http) -> None:
    async with servers(web=toolbox_http.config) as s:
        await s.wait_listed(20)
        await toolbox_http.kill()
        with pytest.raises(McpError, match=r"MCP server 'web'"):
            await s.call("web", "echo", {"text": "x"})
        # reconnecting: first with the broken stream's error (ReadError), then, once an
        # attempt to connect again has failed, with that one's (a slow machine shows both)
        await until(
            lambda: (
                s.state("web")["state"] == "reconnecting"
                and "ConnectError" in (s.state("web")["error"] or "")
            )
        )
        started = time.monotonic()
        with pytest.raises(McpError, match=r"'web' is not connected \(reconnecting: ConnectError"):
            await s.call("web", "echo", {"text": "x"})
        assert time.monotonic() - started < 1.0
        await toolbox_http.start()
        await until(lambda: s.state("web")["state"] == "connected")
        assert (await s.call("web", "echo", {"text": "back"})).text == "back"
        assert s.state("web")["reconnects"] == 1


async def test_a_dead_http_server_is_noticed_without_a_call(toolbox_http) -> None:
    """2026-07-28: the change subscription ends with the server; the re-list that follows fails."""
    async with servers(web=toolbox_http.config) as s:
        await s.wait_listed(20)
        await toolbox_http.kill()
        await until(lambda: s.state("web")["state"] == "reconnecting")
        await toolbox_http.start()
        await until(lambda: s.state("web")["state"] == "connected")
        assert await pid_of(s, "web") == toolbox_http.pid


async def test_a_dead_handshake_era_http_server_is_noticed_without_a_call(
    legacy_http, monkeypatch
) -> None:
    """Its event stream gives up quietly; the periodic re-list notices (and the restart)."""
    monkeypatch.setattr(connection, "PROBE_INTERVAL", 0.2)
    async with servers(web=legacy_http.config) as s:
        await s.wait_listed(20)
        await legacy_http.kill()
        await until(lambda: s.state("web")["state"] == "reconnecting")
        await legacy_http.start()
        await until(lambda: s.state("web")["state"] == "connected")
        assert await pid_of(s, "web") == legacy_http.pid


# -- tool list changes ----------------------------------------------------------------------


@pytest.mark.parametrize("era", ["2026-07-28", "handshake"])
async def test_a_tool_list_change_is_picked_up_over_stdio(
    toolbox_stdio, legacy_script, era, tmp_path
) -> None:
    config = toolbox_stdio.config
    if era == "handshake":  # notifications/tools/list_changed instead of subscriptions/listen
        config["args"] = [str(legacy_script), "stdio"]
    changed: list[str] = []
    with logged(tmp_path / "tmy.log") as events:
        async with servers(box=config) as s:
            s.on_tools_changed(changed.append)
            await s.wait_listed(20)
            assert changed == ["box"]
            assert (await s.call("box", "grow", {})).text == "grown"
            await until(lambda: "extra" in [t.name for t in s.tools("box")])
            assert changed == ["box", "box"]
            assert (await s.call("box", "extra", {})).text == "extra!"
    connected = next(e for e in events if e["event"] == "mcp.connected")
    assert connected["protocol"] == ("2025-11-25" if era == "handshake" else era)
    changes = [e for e in events if e["event"] == "mcp.tools_changed"]
    assert [(e["added"], e["removed"]) for e in changes] == [(TOOLBOX_TOOLS, []), (["extra"], [])]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_change_right_after_the_first_listing_is_picked_up(
    toolbox_stdio, tmp_path, transport
) -> None:
    """The toolbox grows as soon as it has answered the first tools/list, before tmy's change
    subscription is open: its announcement reaches no one, the re-list on subscribing sees it."""
    if transport == "stdio":
        config = toolbox_stdio.config
        config["env"]["TOOLBOX_GROW_ON_LIST"] = "1"
        box = None
    else:
        box = HttpToolbox(tmp_path, env={"TOOLBOX_GROW_ON_LIST": "1"})
        await box.start()
        config = box.config
    try:
        async with servers(box=config) as s:
            await s.wait_listed(20)
            await until(lambda: "extra" in [t.name for t in s.tools("box")])
            assert (await s.call("box", "extra", {})).text == "extra!"
    finally:
        if box is not None:
            await box.kill()


async def test_a_tool_list_change_is_picked_up_over_http(toolbox_http, legacy_http) -> None:
    async with servers(web=toolbox_http.config, old=legacy_http.config) as s:
        await s.wait_listed(20)
        for name in ("web", "old"):
            await s.call(name, "grow", {})
            await until(lambda n=name: "extra" in [t.name for t in s.tools(n)])


# -- stopping -------------------------------------------------------------------------------


async def test_stop_leaves_no_process_behind(toolbox_stdio) -> None:
    before = children()
    config = toolbox_stdio.config | {"timeout": 30}
    async with servers(a=config, b=config) as s:
        await s.wait_listed(20)
        pids = {await pid_of(s, "a"), await pid_of(s, "b")}
        assert pids <= children() - before
        hanging = asyncio.create_task(s.call("a", "slow", {"seconds": 60}))
        await asyncio.sleep(0.2)
    assert not (children() - before)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    with pytest.raises(McpError, match="connection closed"):
        await hanging


async def test_stop_while_a_server_is_still_starting(tmp_path) -> None:
    """A server that never answers the handshake is stopped too (no process left)."""
    before = children()
    mute = {"command": sys.executable, "args": ["-c", "import time; time.sleep(60)"], "timeout": 30}
    async with servers(mute=mute) as s:
        await until(lambda: bool(children() - before))
        assert s.state("mute")["state"] == "starting"
    assert not (children() - before)


async def test_a_json_answer_past_the_bound_fails_its_call_alone(toolbox_http: HttpToolbox) -> None:
    """The SDK reads a JSON answer whole: one of 20 MB is cut off at 16 MB, not held."""
    toolbox_http.env.update(TOOLBOX_BIG="1", TOOLBOX_JSON="1")
    await toolbox_http.restart()
    async with servers(web=toolbox_http.config) as s:
        await s.wait_listed(20)
        assert len((await s.call("web", "big", {"megabytes": 1})).text) > 50_000  # cut to 50,000
        with pytest.raises(McpError, match="passed 16 MB"):
            await s.call("web", "big", {"megabytes": 20})
        assert (await s.call("web", "echo", {"text": "still here"})).text == "still here"
