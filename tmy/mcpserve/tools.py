"""The rules marked ``tool:`` as MCP tools, for one caller: which are listed, and a call's run.

A caller (:class:`Caller`) is who the MCP client speaks as: ``--user``/``--platform``
on stdio, the API key's identity over HTTP. A rule is offered to a caller only when
its filters admit that caller (``admin_only``, ``platforms``, ``chats``, ``private`` …,
exactly as a message from them would be judged), and a call of a rule they may not
reach is refused (``isError``) without running it — a client that names an unlisted
tool gets the same refusal as one that is listed elsewhere.

A call runs the whole rule through the engine as a tool rule run by the LLM answerer
is (:mod:`tmy.llm.tools`): ``QUESTION`` and the starting ``STEP_RESULT`` are the
arguments object, the arguments are checked against the rule's ``parameters`` first,
and the reply text is the result (a run that failed: ``isError`` with its error).
The listing is made from the rulebook in force at each request, so a reload shows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tmy import logs, metrics
from tmy.engine.core import Engine
from tmy.engine.tracing import trace_id as new_trace_id
from tmy.errors import TmyError
from tmy.llm.tools import resolve
from tmy.logs import get_logger
from tmy.mcp import hops
from tmy.message import Message
from tmy.rulebook.model import Rule
from tmy.rulebook.triggers import Match

log = get_logger("tmy.mcpserve")

PLATFORM = "mcp"
"""``PLATFORM`` of a call over HTTP, and over stdio unless ``--platform`` names another."""


@dataclass(frozen=True, slots=True)
class Caller:
    """Who an MCP client speaks as. ``admin``: an admin whatever ``admins:`` says (``--admin``);
    otherwise the config's ``admins:`` decide, as for a chat message, asked about ``admin_as``:
    None means ``user`` (stdio: the command line is the operator's), ``""`` no one (HTTP without
    keys), else the identity a credential proved (HTTP: the API key's — an ``X-Tmy-User`` a
    client merely claims never makes it an admin). ``ephemeral``: an identity for one request
    (HTTP without keys or a user), as on ``/v1/chat/completions``."""

    user: str
    platform: str = PLATFORM
    chat: str = ""
    user_name: str = ""
    admin: bool = False
    ephemeral: bool = False
    admin_as: str | None = None

    def message(self, engine: Engine, text: str) -> Message:
        """A fresh message from this caller (the engine may change it while running)."""
        message = Message(
            text,
            user=self.user,
            chat=self.chat,
            platform=self.platform,
            user_name=self.user_name,
            is_admin=self.admin,
            mentions_bot=True,  # a tool call is always addressed to the bot
            ephemeral=self.ephemeral,
            admin_as=self.admin_as,
        )
        if not message.is_admin and engine.admins:  # as the engine judges a message
            message.is_admin = engine.admins.judge(message)
        return message


@dataclass(frozen=True, slots=True)
class RuleTool:
    """One rule as an MCP tool: its name (the rule id, sanitized as the LLM answerer
    names it), description and input schema (the rule's ``parameters``)."""

    name: str
    rule: Rule
    description: str
    parameters: dict[str, Any]

    def listed(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "inputSchema": self.parameters}


def rule_tools(engine: Engine) -> dict[str, RuleTool]:
    """Every rule with ``tool:`` in the rulebook in force, by tool name (rules order).

    Two rule ids that sanitize to the same name: the first keeps it (a warning names
    the other), so a name always means one rule.
    """
    rulebook = engine.rulebook
    rules = [r for r in rulebook.rules if r.id and "tool" in r.extras]
    found: dict[str, RuleTool] = {}
    for tool in resolve([r.id for r in rules], engine.services):
        rule = rulebook.by_id[tool.target]
        if tool.name in found:
            log.warning(
                "mcpserve.name_taken",
                rule=rule.id,
                tool=tool.name,
                by=found[tool.name].rule.id,
                why="two rule ids read the same as a tool name; rename one",
            )
            continue
        found[tool.name] = RuleTool(tool.name, rule, tool.description, tool.parameters)
    return found


def offered(engine: Engine, caller: Caller) -> list[RuleTool]:
    """The tools ``caller`` may call: those whose rule's filters admit them, by name."""
    probe = caller.message(engine, "")
    tools = rule_tools(engine).values()
    return sorted((t for t in tools if t.rule.filters.admits(probe)), key=lambda t: t.name)


@dataclass(frozen=True, slots=True)
class Outcome:
    """A call's result: the text the client gets, and whether it is an error."""

    text: str
    is_error: bool = False


async def call(
    engine: Engine, caller: Caller, name: str, arguments: Any, depth: int = 1
) -> Outcome:
    """Run the rule behind tool ``name`` as ``caller``; never raises for a bad call.
    ``depth``: how many MCP calls deep this one is (:mod:`tmy.mcp.hops`)."""
    if depth > hops.MAX_HOPS:
        log.warning("mcpserve.too_deep", tool=name, hops=depth, user=caller.user)
        return Outcome(
            f"refused: tool {name!r} was reached through {depth} MCP calls in a row (at most "
            f"{hops.MAX_HOPS}) — a bot calling itself through MCP?",
            True,
        )
    tool = rule_tools(engine).get(name)
    args = arguments if arguments is not None else {}
    message = caller.message(engine, json.dumps(args, ensure_ascii=False, default=str))
    if tool is None:
        return Outcome(f"unknown tool {name!r}", True)
    refusal = tool.rule.filters.refusal(message)
    if refusal is not None:  # never run: the caller could not reach the rule by its trigger
        log.warning(
            "mcpserve.refused",
            tool=name,
            rule=tool.rule.id,
            user=caller.user,
            platform=caller.platform,
            reason=refusal,
        )
        denied = f"permission denied: tool {name!r} is not available to you ({refusal})"
        return Outcome(denied, True)
    if not isinstance(args, dict):
        return Outcome(f"invalid arguments for {name}: expected an object", True)
    problem = _schema_problem(tool.parameters, args)
    if problem is not None:
        return Outcome(f"invalid arguments for {name}: {problem}", True)
    trace_id = new_trace_id()
    token = logs.bind_trace(trace_id)
    try:
        groups = {k: v for k, v in args.items() if k.isidentifier() and k.upper() != k}
        match = Match(tool.rule, None, tool.rule.id, args, groups)  # type: ignore[arg-type]
        with hops.serving(depth):
            reply = await engine.run_rule(match, message, trace_id, message.text, finish=False)
    except TmyError as exc:  # the engine reports failures in the reply; this is a last resort
        return Outcome(f"error: {exc}", True)
    finally:
        logs.TRACE.reset(token)
    metrics.run(tool.rule.id, reply.error is None)
    if reply.error:
        return Outcome(f"error: {reply.error}", True)
    return Outcome(reply.text)


def _schema_problem(schema: dict[str, Any], args: dict[str, Any]) -> str | None:
    import jsonschema  # deferred: ~30 ms of every CLI start

    error = jsonschema.exceptions.best_match(
        jsonschema.validators.validator_for(schema)(schema).iter_errors(args)
    )
    return None if error is None else error.message
