"""``/mcp`` on a served daemon's listener: the SDK's streamable HTTP client, behind the API keys.

The caller is the key's identity (``key:`` + 12 hex digits of its SHA-256, on PLATFORM
``mcp``) or the ``X-Tmy-User`` header, as on ``/v1/*``; a missing or wrong key is a 401
and nothing runs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.mcpserve.conftest import ADMIN, NOT_ADMIN, RULES
from tmy.adapters.openai.payload import key_identity
from tmy.executors.registry import ExecutorSpec
from tmy.extension import Extension
from tmy.mcpserve import limits
from tmy.testing.bot import default_extensions
from tmy.testing.serving import Daemon, serving

pytestmark = pytest.mark.slow  # a served daemon on a loopback port
KEY, OTHER = "mcp-test-key-0123", "mcp-test-key-4567"
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


@asynccontextmanager
async def mcp_client(daemon: Daemon, mode: str = "auto", **headers: str) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers=headers) as http:
        transport = streamable_http_client(f"{daemon.url}/mcp", http_client=http)
        async with Client(transport, mode=mode) as client:  # type: ignore[arg-type]
            yield client


def text(result: Any) -> str:
    return "".join(part.text for part in result.content)


@asynccontextmanager
async def daemon(**fields: Any) -> AsyncIterator[Daemon]:
    keys = fields.pop("keys", (KEY, OTHER))
    admins = fields.pop("admins", (f"mcp:{key_identity(OTHER)}",))
    async with serving({"t.yaml": RULES}, http_api_keys=keys, admins=admins, **fields) as d:
        yield d


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # the 2026 protocol, and the handshake
async def test_a_key_lists_and_calls_the_tool_rules_as_its_identity(mode: str) -> None:
    async with daemon() as d, mcp_client(d, mode, Authorization=f"Bearer {KEY}") as c:
        assert [t.name for t in (await c.list_tools()).tools] == NOT_ADMIN
        result = await c.call_tool("weather", {"city": "Oslo"})
        assert text(result) == f"Sunny in Oslo for {key_identity(KEY)}@mcp"
        refused = await c.call_tool("wipe_all", {})
        assert refused.is_error and "admin_only" in text(refused)
        assert await d.var("wiped") == 0  # it never ran


async def test_the_admins_key_and_a_named_user() -> None:
    async with daemon() as d:
        async with mcp_client(d, "legacy", Authorization=f"Bearer {OTHER}") as c:
            assert [t.name for t in (await c.list_tools()).tools] == ADMIN
            assert text(await c.call_tool("wipe_all", {})) == "wiped 1 times"
        headers = {"Authorization": f"Bearer {KEY}", "X-Tmy-User": "ann"}
        async with mcp_client(d, **headers) as c:
            result = await c.call_tool("weather", {"city": "Rome"})
            assert text(result) == "Sunny in Rome for ann@mcp"


async def test_no_key_or_a_wrong_key_is_401_and_nothing_runs() -> None:
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
    call["params"] = {"name": "weather", "arguments": {"city": "x"}}  # type: ignore[assignment]
    async with daemon() as d, httpx.AsyncClient(base_url=d.url) as http:
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic x"}):
            for body in (LIST, call):
                r = await http.post("/mcp", json=body, headers=headers)
                assert r.status_code == 401, r.text
                assert r.headers["WWW-Authenticate"].startswith("Bearer")
                assert r.json()["error"]["message"] in (
                    "missing API key: send 'Authorization: Bearer <key>'",
                    "invalid API key",
                )
        r = await http.get("/mcp", headers={"Accept": "text/event-stream"})
        assert r.status_code == 401
        with pytest.raises(BaseExceptionGroup) as refused:  # the SDK client cannot even connect
            async with mcp_client(d, Authorization="Bearer nope"):
                pass
        assert refused.group_contains(MCPError, match="invalid API key")


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream"}


async def opened_session(http: httpx.AsyncClient, key: str) -> str:
    r = await http.post("/mcp", json=INIT, headers={**ACCEPT, "Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    return r.headers["Mcp-Session-Id"]


async def test_a_session_belongs_to_the_key_that_opened_it() -> None:
    async with daemon() as d, httpx.AsyncClient(base_url=d.url) as http:
        session = await opened_session(http, KEY)
        borrowed = {
            **ACCEPT,
            "Authorization": f"Bearer {OTHER}",
            "Mcp-Session-Id": session,
            "Mcp-Protocol-Version": "2025-11-25",
        }
        r = await http.post("/mcp", json=LIST, headers=borrowed)
        assert r.status_code == 404


async def test_an_event_stream_holds_no_slot_and_ends_when_its_client_leaves() -> None:
    async with daemon() as d, httpx.AsyncClient(base_url=d.url) as http:
        session = await opened_session(http, KEY)
        headers = {
            "Accept": "text/event-stream",
            "Authorization": f"Bearer {KEY}",
            "Mcp-Session-Id": session,
            "Mcp-Protocol-Version": "2025-11-25",
        }
        async with http.stream("GET", "/mcp", headers=headers) as stream:
            assert stream.status_code == 200
            assert stream.headers["Content-Type"].startswith("text/event-stream")
            assert d.http.in_flight == 0  # long-lived: bounded by connections, not slots
            assert d.http.health()["connections"]["busy"] == 1
        for _ in range(100):  # the bridge notices the closed connection within a second
            if d.http.health()["connections"]["busy"] == 0:
                break
            await asyncio.sleep(0.05)
        assert d.http.health()["connections"]["busy"] == 0


async def test_without_keys_the_route_is_open_as_v1_is() -> None:
    async with daemon(keys=()) as d, mcp_client(d) as c:
        result = await c.call_tool("weather", {"city": "Oslo"})
        assert text(result).startswith("Sunny in Oslo for anonymous-ephemeral-")


HOLD_RULES = """
rules:
  - id: hold
    tool: {description: "Waits until the test lets it go."}
    steps:
      - {plugin: HOLD}
