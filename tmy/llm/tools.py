"""Tools the model may call: rules, executors and plugged sources; the call protocols, permissions.

* A **rule** becomes a tool by declaring ``tool: {description, parameters}``
  (parameters: a JSON Schema object). A call runs the whole rule through the
  engine, as the same user in the same chat: ``QUESTION`` and the starting
  ``STEP_RESULT`` are the arguments object (``{QUESTION[city]}`` reads one),
  and the reply text is what the model gets back.
* An **executor** is a tool as is: its ``input`` is the ``input`` argument and
  its options are the other arguments.
* A **source** (a :class:`ToolSource`: the MCP servers) offers tools a step names
  with ``mcp:SERVER/TOOL`` globs; which are offered, and their names, is
  :mod:`tmy.llm.sources`. A call goes to ``source.call`` and is recorded as any other.
* The text protocol's prompt and parser are :mod:`tmy.llm.textcalls`.
* **Native** protocol (default): OpenAI ``tools`` / ``tool_calls`` / ``tool``
  messages. **Text** protocol (``tool_protocol: text``) for models without
  function calling: ``<tool_call>`` blocks out, ``<tool_result>`` blocks back.
* Call ids are ours, ``call_<turn>_<index>`` (1-based), whatever the provider
  sent, so requests are reproducible and each call gets the STEP_URI
  ``<rule>/<step>/tool/<call id>``.
* ``permissions`` are glob patterns over tool names: ``"w*"`` allows, ``"!delete_*"``
  denies, a negative match always wins; with only negative patterns anything
  else is allowed. A denied call is answered "permission denied", so the model
  can tell the user instead of the run failing.
"""

from __future__ import annotations

import contextvars
import fnmatch
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from tmy.errors import ExecutorError, TmyError
from tmy.llm.textcalls import parse_text_calls, text_protocol
from tmy.logs import preview
from tmy.message import StepRecord
from tmy.rulebook.triggers import Match
from tmy.types import Services, StepContext
from tmy.values.compiled import to_text

log = structlog.get_logger("tmy.run")

__all__ = ["parse_text_calls", "text_protocol"]  # the text protocol's, used as tools.* (exchange)

PROTOCOLS = ("native", "text")
RESULT_LIMIT = 16_000
MAX_DEPTH = 3
_NAME_RE = re.compile(r"[^A-Za-z0-9_-]")
_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar("tmy_llm_tool_depth", default=0)


def nested() -> bool:
    """Inside a tool call: a rule the model called, not the message's own rule."""
    return _DEPTH.get() > 0


_TYPES = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
}
EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


def validate_tool(raw: Any) -> dict[str, Any]:
    """The ``tool:`` rule key: {description, parameters} (checked when rules load)."""
    if not isinstance(raw, dict):
        raise ValueError("expected {description: …, parameters: <JSON Schema object>}")
    unknown = set(raw) - {"description", "parameters"}
    if unknown:
        raise ValueError(f"unknown key {sorted(unknown)[0]!r}; allowed: description, parameters")
    description = raw.get("description")
    if not isinstance(description, str) or not description.strip():
        raise ValueError("'description' is required: it tells the model when to call the tool")
    params = raw.get("parameters") or EMPTY_SCHEMA
    if not isinstance(params, dict) or params.get("type", "object") != "object":
        raise ValueError("'parameters' must be a JSON Schema of type object")
    import jsonschema  # deferred: ~30 ms of every CLI start

    try:
        jsonschema.validators.validator_for(params).check_schema(params)
    except jsonschema.exceptions.SchemaError as exc:
        raise ValueError(f"'parameters' is not a valid JSON Schema: {exc.message}") from None
    return {"description": description.strip(), "parameters": params}


def tool_locals(tool: dict[str, Any]) -> set[str]:
    """The argument names a tool rule may read as variables (``{city}``).

    All-capitals names are left out: they would shadow run locals such as QUESTION.
    """
    props = tool["parameters"].get("properties") or {}
    return {k for k in props if isinstance(k, str) and k.isidentifier() and k.upper() != k}


def check_permissions(patterns: Any) -> list[str]:
    """``permissions:`` as a list of glob patterns (one pattern may be given bare)."""
    if patterns in (None, "", []):
        return []
    if isinstance(patterns, str):
        patterns = [patterns]
    if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
        raise ValueError('permissions must be a list of glob patterns like "w*" or "!delete_*"')
    return patterns


def allowed(name: str, patterns: list[str]) -> bool:
    """Glob permissions: a negative match denies; else any positive match (or none given) allows."""
    return allowed_any((name,), patterns)


