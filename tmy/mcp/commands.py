"""The operator command ``mcp``: the configured MCP servers, their state and their tools.

``python run.py mcp list`` (``.tmy mcp`` in chat, ``mcp`` over the HTTP admin API)
prints each server — transport, state, how many tools, reconnects, the last error —
and its tools, then the tool names the rules use that the servers do not have
(:func:`tmy.mcp.checks.tool_warnings`, ``warning: file:line: …``). ``--json``
prints ``{"servers": {NAME: {state…, "tool_names": […]}}, "warnings": […]}``.

On the CLI the app opening started the servers and waited for their lists
(:mod:`tmy.mcp.runtime`); in a running daemon it shows them as they are now.
Nothing of a server's ``env`` or ``headers`` is shown.
"""

from __future__ import annotations

from typing import Any

from tmy import redact
from tmy.command import Arg, Command, Invocation, Result
from tmy.mcp.checks import tool_warnings
from tmy.mcp.runtime import McpRuntime, mcp_of

ACTIONS = ("list",)


def describe(runtime: McpRuntime) -> dict[str, Any]:
    """Every server's state and tool names (``data`` of the command, the console's rows)."""
    servers = {}
    for name, state in runtime.states().items():
        error = state.get("error")
        tools = runtime.tools(name)
        servers[name] = {
            **state,
            "error": redact.redact(error) if isinstance(error, str) else error,
            "tool_names": None if tools is None else sorted(t.name for t in tools),
        }
    return servers


def _listed(runtime: McpRuntime) -> Any:
    def listed(name: str) -> list[str] | None:
        tools = runtime.tools(name)
        return None if tools is None else [t.name for t in tools]

    return listed


def render(servers: dict[str, dict[str, Any]], warnings: list[str], compact: bool) -> str:
    """The text form: one line per server, its tools under it (not in chat), then warnings."""
    if not servers:
        return "no MCP servers are configured (mcp.servers in config/tmy.yaml)"
    lines = []
    for name, s in servers.items():
        count = "?" if s.get("tools") is None else str(s["tools"])
        line = f"{name}: {s.get('state')} ({s.get('transport')}), {count} tools"
        if s.get("reconnects"):
            line += f", {s['reconnects']} reconnects"
        if s.get("error"):
            line += f"; last error: {s['error']}"
        lines.append(line)
        if not compact:
            lines.extend(f"  {tool}" for tool in s.get("tool_names") or ())
    lines.extend(f"warning: {w}" for w in warnings)
    return "\n".join(lines)


async def run_mcp(inv: Invocation) -> Result:
    """``mcp list``: servers, state, tools, and the rules' unknown tool names."""
    assert inv.app is not None
    runtime = mcp_of(inv.app.engine.services)
    servers = describe(runtime)
    warnings = tool_warnings(inv.app.rulebook, _listed(runtime))
    data = {"servers": servers, "warnings": warnings}
    return Result(render(servers, warnings, inv.compact), data)


MCP = Command(
    name="mcp",
    help="MCP servers: state, tools, unknown tool names in the rules",
    run=run_mcp,
    args=(Arg("action", "list (the default)", required=False, choices=ACTIONS, default="list"),),
    usage="[list]",
    description="list the configured MCP servers: transport, state, tools, reconnects, last "
    "error; then the tool names the rules use that no server has",
    json_help="print {servers, warnings} as JSON",
)

COMMANDS = (MCP,)