"""


def holding(started: asyncio.Event, release: asyncio.Event) -> Extension:
    async def hold(value: Any, cfg: dict[str, Any], ctx: Any) -> str:
        started.set()
        await release.wait()
        return "held to the end"

    return Extension("hold", executors=lambda settings: (ExecutorSpec("HOLD", hold),))


async def test_closing_lets_a_call_in_flight_finish() -> None:
    started, release = asyncio.Event(), asyncio.Event()
    extensions = (*default_extensions(), holding(started, release))
    served = serving({"t.yaml": HOLD_RULES}, extensions=extensions)
    d = await served.__aenter__()
    async with mcp_client(d, "legacy") as c:  # its call runs in the session's task
        await c.list_tools()  # else the client lists them after the call, from a closed daemon
        call = asyncio.create_task(c.call_tool("hold", {}))
        await asyncio.wait_for(started.wait(), 10)
        closing = asyncio.create_task(served.__aexit__(None, None, None))
        await asyncio.sleep(0.2)
        assert not closing.done()  # waiting for the call
        release.set()
        result = await asyncio.wait_for(call, 10)
    assert (text(result), result.is_error) == ("held to the end", False)
    await asyncio.wait_for(closing, 10)


async def test_a_named_user_never_makes_a_key_an_admin() -> None:
    """X-Tmy-User names who a key speaks as; admin rights come from the key alone: a key that
    is no admin's cannot claim the admin key's identity, or a user admins: names."""
    async with daemon(admins=(f"mcp:{key_identity(OTHER)}", "mcp:boss")) as d:
        for claimed in (key_identity(OTHER), "boss"):
            headers = {"Authorization": f"Bearer {KEY}", "X-Tmy-User": claimed}
            async with mcp_client(d, "legacy", **headers) as c:
                assert [t.name for t in (await c.list_tools()).tools] == NOT_ADMIN
                refused = await c.call_tool("wipe_all", {})
                assert refused.is_error and "admin_only" in text(refused)
        assert await d.var("wiped") == 0
        headers = {"Authorization": f"Bearer {OTHER}", "X-Tmy-User": "ann"}
        async with mcp_client(d, "legacy", **headers) as c:  # the admin's key, as ann
            assert text(await c.call_tool("wipe_all", {})) == "wiped 1 times"


async def test_without_keys_no_caller_is_an_admin() -> None:
    claimed = {"X-Tmy-User": "boss"}
    async with daemon(keys=(), admins=("mcp:boss",)) as d, mcp_client(d, **claimed) as c:
        assert [t.name for t in (await c.list_tools()).tools] == NOT_ADMIN


def session_headers(key: str, session: str, **more: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {key}",
        "Mcp-Session-Id": session,
        "Mcp-Protocol-Version": "2025-11-25",
        **more,
    }


async def test_one_key_cannot_take_every_session(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "SESSIONS_PER_KEY", 2)
    async with daemon() as d, httpx.AsyncClient(base_url=d.url) as http:
        first = await opened_session(http, KEY)
        await opened_session(http, KEY)
        r = await http.post("/mcp", json=INIT, headers={**ACCEPT, "Authorization": f"Bearer {KEY}"})
        assert r.status_code == 503 and "sessions for this API key" in r.text
        assert r.headers["Retry-After"]
        await opened_session(http, OTHER)  # another key still gets one
        r = await http.delete("/mcp", headers=session_headers(KEY, first))
        assert r.status_code == 200
        await opened_session(http, KEY)  # a closed session frees its place


async def test_event_streams_are_capped_far_below_the_listeners_connections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stream is a busy connection the listener's guard never closes: without a cap, one
    client's streams could fill max_connections and lock every other client out."""
    monkeypatch.setattr(limits, "STREAMS", 3)
    monkeypatch.setattr(limits, "STREAMS_PER_KEY", 2)
    accept = {"Accept": "text/event-stream"}
    async with contextlib.AsyncExitStack() as stack:
        d = await stack.enter_async_context(daemon())
        http = await stack.enter_async_context(httpx.AsyncClient(base_url=d.url))
        sessions = [await opened_session(http, key) for key in (KEY, KEY, KEY, OTHER, OTHER)]
        owners = [KEY, KEY, KEY, OTHER, OTHER]
        statuses = []
        for key, session in zip(owners, sessions, strict=True):
            headers = session_headers(key, session, **accept)
            stream = await stack.enter_async_context(http.stream("GET", "/mcp", headers=headers))
            statuses.append(stream.status_code)
            if stream.status_code == 503:
                assert "event streams" in (await stream.aread()).decode()
        assert statuses == [200, 200, 503, 200, 503]  # KEY's share, then the total
        assert d.http.health()["connections"]["busy"] == 3