def allowed_any(names: Sequence[str], patterns: list[str]) -> bool:
    """:func:`allowed` for a tool known by several names (``github__x``, ``mcp:github/x``):
    a negative match of any denies; else a positive match of any (or none given) allows."""
    if not patterns:
        return True
    for p in patterns:
        if p.startswith("!") and any(fnmatch.fnmatchcase(n, p[1:]) for n in names):
            return False
    positive = [p for p in patterns if not p.startswith("!")]
    return not positive or any(fnmatch.fnmatchcase(n, p) for p in positive for n in names)


@dataclass(frozen=True, slots=True)
class OfferedTool:
    """A tool a plugged :class:`ToolSource` offers right now (an MCP server's tool)."""

    name: str  # the source's name for it, "SERVER/TOOL"; a step's tools: pattern "mcp:SERVER/TOOL"
    description: str  # globs match "mcp:" + name; the model sees "SERVER__TOOL"
    parameters: dict[str, Any]  # JSON Schema, as-is


class ToolSource(Protocol):
    """Tools beside rules and executors, plugged into the runtime under a prefix
    (:meth:`tmy.llm.runtime.Runtime.tools_from`): ``tools: ["mcp:github/*"]``."""

    def offered(self) -> Sequence[OfferedTool]:
        """Every tool known right now (read per request: a changed list is seen next time)."""
        ...

    async def call(self, ctx: StepContext, name: str, arguments: dict[str, Any]) -> str:
        """The text the model gets back; raises TmyError (what went wrong) on failure."""
        ...


