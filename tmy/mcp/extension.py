"""MCP servers as an extension: everything the MCP client adds to tmy, stated in one object.

* the ``mcp:`` config section (:func:`tmy.mcp.config.parse_mcp` → ``settings.sections["mcp"]``);
* the ``MCP`` executor (:mod:`tmy.mcp.executor`), its load-time check knowing the
  configured server names;
* the operator command ``mcp`` (``run.py mcp list``: servers, state, tools, and the
  rules' unknown tool names — :mod:`tmy.mcp.commands`);
* a lifespan that makes the app's :class:`~tmy.mcp.runtime.McpRuntime`
  (``services.state["mcp"]``, read through :func:`~tmy.mcp.runtime.mcp_of`), starts
  the servers (now, or at first use in rule tests: see :mod:`tmy.mcp.runtime`), stops
  them when the app closes, and, while the app is open, plugs the servers' tools into
  the LLM runtime as the tool source ``mcp`` (:mod:`tmy.mcp.source`) — tmy.llm never
  imports tmy.mcp;
* a serving part that logs, once the servers have listed their tools, the tool names
  the rules use that do not exist (:func:`tmy.mcp.checks.warn_when_listed`);
* its part of ``/healthz``: ``{"mcp": {"servers": {NAME: {state, transport, tools,
  error, since, reconnects}}}}``, unhealthy (the report ``degraded``, never down) while
  a server is not connected. Nothing of a server's ``env`` or ``headers`` is in it.

It comes after the LLM extension in the built-ins, so the LLM runtime is in
``services.state`` when this lifespan starts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from tmy import redact
from tmy.executors.registry import ExecutorSpec
from tmy.extension import ConfigSection, Extension
from tmy.llm.runtime import STATE_KEY as LLM_STATE_KEY
from tmy.llm.runtime import Runtime as LLMRuntime
from tmy.logs import get_logger
from tmy.mcp import executor
from tmy.mcp.checks import check_warnings, warn_when_listed
from tmy.mcp.commands import COMMANDS
from tmy.mcp.config import McpConfig, parse_mcp
from tmy.mcp.runtime import STARTUP_WAIT, STATE_KEY, McpRuntime
from tmy.mcp.source import PREFIX, McpTools
from tmy.types import Services

log = get_logger("tmy.mcp")

HEALTHY = frozenset({"connected", "idle"})  # idle: not started (a rule test's app)
LISTED_WAIT = 120.0  # seconds the daemon's tool-name check waits for the slowest listing


def config_of(settings: Any) -> McpConfig | None:
    """The app's ``mcp:`` section (None when the settings carry none)."""
    found = settings.sections.get(STATE_KEY)
    return found if isinstance(found, McpConfig) else None


def executors(settings: Any) -> tuple[ExecutorSpec, ...]:
    """The ``MCP`` step, checked against the configured server names."""
    config = config_of(settings)
    names = sorted(config.servers) if config is not None else []
    return (
        ExecutorSpec(
            "MCP",
            executor.mcp_step,
            options=executor.OPTIONS,
            check=executor.make_check(names),
            doc="call one tool of an MCP server (server:, tool:, arguments:); its result's text",
        ),
    )


@contextlib.asynccontextmanager
async def lifespan(services: Services) -> AsyncIterator[McpRuntime]:
    """The app's MCP runtime: servers started (and listed, up to STARTUP_WAIT seconds) unless
    the app is a rule test's, their tools offered to LLM steps, stopped at the end."""
    config = config_of(services.settings)  # (its env/header secrets registered when parsed)
    # an app given its HTTP client is a rule test's (canned HTTP): servers only at first use
    runtime = McpRuntime(config, eager=services.owns_http)
    try:
        if runtime.configured and runtime.eager:
            await runtime.start(wait=STARTUP_WAIT)
        llm = services.state.get(LLM_STATE_KEY)
        if not isinstance(llm, LLMRuntime):  # no LLM extension: MCP steps only
            yield runtime
            return
        with llm.tools_from(PREFIX, McpTools(runtime)):
            yield runtime
    finally:
        await runtime.aclose()


@contextlib.asynccontextmanager
async def serving(services: Services) -> AsyncIterator[None]:
    """The daemon's check of tool names, once the servers have listed them (logged)."""
    runtime = services.state.get(STATE_KEY)
    servers = runtime.servers if isinstance(runtime, McpRuntime) else None
    engine = services.engine
    if servers is None or engine is None:
        yield
        return
    task = asyncio.create_task(warn_when_listed(servers, engine.rulebook, LISTED_WAIT))
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def health(services: Services) -> tuple[dict[str, Any], bool] | None:
    """``{"servers": {NAME: state}}`` and whether every server is connected (None: no servers)."""
    runtime = services.state.get(STATE_KEY)
    if not isinstance(runtime, McpRuntime) or not runtime.configured:
        return None
    states = {name: shown_state(state) for name, state in runtime.states().items()}
    return {"servers": states}, all(s.get("state") in HEALTHY for s in states.values())


def shown_state(state: dict[str, Any]) -> dict[str, Any]:
    """A server's state as /healthz and the console show it (an error's secrets masked)."""
    error = state.get("error")
    return {**state, "error": redact.redact(error) if isinstance(error, str) else error}


EXTENSION = Extension(
    name=STATE_KEY,
    config=ConfigSection(STATE_KEY, parse_mcp),
    executors=executors,
    commands=COMMANDS,
    lifespan=lifespan,
    serving=serving,
    health=health,
    check_warnings=check_warnings,
    doc="MCP servers as tools: mcp: servers, the MCP step, mcp: tools of LLM steps (README, MCP)",
)
