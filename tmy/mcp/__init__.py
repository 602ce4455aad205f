"""MCP servers as tools: tmy as an MCP *client* (issue 25).

Configured under ``mcp: {servers: {NAME: {command, args, env, cwd, timeout} | {url,
headers, transport, timeout}}}`` (:mod:`tmy.mcp.config`), kept connected by
:mod:`tmy.mcp.servers`, reached by rules through the ``MCP`` step
(:mod:`tmy.mcp.executor`) and by LLM steps through ``tools: ["mcp:SERVER/*"]``
(:mod:`tmy.mcp.source`); :data:`EXTENSION` (:mod:`tmy.mcp.extension`) states all of it.
"""

from __future__ import annotations

from tmy.mcp.extension import EXTENSION
from tmy.mcp.runtime import McpRuntime, mcp_of

__all__ = ["EXTENSION", "McpRuntime", "mcp_of"]