@dataclass(frozen=True, slots=True)
class Tool:
    """A callable the model is offered: a rule with ``tool:``, an executor, or a tool a
    plugged :class:`ToolSource` offers (:mod:`tmy.llm.sources`)."""

    name: str  # as the model sees it
    target: str  # the rule id, executor name or the source's name for it ("github/x")
    kind: str  # "rule" | "executor" | "source"
    description: str
    parameters: dict[str, Any]
    prefix: str = ""  # a source tool's: "mcp"
    source: ToolSource | None = field(default=None, compare=False, repr=False)
    # False: a source's tool the step denies — never shown to the model; a call naming
    # it anyway is answered "permission denied" and never reaches the source
    offered: bool = True

    def names(self) -> tuple[str, ...]:
        """The names ``permissions:`` match: the model's, and a source tool's ``PREFIX:NAME``."""
        return (self.name, f"{self.prefix}:{self.target}") if self.prefix else (self.name,)

    def native(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


def resolve(names: Any, services: Services) -> list[Tool]:
    """The tools a step lists: rule ids first, then executor names."""
    if not names:
        return []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ExecutorError("tools must be a list of rule ids or executor names")
    rules = services.engine.rulebook.by_id if services.engine is not None else {}
    tools = []
    for name in names:
        rule = rules.get(name)
        if rule is not None:
            spec = rule.extras.get("tool")
            if spec is None:
                raise ExecutorError(
                    f"tool {name!r}: rule {name!r} declares no 'tool:' "
                    "{description, parameters}, so it cannot be a tool"
                )
            tools.append(
                Tool(
                    _NAME_RE.sub("_", name)[:64],
                    name,
                    "rule",
                    spec["description"],
                    spec["parameters"],
                )
            )
            continue
        executor = services.registry.get(name)
        if executor is None:
            raise ExecutorError(
                f"tool {name!r} is neither a rule with 'tool:' nor an executor; "
                f"{services.registry.suggest(name)}"
            )
        props: dict[str, Any] = {"input": {"type": "string", "description": "the input"}}
        for opt_name, opt in executor.options.items():
            kinds = opt.types if isinstance(opt.types, tuple) else (opt.types,)
            json_types = [_TYPES[t] for t in kinds if t in _TYPES]
            prop: dict[str, Any] = {"description": opt.doc} if opt.doc else {}
            if json_types:
                prop["type"] = json_types[0] if len(json_types) == 1 else json_types
            props[opt_name] = prop
        required = [n for n, o in executor.options.items() if o.required]
        params = {
            "type": "object",
            "properties": props,
            **({"required": required} if required else {}),
        }
        tools.append(
            Tool(
                _NAME_RE.sub("_", name)[:64],
                name,
                "executor",
                executor.doc or f"the {name} executor",
                params,
            )
        )
    return tools


async def run_call(
    ctx: StepContext,
    tools: dict[str, Tool],
    permissions: list[str],
    call: dict[str, Any],
    call_id: str,
) -> str:
    """Run one call; the text the model gets back (errors included — they are its to handle)."""
    uri = f"{ctx.uri}/tool/{call_id}"
    name = call.get("name", "")
    record = StepRecord(uri=uri, plugin=f"tool:{name}")
    started = time.perf_counter()
    try:
        record.input = args = _arguments(call.get("arguments"))
        tool = tools.get(name)
        if tool is None:
            shown = [n for n, t in tools.items() if t.offered]
            raise _Refused(f"unknown tool {name!r}; available: {', '.join(shown) or 'none'}")
        if not tool.offered or not allowed_any(tool.names(), permissions):
            raise _Refused(f"permission denied: tool {name!r} is not allowed here")
        problem = _invalid(tool, args, uri)
        if problem:
            raise _Refused(f"invalid arguments for {name}: {problem}")
        if _DEPTH.get() >= MAX_DEPTH:
            raise _Refused(f"tools nested deeper than {MAX_DEPTH} levels")
        token = _DEPTH.set(_DEPTH.get() + 1)
        try:
            text = await _execute(ctx, tool, args, uri, record)
        finally:
            _DEPTH.reset(token)
    except _Refused as exc:
        record.error = text = str(exc)
    except TmyError as exc:
        record.error = str(exc)
        text = f"error: {exc}"
    if len(text) > RESULT_LIMIT:
        text = text[:RESULT_LIMIT] + f"\n…(cut: {len(text)} characters in all)"
    record.result = text
    record.ms = round((time.perf_counter() - started) * 1000, 3)
    ctx.add_record(record)  # so the run's one line (run.done) lists the call
    log.debug(
        "step.done",
        uri=uri,
        plugin=record.plugin,
        input=preview(record.input),
        result=preview(text),
        error=record.error or None,
        ms=record.ms,
    )
    return text


class _Refused(Exception):
    pass


def _invalid(tool: Tool, args: dict[str, Any], uri: str) -> str:
    """What is wrong with ``args`` by the tool's JSON Schema ('' when nothing).

    A source's schema is used as it came: one this validator cannot use (an unknown
    type, a ``$ref`` to elsewhere) leaves the checking to the source (the server).
    """
    import jsonschema  # deferred: ~30 ms of every CLI start
    import referencing.exceptions  # jsonschema's own dependency, as deferred

    schema = tool.parameters
    try:
        error = jsonschema.exceptions.best_match(
            jsonschema.validators.validator_for(schema)(schema).iter_errors(args)
        )
    except (
        jsonschema.exceptions.SchemaError,
        jsonschema.exceptions.UnknownType,
        referencing.exceptions.Unresolvable,
    ) as exc:
        if tool.source is None:  # rules' schemas were checked when they loaded
            raise
        log.info("tool.schema_unused", uri=uri, tool=tool.name, error=str(exc).split("\n")[0])
        return ""
    return error.message if error is not None else ""


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except ValueError as exc:
        raise _Refused(f"the arguments are not valid JSON ({exc}): {preview(raw, 200)}") from None
    if not isinstance(value, dict):
        raise _Refused(f"the arguments must be a JSON object, got {preview(value, 200)}")
    return value


async def _execute(
    ctx: StepContext, tool: Tool, args: dict[str, Any], uri: str, record: StepRecord
) -> str:
    services = ctx.services
    if tool.source is not None:  # a plugged source's (an MCP server's): its text, or TmyError
        record.extra["tool"] = f"{tool.prefix}:{tool.target}"
        return await tool.source.call(ctx.within(uri, record), tool.target, args)
    if tool.kind == "rule":
        rule = services.engine.rulebook.by_id.get(tool.target)
        if rule is None:
            raise _Refused(f"tool {tool.name!r}: rule {tool.target!r} is gone (rules reloaded?)")
        if not rule.filters.admits(ctx.message):
            # the model acts for the user who wrote to it: a rule that user could not
            # reach by its trigger (admin_only, platform, chat, private/group) stays shut
            log.warning(
                "tool.refused",
                uri=uri,
                tool=tool.name,
                rule=rule.id,
                user=ctx.message.user,
                reason="the rule's filters do not admit this user here",
            )
            raise _Refused(
                f"permission denied: tool {tool.name!r} is not available to this user here"
            )
        groups = {k: v for k, v in args.items() if k.isidentifier() and k.upper() != k}
        match = Match(rule, None, tool.target, args, groups)  # type: ignore[arg-type]
        reply = await services.engine.run_rule(
            match, ctx.message, ctx.trace_id, json.dumps(args, ensure_ascii=False), finish=False
        )
        record.extra["steps"] = [s.uri for s in reply.steps]
        if reply.error:
            record.error = reply.error
            return f"error: {reply.error}"
        return reply.text
    spec = services.registry.get(tool.target)
    cfg = {name: opt.default for name, opt in spec.options.items()}
    extra = set(args) - set(cfg) - {"input"}
    if extra:
        raise _Refused(f"unknown argument {sorted(extra)[0]!r} for {tool.name}")
    cfg.update({k: v for k, v in args.items() if k != "input"})
    value = args.get("input", "")
    result = await spec.run(value, cfg, ctx.within(uri, record))
    return to_text(result)
