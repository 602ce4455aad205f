"""A bot whose MCP servers include its own ``/mcp``: a tool rule whose LLM step calls that same
tool through MCP goes round one HTTP request deeper each time — cut off at MAX_HOPS."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from tests.mcp.conftest import mcp_sections
from tests.support.llm_fake_provider import FakeProvider, Reply
from tests.support.llm_helpers import on
from tmy.llm import runtime_of
from tmy.mcp import hops
from tmy.testing.serving import serving

pytestmark = pytest.mark.slow  # a served daemon calling itself over loopback

RULES = """
rules:
  - id: loop
    triggers: ["loop *"]
    tool: {description: "Asks the model, which calls this tool again."}
    steps:
      - plugin: LLM
        tools: ["mcp:self/*"]
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def always_call_again(body: dict[str, Any]) -> Reply:
    """A model that calls self__loop unless it has a tool's answer, which it says back."""
    answers = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    if answers:
        return Reply(f"got: {answers[-1]}")
    return Reply(None, tool_calls=[{"name": "self__loop", "arguments": {}}])


async def test_a_bot_calling_itself_through_mcp_stops_at_max_hops(provider: FakeProvider) -> None:
    provider.default = always_call_again
    port = free_port()
    me = {"url": f"http://127.0.0.1:{port}/mcp", "timeout": 20}
    async with serving(
        {"t.yaml": RULES},
        http_listen=f"127.0.0.1:{port}",
        sections=mcp_sections({"self": me}),
        llm=on(provider),
    ) as daemon:
        source = runtime_of(daemon.engine.services).tool_sources["mcp"]
        async with asyncio.timeout(30):
            while "self/loop" not in [t.name for t in source.offered()]:
                await asyncio.sleep(0.05)
            reply = await daemon.push("loop go")
    assert reply.error is None, reply.error
    assert "refused" in reply.text and "MCP calls in a row" in reply.text, reply.text
    first_asks = [b for b in provider.seen() if not any(m["role"] == "tool" for m in b["messages"])]
    assert len(first_asks) == hops.MAX_HOPS + 1  # the message's own run, then one per hop
