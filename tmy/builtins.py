"""The built-in extensions, listed in one tuple, and the extensions an app is given.

The app is *given* its extensions (as Starlette is given ``routes=``); it never
imports this module. The CLI and :mod:`tmy.testing` pass :func:`extensions`:
the built-ins below plus every package installed under the entry-point group
``tmy.extensions`` (:func:`tmy.extension.installed_extensions`).
"""

from __future__ import annotations

from tmy import backup, commands, cron, knowledge, llm, memory
from tmy.extension import Extension, check_unique, installed_extensions
from tmy.mcp import EXTENSION as MCP
from tmy.mcpserve import EXTENSION as MCPSERVE

BUILTINS: tuple[Extension, ...] = (
    commands.CORE,
    cron.EXTENSION,
    llm.EXTENSION,
    memory.EXTENSION,
    MCP,
    backup.EXTENSION,
    knowledge.EXTENSION,
    MCPSERVE,
)
"""Core commands, cron, the LLM answerer, memory, MCP servers as tools, backup, the knowledge
base and tmy's own MCP server (/mcp), in the order the app installs them.

Memory, MCP and the knowledge base come after the LLM answerer: their lifespans plug recall,
the MCP servers' tools and the knowledge base into the LLM runtime."""


def extensions() -> tuple[Extension, ...]:
    """The built-ins plus the installed extensions; two claiming the same name is a ConfigError."""
    found = (*BUILTINS, *installed_extensions())
    check_unique(found)
    return found
