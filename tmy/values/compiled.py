"""task_cfg values: constants, ``{path}`` templates, ``?=`` expressions and ``~raw`` strings.

:func:`compile_value` turns any YAML value into a :class:`~tmy.values.value.Value`
once, at load time: a ``?=`` string into an :class:`Expression` (its ``{path}``
references bound as values, never pasted into the source), a ``~`` string into
its raw text, a string with references into a
:class:`~tmy.values.templates.Template`, lists and maps of those into list and
map values (bounded by ``MAX_TEMPLATE_REFS`` references and, when built, by
the cost model's ``MAX_RESULT_UNITS``), anything else into a
:class:`~tmy.values.value.Constant`. :func:`compile_path` does the same for a
variable position (``save``, ``INPUT``).

The value types and text helpers live in :mod:`tmy.values.value`, templates in
:mod:`tmy.values.templates`; the names below are this package's public API and
are imported from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tmy.errors import EvalError, PathError
from tmy.values import expressions, ranks
from tmy.values.cost import MAX_RESULT_UNITS, measure
from tmy.values.paths import Path, parse_path
from tmy.values.templates import (
    REF_RE,
    PathRef,
    PathTemplate,
    Template,
    TemplateRef,
    compile_path_template,
    compile_ref,
    compile_template,
    template_names,
)
from tmy.values.value import Constant, Scope, Value, to_text, truthy

__all__ = [
    "LIST_MODES",
    "Constant",
    "Expression",
    "PathValue",
    "Template",
    "Value",
    "compile_path",
    "compile_template",
    "compile_value",
    "to_text",
    "truthy",
]

LIST_MODES = ("SHIFT", "POPUP", "LOOPBACK", "LOOPFRONT", "PICK")

MAX_TEMPLATE_REFS = 1_000  # references in one rule value (a template, or a list/map of them)


@dataclass(frozen=True, slots=True)
class Expression(Value):
    source: str
    tree: Any
    refs: tuple[tuple[str, PathRef, str | None], ...]
    names: frozenset[str] = frozenset()
    boards: frozenset[str] = frozenset()  # top("points", …)/rank_of("points"): {"points"}

    def evaluate(self, scope: Scope) -> Any:
        bound: dict[str, Any] = {}
        for name, ref, conversion in self.refs:
            value = ref.read(scope)
            bound[name] = str(value) if conversion == "s" else value
        return expressions.evaluate(self.tree, self.source, scope, bound)


def compile_expression(source: str) -> Expression:
    """Compile the text after ``?=``; ``{path}`` references are bound, never pasted."""
    code, refs = _bind_references(source)
    tree = expressions.parse_expression(code)
    names = set(expressions.names_in(tree)) - {name for name, _, _ in refs}
    for _, ref, _ in refs:
        names |= ref.names
    return Expression(source, tree, tuple(refs), frozenset(names), ranks.boards_in(tree))


def _bind_references(source: str) -> tuple[str, list[tuple[str, PathRef, str | None]]]:
    """Replace ``{path}`` outside string literals with generated names."""
    out: list[str] = []
    refs: list[tuple[str, PathRef, str | None]] = []
    i, n = 0, len(source)
    quote: str | None = None
    while i < n:
        ch = source[i]
        if quote:
            if ch == "\\":
                out.append(source[i : i + 2])
                i += 2
                continue
            if source.startswith(quote, i):
                out.append(quote)
                i += len(quote)
                quote = None
                continue
            out.append(ch)
            i += 1
            continue
        if ch in "'\"":
            quote = source[i : i + 3] if source.startswith(ch * 3, i) else ch
            out.append(quote)
            i += len(quote)
            continue
        if ch == "{":
            m = REF_RE.match(source, i)
            if m and m.group(3) is None:
                try:
                    ref = compile_ref(m.group(1))
                except PathError:
                    ref = None
                if ref is not None:
                    name = f"tmy_ref_{len(refs)}"
                    refs.append((name, ref, m.group(2)))
                    out.append(name)
                    i = m.end()
                    continue
        out.append(ch)
        i += 1
    return "".join(out), refs


def compile_value(raw: Any) -> Value:
    """Compile any YAML value; strings inside lists and maps are compiled too.

    A value may hold at most ``MAX_TEMPLATE_REFS`` references: each costs a lookup
    on every evaluation, and a rule value is no place for a hundred thousand.
    """
    value = _compile_value(raw)
    count = _ref_count(value)
    if count > MAX_TEMPLATE_REFS:
        raise EvalError(
            f"this value holds {count:,} references (limit {MAX_TEMPLATE_REFS:,});"
            " build big texts in steps or keep the data in a variable"
        )
    return value


def _compile_value(raw: Any) -> Value:
    if isinstance(raw, str):
        return compile_string(raw)
    if isinstance(raw, list):
        items = [_compile_value(v) for v in raw]
        if all(v.constant for v in items):
            return Constant(raw)
        return _ListValue(
            tuple(items),
            frozenset().union(*(v.names for v in items)),
            frozenset().union(*(v.boards for v in items)),
        )
    if isinstance(raw, dict):
        entries = {str(k): _compile_value(v) for k, v in raw.items()}
        if all(v.constant for v in entries.values()):
            return Constant(raw)
        return _MapValue(
            entries,
            frozenset().union(*(v.names for v in entries.values())),
            frozenset().union(*(v.boards for v in entries.values())),
        )
    return Constant(raw)


def _ref_count(value: Any) -> int:
    """References a compiled value looks up when evaluated (nested keys included)."""
    if isinstance(value, Template):
        return sum(_ref_count(p) for p in value.parts if isinstance(p, TemplateRef))
    if isinstance(value, TemplateRef):
        inner = value.ref.inner
        return 1 + (sum(map(_ref_count, inner.segments)) if inner is not None else 0)
    if isinstance(value, Expression):
        return len(value.refs)
    if isinstance(value, _ListValue):
        return sum(map(_ref_count, value.items))
    if isinstance(value, _MapValue):
        return sum(map(_ref_count, value.entries.values()))
    return 0


def compile_string(raw: str) -> Value:
    if raw.startswith("?="):
        return compile_expression(raw[2:].strip())
    if raw.startswith("~"):
        return Constant(raw[1:])
    if "{" not in raw and "}" not in raw:
        return Constant(raw)
    template = compile_template(raw)
    if not template.names:
        return Constant(template.render({}))
    return template


@dataclass(frozen=True, slots=True)
class _ListValue(Value):
    items: tuple[Value, ...]
    names: frozenset[str] = frozenset()
    boards: frozenset[str] = frozenset()

    def evaluate(self, scope: Scope) -> Any:
        result = [v.evaluate(scope) for v in self.items]
        _check_built(result, "a list value")
        return result


@dataclass(frozen=True, slots=True)
class _MapValue(Value):
    entries: dict[str, Value]
    names: frozenset[str] = frozenset()
    boards: frozenset[str] = frozenset()

    def evaluate(self, scope: Scope) -> Any:
        result = {k: v.evaluate(scope) for k, v in self.entries.items()}
        _check_built(result.values(), "a map value")
        return result

    def __hash__(self) -> int:  # entries is a dict; identity is enough
        return id(self)


@dataclass(frozen=True, slots=True)
class PathValue:
    """A variable position in a rule (``save``, ``INPUT``): static, template or expression."""

    source: str
    static: Path | None
    dynamic: Value | PathTemplate | None
    names: frozenset[str]

    @property
    def boards(self) -> frozenset[str]:
        """Leaderboards a computed position reads (``?= top("points", 1)[0]["user"]``)."""
        return self.dynamic.boards if isinstance(self.dynamic, Value) else frozenset()

    @property
    def root(self) -> str | None:
        """The root name when it is known at load time."""
        if self.static is not None:
            return self.static.root
        if isinstance(self.dynamic, PathTemplate):
            return self.dynamic.root
        return None

    def resolve(self, scope: Scope) -> Path:
        if self.static is not None:
            return self.static
        assert self.dynamic is not None
        if isinstance(self.dynamic, PathTemplate):
            return self.dynamic.resolve(scope)
        computed = self.dynamic.evaluate(scope)
        if not isinstance(computed, str):
            raise PathError(
                f"{self.source!r} must compute a variable position (a string like 'a[b][0]'),"
                f" got {type(computed).__name__}"
            )
        return parse_path(computed)


def compile_path(raw: str) -> PathValue:
    """Compile a variable position: ``a[b]``, ``scores[{USER}]`` or ``?= expr``."""
    raw = raw.strip()
    if raw.startswith("?="):
        expr = compile_expression(raw[2:].strip())
        return PathValue(raw, None, expr, expr.names)
    if "{" in raw:
        pt = compile_path_template(raw)
        return PathValue(raw, None, pt, template_names(pt) - {pt.root})
    path = parse_path(raw)
    return PathValue(raw, path, None, frozenset())


def _check_built(values: Any, what: str) -> None:
    """Refuse a list/map value whose members add up past ``MAX_RESULT_UNITS``
    (``["{big}", "{big}", …]`` shares one value many times; each counts)."""
    sizes: dict[int, int] = {}
    total = 0
    for value in values:
        size = sizes.get(id(value))
        if size is None:
            size = sizes[id(value)] = measure(value, MAX_RESULT_UNITS - total)[0]
        total += size
        if total > MAX_RESULT_UNITS:
            raise EvalError(
                f"{what} builds a value that is too large"
                f" (more than {MAX_RESULT_UNITS:,} members and characters)"
            )
