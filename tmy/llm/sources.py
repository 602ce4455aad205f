"""Tools from plugged sources (MCP servers): which a step offers, and under which names.

A step's ``tools:`` holds rule ids and executor names (:func:`tmy.llm.tools.resolve`)
and, for tools a source plugged into the runtime offers
(:meth:`tmy.llm.runtime.Runtime.tools_from`), ``PREFIX:GLOB`` / ``!PREFIX:GLOB``
patterns over ``PREFIX:NAME``::

    tools: [weather, "mcp:github/*", "!mcp:github/delete_*"]

* The patterns of one prefix are matched as ``permissions:`` are (seed 001,
  :func:`tmy.llm.tools.allowed`): a negative match wins; with only negative
  patterns every other tool of that source is offered. A source no pattern names
  offers nothing. The step's ``permissions:`` apply on top, to the model's name
  (``github__create_issue``) or the source's (``mcp:github/create_issue``).
* A tool either denies is **not offered**: the model never sees it, and a call
  naming it anyway is answered "permission denied" — it never reaches the source.
* The model sees ``SERVER/TOOL`` as ``SERVER__TOOL`` (function names allow no
  ``/`` or ``:``), other characters as ``_``, at most 64 characters (a longer name
  keeps a hash of the whole); a name already taken gets ``_2``, ``_3``… in the
  order of the source names (denied tools count), so the same tools always get
  the same names whatever a step denies.
* The source tools come after the rule and executor tools, sorted by the model's
  name, their JSON Schema as the source gave it: the request's stable prefix
  stays byte for byte the same while the tool lists do.
* They are read from ``source.offered()`` each time the step runs: a list that
  changed is seen by the next request; what a server that is down offers is the
  source's to decide (its last list, or none).
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Mapping
from typing import Any

from tmy.errors import ExecutorError
from tmy.hints import did_you_mean
from tmy.llm.tools import Tool, ToolSource, allowed, allowed_any

MAX_NAME = 64
# the prefixes a step's tools: may name, and the config section whose servers they name
SECTIONS = {"mcp": "mcp"}
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def split(names: Any) -> tuple[list[str], list[str]]:
    """A step's ``tools:`` as (rule ids and executor names, ``PREFIX:GLOB`` patterns)."""
    if not names:
        return [], []
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise ExecutorError(
            'tools must be a list of rule ids, executor names or patterns like "mcp:github/*"'
        )
    plain = [n for n in names if ":" not in n]
    return plain, [n for n in names if ":" in n]


def model_name(name: str) -> str:
    """``SERVER/TOOL`` as an OpenAI function name: ``SERVER__TOOL`` (before collisions)."""
    safe = _UNSAFE.sub("_", name.replace("/", "__"))
    if len(safe) <= MAX_NAME:
        return safe
    digest = hashlib.sha1(name.encode()).hexdigest()[:8]
    return f"{safe[: MAX_NAME - 9]}_{digest}"


def resolve(
    patterns: list[str],
    sources: Mapping[str, ToolSource],
    taken: set[str],
    permissions: list[str],
) -> list[Tool]:
    """The tools of the sources ``patterns`` name, named and sorted for the model; those
    ``patterns`` or ``permissions`` deny are marked not ``offered``.

    ``taken``: the model names already used (the step's rule and executor tools).
    """
    if not patterns:
        return []
    by_prefix: dict[str, list[str]] = {}
    for pattern in patterns:
        by_prefix.setdefault(pattern.lstrip("!").split(":", 1)[0], []).append(pattern)
    chosen: list[tuple[str, str, str, Any, ToolSource, bool]] = []
    for prefix, mine in sorted(by_prefix.items()):
        source = sources.get(prefix)
        if source is None:
            raise ExecutorError(
                f"tools: {mine[0]!r} needs the {prefix!r} tool source, which is not plugged "
                f"in (is the {prefix} extension installed?)"
            )
        for offered in source.offered():
            full = f"{prefix}:{offered.name}"
            base = model_name(offered.name)
            ok = allowed(full, mine) and allowed_any((base, full), permissions)
            chosen.append((base, full, prefix, offered, source, ok))
    used = set(taken)
    tools = []
    for base, _full, prefix, offered, source, ok in sorted(chosen, key=lambda c: c[:2]):
        name = _unique(base, used)
        used.add(name)
        tools.append(
            Tool(
                name,
                offered.name,
                "source",
                offered.description or f"the {offered.name} tool",
                offered.parameters,
                prefix,
                source,
                ok,
            )
        )
    return sorted(tools, key=lambda t: t.name)


def _unique(base: str, used: set[str]) -> str:
    if base not in used:
        return base
    n = 2
    while True:
        suffix = f"_{n}"
        name = base[: MAX_NAME - len(suffix)] + suffix
        if name not in used:
            return name
        n += 1


def check_at_load(names: Any, sections: Mapping[str, Any]) -> None:
    """``PREFIX:GLOB`` entries of a constant ``tools:``: a known prefix, a configured server.

    ``sections``: the settings' sections; ``mcp`` (when given) has ``.servers`` by name.
    Raises ValueError (the loader adds file:line).
    """
    if not isinstance(names, list):
        return
    for entry in names:
        if not isinstance(entry, str) or ":" not in entry:
            continue
        prefix, glob = entry.lstrip("!").split(":", 1)
        if prefix not in SECTIONS:
            raise ValueError(
                f"tools: {entry!r}: unknown tool source {prefix!r}"
                f"{did_you_mean(prefix, SECTIONS)}; known: {', '.join(sorted(SECTIONS))}"
            )
        servers = getattr(sections.get(SECTIONS[prefix]), "servers", None) or {}
        server = glob.split("/", 1)[0]
        if not server:
            raise ValueError(
                f"tools: {entry!r} names no server; write {prefix}:SERVER/TOOL or {prefix}:SERVER/*"
            )
        if not any(fnmatch.fnmatchcase(s, server) for s in servers):
            configured = ", ".join(sorted(servers)) or "none"
            raise ValueError(
                f"tools: {entry!r}: no {prefix.upper()} server {server!r} is configured"
                f"{did_you_mean(server, servers)}; {SECTIONS[prefix]}.servers: {configured}"
            )
