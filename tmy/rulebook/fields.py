"""Reading one field of a rules file: typed, compiled, its names checked, every problem kept.

The loader never stops at the first mistake: each reader here records a
:class:`~tmy.errors.RuleError` with the file and the line of the key and
returns a harmless default, so ``check`` lists everything wrong at once.
:class:`FieldReader` is the base of the step compiler, the rule compiler and
the loader (:mod:`tmy.rulebook.steps`, :mod:`tmy.rulebook.rules`,
:mod:`tmy.rulebook.loader`), which share its error list, the declared
variables and the registry.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from tmy.errors import EvalError, RuleError
from tmy.executors.registry import Registry
from tmy.hints import did_you_mean
from tmy.rulebook.model import VariableDecl
from tmy.values.compiled import (
    Constant,
    PathValue,
    Value,
    compile_expression,
    compile_path,
    compile_value,
)
from tmy.values.functions import call_hint
from tmy.yamlfile.source import LineDict


class FieldReader:
    """The state every compiler shares: the registry, the declared variables, the errors."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.errors: list[RuleError] = []
        self.variables: dict[str, VariableDecl] = {}

    def error(self, message: str, file: str, line: int | None) -> None:
        self.errors.append(RuleError(message, file=file, line=line))

    def value(
        self, raw: LineDict, key: str, file: str, known: set[str], dynamic: bool, where: str
    ) -> Value | None:
        """``raw[key]`` compiled as a value (constant, template or expression)."""
        try:
            val = compile_value(plain(raw[key]))
        except EvalError as exc:
            self.error(f"{where}: '{key}': {exc}", file, raw.line_of(key))
            return None
        if type(val) is not Constant:  # most values are: no name read, no board called
            self.check_names(val.names, raw, key, file, known, dynamic, where)
            self.check_boards(boards_of(val), raw.line_of(key), key, file, where)
        return val

    def path(
        self, raw: LineDict, key: str, file: str, known: set[str], dynamic: bool, where: str
    ) -> PathValue | None:
        """``raw[key]`` compiled as a variable position (``scores[{USER}]``), or None if absent."""
        src = raw.get(key)
        if src in (None, ""):
            return None
        if not isinstance(src, str):
            self.error(
                f"{where}: '{key}' must be a variable position such as 'scores[{{USER}}]'",
                file,
                raw.line_of(key),
            )
            return None
        try:
            pv = compile_path(src)
        except EvalError as exc:
            self.error(f"{where}: '{key}': {exc}{expression_hint(key, src)}", file,
                       raw.line_of(key))  # fmt: skip
            return None
        reads = set(pv.names)
        if key == "INPUT" and pv.root:
            reads.add(pv.root)
        self.check_names(reads, raw, key, file, known, dynamic, where)
        self.check_boards(boards_of(pv), raw.line_of(key), key, file, where)
        return pv

    def check_boards(
        self, boards: Iterable[str], line: int | None, key: str, file: str, where: str
    ) -> None:
        """Every ``top("name", n)`` / ``rank_of("name")`` must name a ``rank: true`` variable
        (a board is kept only for those): said at load time rather than at every run."""
        for name in sorted(boards):
            decl = self.variables.get(name)
            if decl is not None and decl.rank:
                continue
            ranked = sorted(n for n, d in self.variables.items() if d.rank)
            self.error(
                f"{where}: '{key}' calls top()/rank_of() on {name!r}, which "
                + (
                    "is not a leaderboard: declare it with rank: true (a user-scoped number)"
                    f" (declared at {decl.file}:{decl.line})"
                    if decl is not None
                    else f"is not a declared variable{did_you_mean(name, ranked)}: declare it "
                    "under 'variables:' with scope: user and rank: true"
                ),
                file,
                line,
            )

    def check_names(
        self,
        names: Iterable[str],
        raw: LineDict,
        key: str,
        file: str,
        known: set[str],
        dynamic: bool,
        where: str,
    ) -> None:
        """Every name a value reads must be set by then (``dynamic``: a computed save came
        first, so any name may have been set)."""
        if dynamic:
            return
        for name in sorted(set(names) - known):
            call = call_hint(name)
            if call is not None:  # "{random}" in a template: a function, not a variable
                self.error(
                    f"{where}: '{key}' reads {name!r}, which is never set: {call}, inside a "
                    "?= expression (a {template} only reads variables)",
                    file,
                    raw.line_of(key),
                )
                continue
            extra = did_you_mean(name, sorted(known))
            self.error(
                f"{where}: '{key}' reads {name!r}, which is never set{extra}: declare it under "
                "'variables:', save it in an earlier step, or write {{ and }} for literal braces",
                file,
                raw.line_of(key),
            )

    def typed(self, raw: LineDict, key: str, types: Any, default: Any, file: str) -> Any:
        """``raw[key]`` when it has ``types`` (a bool is no number), else ``default``."""
        if key not in raw:
            return default
        val = raw[key]
        if types is int or types == (int, float):
            ok = isinstance(val, types) and not isinstance(val, bool)
        else:
            ok = isinstance(val, types)
        if not ok:
            self.error(f"'{key}' must be {type_names(types)}, got {val!r}", file, raw.line_of(key))
            return default
        return val

    def str_set(self, raw: LineDict, key: str, file: str) -> frozenset[str] | None:
        """A name or a list of names (``platforms:``, ``chats:``), or None when absent."""
        if key not in raw:
            return None
        val = raw[key]
        if isinstance(val, (str, int)):
            val = [val]
        if not isinstance(val, list) or not all(isinstance(v, (str, int)) for v in val):
            self.error(f"'{key}' must be a list of names", file, raw.line_of(key))
            return None
        return frozenset(str(v) for v in val)


def boards_of(value: Any) -> frozenset[str]:
    """The leaderboards a compiled value (or a computed variable position) calls
    top()/rank_of() on; empty for most values."""
    boards = getattr(value, "boards", None)
    if boards is None and isinstance(value, PathValue):
        boards = getattr(value.dynamic, "boards", None)
    return frozenset(boards or ())


def expression_hint(key: str, src: str) -> str:
    """For a position that does not parse but reads as an expression (seed 004's
    ``'words[list][0]' if {words[list_size]!r} else 'EMPTY_STR'``): the ``?=`` it lacks,
    with the corrected line. Expressions start with ``?=``; a plain string is a position."""
    text = src.strip()
    if text.startswith("?="):
        return ""
    try:
        compile_expression(text)
    except EvalError:
        return ""
    fixed = json.dumps(f"?= {text}", ensure_ascii=False)
    return f"; it reads as an expression computing the position: start it with ?= — {key}: {fixed}"


def plain(value: Any) -> Any:
    """LineDict/LineList → dict/list (values handed to the engine carry no YAML baggage)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def unknown_key(what: str, key: Any, allowed: Iterable[str]) -> str:
    """The text of an unknown-key error: a suggestion and what is allowed."""
    return f"unknown {what} {key!r}{did_you_mean(key, allowed)}; allowed: {', '.join(allowed)}"


def type_names(types: Any) -> str:
    """``int or float`` for ``(int, float)``; a type's name for one type."""
    if isinstance(types, tuple):
        return " or ".join(t.__name__ for t in types)
    return types.__name__
