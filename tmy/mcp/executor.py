"""The ``MCP`` step: one tool of one MCP server, called by a rule without a model.

::

    - plugin: MCP
      server: github                 # a name under mcp.servers (checked when the rules load)
      tool: search_issues            # the server's tool name (checked once its list is known)
      arguments: {query: "{QUESTION}", limit: 5}   # templates and expressions allowed

* **Result** (``STEP_RESULT``): the tool result's text — its text blocks joined, an
  image or a resource described in words (:mod:`tmy.mcp.results`) — or, when the
  result has no text at all, its structured content as it is (a map a later step
  can read: ``{STEP_RESULT[answer]}``).
* **Errors** (``STEP_ERROR``; ``on_error: continue`` goes on): a tool that answers
  ``isError`` fails the step with the tool's own text as the error (what went wrong,
  in the server's words); a server that is down or not connected yet, a call that
  exceeds the timeout — the step's ``timeout:`` when it sets one, else the server's
  ``timeout`` — and an unknown server or tool fail it with a one-line message naming
  the server and the tool (did-you-mean for names).
* **Recorded** like any step (``run.done``, ``ask --json``, ``explain``, ``trace``):
  ``extra.mcp`` holds ``{server, tool, arguments, is_error}`` (an argument named like a
  credential — ``api_key``, ``token`` — shown as ``***``).
* **Dry run** (``explain`` without ``--run``, ``cron fire --dry-run``): as the HTTP
  step's request is recorded and not sent, the tool is **not called** — a tool may
  have side effects, and whether one has is the server's claim, not tmy's. The step
  answers :data:`PLACEHOLDER` and ``extra.mcp.dry_run`` is true; ``explain --run``
  calls it for real.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tmy import redact
from tmy.errors import ExecutorError, TmyError
from tmy.executors.registry import Option
from tmy.hints import did_you_mean
from tmy.mcp.runtime import McpRuntime, mcp_of, unknown_server
from tmy.types import StepContext

if TYPE_CHECKING:  # annotations only
    from tmy.mcp.servers import CallResult

PLACEHOLDER = {
    "dry_run": True,
    "note": "not called: explain runs MCP steps dry (use --run to call the tool)",
}
STEP_SHARE = 0.98  # of the step's own timeout: the call's clear error comes before the engine's
STEP_MARGIN = 0.1  # …and at least this much before it (a fifth of a short timeout): the two
# timers start a few awaits apart, more than 2% of 0.5 s on a slow or busy machine

OPTIONS = {
    "server": Option(str, required=True, doc="the MCP server's name under mcp.servers"),
    "tool": Option(str, required=True, doc="the tool's name on that server"),
    "arguments": Option(
        dict, default=None, doc="the tool's arguments (a map; templates and expressions allowed)"
    ),
}


def make_check(names: list[str]) -> Any:
    """The load-time check of a step's constant options, knowing the configured servers
    (``names``): an unknown server is a rules error with file and line (did-you-mean)."""

    def check(cfg: dict[str, Any]) -> None:
        server = cfg.get("server")
        if isinstance(server, str) and server not in names:
            raise ValueError(unknown_server(server, names))
        tool = cfg.get("tool")
        if isinstance(tool, str) and not tool.strip():
            raise ValueError("tool must name one of the server's tools")

    return check


def is_dry_run(ctx: StepContext) -> bool:
    """Whether the step runs in ``explain``'s dry run (its engine stores and sends nothing)."""
    engine = ctx.services.engine
    return bool(engine is not None and getattr(engine, "dry_run", False))


async def mcp_step(value: Any, cfg: dict[str, Any], ctx: StepContext) -> Any:
    """Call ``cfg["tool"]`` of ``cfg["server"]`` with ``cfg["arguments"]``; its result."""
    server, tool, arguments = _call_of(cfg)
    recorded: dict[str, Any] = {"server": server, "tool": tool, "arguments": shown(arguments)}
    ctx.record.extra["mcp"] = recorded
    runtime = mcp_of(ctx.services)
    if is_dry_run(ctx):
        if server not in runtime.configured:
            raise ExecutorError(unknown_server(server, runtime.names()))
        recorded["dry_run"] = True
        return dict(PLACEHOLDER)
    result = await call(runtime, server, tool, arguments, timeout=_timeout(ctx))
    recorded["is_error"] = result.is_error
    if result.is_error:
        raise ExecutorError(result.text or f"MCP tool {server}/{tool} failed (it said no more)")
    return step_result(result)


async def call(
    runtime: McpRuntime,
    server: str,
    tool: str,
    arguments: dict[str, Any],
    timeout: float | None = None,
) -> CallResult:
    """One tool call: the server started if it was not (rule tests), the tool name checked
    against its list when the list is known (did-you-mean); any failure an ExecutorError."""
    servers = await runtime.ready(server)
    known = servers.tools(server)
    if known is not None and tool not in {t.name for t in known}:
        names = sorted(t.name for t in known)
        raise ExecutorError(
            f"MCP server {server!r} has no tool {tool!r}{did_you_mean(tool, names)}; "
            f"its tools: {', '.join(names) or '(none)'}"
        )
    try:
        return await servers.call(server, tool, arguments, timeout=timeout)
    except ExecutorError:
        raise
    except TmyError as exc:  # McpError: down, timed out, refused — one line, secrets masked
        raise ExecutorError(str(exc)) from None


def step_result(result: CallResult) -> Any:
    """The text, or the structured content itself when the result carries no text block."""
    has_text = any(block.get("type") == "text" for block in result.content)
    if not has_text and result.structured is not None:
        return result.structured
    return result.text


def shown(arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments as the run's record shows them: a value under a credential-looking name
    (``api_key``, ``token``, ``password`` …) masked, registered secrets masked in text."""
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        if redact.is_secret_name(key):
            out[key] = redact.MASK
        else:
            out[key] = redact.redact(value) if isinstance(value, str) else value
    return out


def _call_of(cfg: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(server, tool, arguments) from the evaluated options; a computed one of the wrong type
    is the step's error."""
    server, tool, arguments = cfg.get("server"), cfg.get("tool"), cfg.get("arguments")
    for key, given in (("server", server), ("tool", tool)):
        if not isinstance(given, str) or not given:
            raise ExecutorError(f"option {key!r} of MCP must be a name, got {given!r}")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ExecutorError(
            f"option 'arguments' of MCP must be a map, got {type(arguments).__name__}"
        )
    return server, tool, {str(k): v for k, v in arguments.items()}


def _timeout(ctx: StepContext) -> float | None:
    """The step's own ``timeout:`` (a little less, so this call's error comes first); None:
    the server's configured ``timeout``."""
    own = ctx.step_timeout
    if own is None:
        return None
    own = float(own)
    return max(0.01, own - max(own * (1 - STEP_SHARE), min(STEP_MARGIN, own / 5)))
