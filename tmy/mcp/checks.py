"""Names of MCP servers and tools the rules use, checked against what is configured and listed.

Two checks, at two moments:

* **server names, when the rules load** (``check``, ``serve``, a reload, rule
  tests): an ``MCP`` step naming a server ``mcp.servers`` does not configure is a
  rules error with file and line and a did-you-mean (:func:`tmy.mcp.executor.make_check`);
  so is an LLM step's ``tools: ["mcp:SERVER/…"]`` (tmy.llm's own load-time check).
* **tool names, once the servers have listed them** — a tool list exists only
  where a server runs, so this needs the servers up: :func:`tool_warnings` reports
  ``MCP`` steps naming a tool their server does not have, and entries of an LLM
  step's ``tools:`` that name one ``mcp:SERVER/TOOL`` (or deny it with ``!``) that
  does not exist — a typo in a deny entry would leave the tool allowed — each a
  ``file:line: …`` warning with a did-you-mean. The daemon logs them
  (``rules.warning``) once every server has listed its tools or failed
  (:func:`warn_when_listed`); ``run.py mcp list`` prints them;
  :func:`check_warnings` is what ``run.py check`` calls: it connects to the servers
  the rules name (no other), waits up to :data:`CHECK_WAIT` seconds for their lists
  and returns the warnings (plus one per server that did not list in time).

Entries with glob characters (``mcp:github/delete_*``) name no one tool: not checked here.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterator
from types import MappingProxyType
from typing import Any

from tmy.config import Settings
from tmy.hints import did_you_mean
from tmy.logs import get_logger
from tmy.mcp.config import McpConfig, config_of
from tmy.mcp.servers import Servers
from tmy.rulebook.model import Rule, Rulebook, Step
from tmy.values.compiled import Constant

log = get_logger("tmy.mcp")

CHECK_WAIT = 5.0  # seconds `check` waits at most for the servers to list their tools
_GLOB = frozenset("*?[")

Listed = Callable[[str], "list[str] | None"]
"""server name -> the names of its tools, None while not known (never listed / failed)."""


def tool_warnings(rulebook: Rulebook, listed: Listed) -> list[str]:
    """``file:line: …`` for every MCP tool name the rules use that its server does not have
    (checked for servers whose list is known; server names were checked at load)."""
    out = []
    for rule, step in _steps(rulebook):
        where = f"{step.file}:{step.line}: rule {rule.id!r} step {step.uri}"
        if step.spec.name == "MCP":
            server, tool = _const(step, "server"), _const(step, "tool")
            if isinstance(server, str) and isinstance(tool, str):
                problem = _tool_problem(server, tool, listed)
                if problem:
                    out.append(f"{where}: {problem}")
            continue
        for entry, name in _mcp_entries(_const(step, "tools")):
            server, _, tool = name.partition("/")
            problem = _tool_problem(server, tool, listed)
            if problem:
                out.append(f"{where}: tools: {entry!r}: {problem}")
    return out


def _tool_problem(server: str, tool: str, listed: Listed) -> str | None:
    """``server`` has no tool ``tool`` (globs in either: not a name, not checked), or None."""
    if _GLOB & set(server) or not tool or _GLOB & set(tool):
        return None
    tools = listed(server)
    if tools is None or tool in tools:
        return None
    return (
        f"MCP server {server!r} has no tool {tool!r}{did_you_mean(tool, tools)}; "
        f"its tools: {', '.join(sorted(tools)) or '(none)'}"
    )


def _steps(rulebook: Rulebook) -> Iterator[tuple[Rule, Step]]:
    for rule in rulebook.rules:
        for step in rule.steps:
            yield rule, step


def _const(step: Step, key: str) -> Any:
    value = step.options.get(key)
    return value.value if isinstance(value, Constant) else None


def _mcp_entries(tools: Any) -> Iterator[tuple[str, str]]:
    """Each ``mcp:…`` / ``!mcp:…`` entry of a ``tools:`` list, with its ``SERVER/TOOL`` part."""
    if not isinstance(tools, list):
        return
    for entry in tools:
        if isinstance(entry, str):
            text = entry.strip().removeprefix("!").strip()
            if text.startswith("mcp:"):
                yield entry, text[len("mcp:") :]


def listed_of(servers: Servers) -> Listed:
    """The tool names ``servers`` listed, by server (None while not known)."""

    def listed(name: str) -> list[str] | None:
        tools = servers.tools(name)
        return None if tools is None else [t.name for t in tools]

    return listed


async def check_warnings(
    settings: Settings, rulebook: Rulebook, wait: float = CHECK_WAIT
) -> list[str]:
    """What ``run.py check`` adds for MCP: :func:`listed_warnings` of the settings' servers."""
    return await listed_warnings(config_of(settings.sections), rulebook, wait)


async def listed_warnings(
    config: McpConfig | None, rulebook: Rulebook, wait: float = CHECK_WAIT
) -> list[str]:
    """``check``'s MCP warnings: connect to the servers the rules name (only those: a rules
    file that uses none starts none), wait up to ``wait`` seconds for their lists, compare;
    a server that did not list in time is a warning too."""
    used = _used_servers(rulebook, list(config.servers) if config is not None else [])
    if config is None or not used:
        return []
    chosen = McpConfig(servers=MappingProxyType({n: config.servers[n] for n in used}))
    async with Servers(chosen) as servers:
        await servers.wait_listed(wait)
        out = tool_warnings(rulebook, listed_of(servers))
        for name in used:
            if servers.tools(name) is None:
                state = servers.state(name)
                why = f": {state['error']}" if state.get("error") else ""
                out.append(
                    f"MCP server {name!r} did not list its tools within {wait:g} s "
                    f"({state.get('state')}{why}); its tool names are not checked"
                )
    return out


def _used_servers(rulebook: Rulebook, names: list[str]) -> list[str]:
    """The configured servers a rule names (an MCP step, an ``mcp:`` tools entry), sorted."""
    used: set[str] = set()
    for _, step in _steps(rulebook):
        if step.spec.name == "MCP":
            server = _const(step, "server")
            used.update(n for n in names if n == server)
        for _, name in _mcp_entries(_const(step, "tools")):
            glob = name.partition("/")[0]
            used.update(n for n in names if fnmatch.fnmatchcase(n, glob))
    return sorted(used)


async def warn_when_listed(servers: Servers, rulebook: Rulebook, wait: float) -> list[str]:
    """The daemon's check: once every server listed (or ``wait`` passed), log each warning
    as ``rules.warning`` (as the daemon logs ``check``'s other warnings); they are returned."""
    await servers.wait_listed(wait)
    warnings = tool_warnings(rulebook, listed_of(servers))
    for warning in warnings:
        log.warning("rules.warning", detail=warning)
    return warnings
