"""The MCP servers' tools as a tool source of the LLM answerer (``tools: ["mcp:github/*"]``).

The MCP extension's lifespan plugs one :class:`McpTools` into the app's LLM
runtime under the prefix ``mcp`` (``runtime_of(services).tools_from("mcp", …)``);
tmy.llm matches a step's ``tools:`` patterns against ``mcp:`` + each offered
name, shows the model ``SERVER__TOOL`` and calls :meth:`McpTools.call` with the
offered name when the model asks (tmy.llm never imports tmy.mcp: this object
meets its ``ToolSource`` protocol by shape).

* :meth:`offered` — every tool of every server whose list is known, as
  ``SERVER/TOOL``, with its description and its JSON Schema as the server gave
  it, sorted by name (a stable request prefix). A server that went down keeps
  its last list: the model still sees the tool, and a call answers that the
  server is down, instead of the tool set changing under the model.
* :meth:`call` — :meth:`Servers.call <tmy.mcp.servers.Servers.call>`; the
  result's text is what the model gets back (a tool's ``isError`` text too, as
  the error: the model reads what went wrong). In ``explain``'s dry run the tool
  is not called (:mod:`tmy.mcp.executor`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tmy.errors import ExecutorError
from tmy.llm.tools import OfferedTool
from tmy.mcp.executor import call, is_dry_run
from tmy.mcp.runtime import McpRuntime
from tmy.types import StepContext

PREFIX = "mcp"  # a step's tools: patterns name these tools "mcp:SERVER/TOOL"
DRY_RUN_ANSWER = "(dry run: the MCP tool {name} was not called; explain --run calls it)"


class McpTools:
    """The tool source over one app's MCP runtime (see the module docstring)."""

    def __init__(self, runtime: McpRuntime) -> None:
        self.runtime = runtime

    def offered(self) -> Sequence[OfferedTool]:
        """Every tool known right now, ``SERVER/TOOL``, sorted (none before the servers start)."""
        if not self.runtime.eager:  # a rule test's app: its LLM steps get no live tools
            return []
        found = []
        for server in self.runtime.names():
            for tool in self.runtime.tools(server) or ():
                name = f"{server}/{tool.name}"
                found.append(OfferedTool(name, tool.description, tool.input_schema))
        found.sort(key=lambda t: t.name)
        return found

    async def call(self, ctx: StepContext, name: str, arguments: dict[str, Any]) -> str:
        """Call ``SERVER/TOOL``; the text the model gets back (ExecutorError on failure)."""
        server, slash, tool = name.partition("/")
        if not slash or not server or not tool:
            raise ExecutorError(f"MCP tool name {name!r} must be SERVER/TOOL")
        if is_dry_run(ctx):
            return DRY_RUN_ANSWER.format(name=name)
        result = await call(self.runtime, server, tool, dict(arguments or {}))
        if result.is_error:
            raise ExecutorError(result.text or f"MCP tool {name} failed (it said no more)")
        return result.text
