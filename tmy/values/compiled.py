"""task_cfg values: constants, ``{path}`` templates, ``?=`` expressions and ``~raw`` strings.

Every value in a rule is compiled once, at load time, into a :class:`Value`
that knows which root variable names it reads (``names``) — the engine uses
that to fetch persistent variables before evaluating, and the loader uses it to
report references to variables that can never exist.

Template rules (str.format style):

* ``{path}``, ``{path!r}``, ``{path!s}``, ``{path:spec}``; ``{{`` and ``}}`` are
  literal braces; a brace group that is not a valid reference (JSON in a
  prompt: ``{"a": 1}``) stays as written.
* A key inside a reference may itself be a reference: ``{scores[{USER}]}``.
* A string that is exactly one bare reference (``"{jokes}"``) yields the value
  itself, not its text, so lists and maps pass through templates intact.
"""

from __future__ import annotations

import abc
import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tmy.errors import EvalError, PathError
from tmy.values import expressions
from tmy.values.cost import MAX_RESULT_UNITS, measure
from tmy.values.paths import Path, get_in, parse_path

Scope = Mapping[str, Any]

_KEY = r"(?:[^\[\]{}]|\{[^{}\[\]]*(?:\[[^\[\]{}]*\])*\})*"
_REF_BODY = rf"[^\W\d]\w*(?:\[{_KEY}\])*"
_REF_RE = re.compile(rf"\{{({_REF_BODY})(?:!([rsa]))?(?::([^{{}}]*))?\}}")
_INNER_RE = re.compile(rf"\{{({_REF_BODY})\}}")

LIST_MODES = ("SHIFT", "POPUP", "LOOPBACK", "LOOPFRONT")

MAX_TEXT_CHARS = 1_000_000  # characters one template may render
MAX_FORMAT_WIDTH = 1_000  # {x:>N}: padding is allocated, so N is bounded at load
MAX_FORMAT_PRECISION = 1_000  # {x:.Nf}: digits are allocated too
MAX_TEMPLATE_REFS = 1_000  # references in one rule value (a template, or a list/map of them)

# [[fill]align][sign][z][#][0][width][grouping][.precision][type]: Python's format spec
_SPEC_RE = re.compile(
    r"(?:.?[<>=^])?[-+ ]?z?#?0?(?P<width>\d*)[,_]?(?:\.(?P<precision>\d*))?[bcdeEfFgGnosxX%]?",
    re.DOTALL,
)


class Value(abc.ABC):
    """A compiled task_cfg value."""

    names: frozenset[str] = frozenset()
    constant: bool = False

    @abc.abstractmethod
    def evaluate(self, scope: Scope) -> Any:
        """The value in this run's scope."""


@dataclass(frozen=True, slots=True)
class Constant(Value):
    value: Any
    names: frozenset[str] = frozenset()
    constant: bool = True

    def evaluate(self, scope: Scope) -> Any:
        # a run may change a list it got from a constant (SHIFT on a local list);
        # the rule's own value must stay as written for the next run
        if isinstance(self.value, (list, dict)):
            return copy.deepcopy(self.value)
        return self.value


@dataclass(frozen=True, slots=True)
class PathTemplate:
    """A path whose keys hold references: ``scores[{USER}]``.

    Each key is evaluated on its own and used whole, never re-parsed, so a
    user id like ``x][other`` stays one key instead of becoming two segments.
    A key that is exactly one reference to an integer indexes a list.
    """

    root: str
    segments: tuple[Any, ...]  # Segment constants or Templates

    def resolve(self, scope: Scope) -> Path:
        out: list[Any] = []
        for seg in self.segments:
            if isinstance(seg, Template):
                value = seg.evaluate(scope)
                if isinstance(value, bool) or not isinstance(value, (int, str)):
                    value = render_text(value, f"key {seg.source!r} of {self.root!r}")
                out.append(value)
            else:
                out.append(seg)
        return Path(self.root, tuple(out))


def _split_path(text: str) -> tuple[str, list[str]]:
    """Root name and raw bracket contents of a path whose keys may contain ``{…}``."""
    m = re.match(r"[^\W\d]\w*", text)
    if not m:
        raise PathError(f"invalid variable path {text!r}: it must start with a variable name")
    pos, parts = m.end(), []
    while pos < len(text):
        if text[pos] != "[":
            raise PathError(f"invalid variable path {text!r}: unexpected {text[pos]!r}")
        depth, i = 0, pos + 1
        while i < len(text) and not (text[i] == "]" and depth == 0):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if i >= len(text):
            raise PathError(f"invalid variable path {text!r}: '[' is not closed")
        parts.append(text[pos + 1 : i])
        pos = i + 1
    return m.group(0), parts


def compile_path_template(text: str) -> PathTemplate:
    root, parts = _split_path(text)
    segments: list[Any] = []
    for raw in parts:
        if "{" in raw:
            segments.append(compile_template(raw))
        else:
            segments.extend(parse_path(f"x[{raw}]").segments)
    return PathTemplate(root, tuple(segments))


@dataclass(frozen=True, slots=True)
class PathRef:
    """A reference to a variable position; keys may be nested references."""

    text: str
    path: Path | None  # static path, or None when a key holds a reference
    inner: PathTemplate | None
    names: frozenset[str]

    def resolve(self, scope: Scope) -> Path:
        if self.path is not None:
            return self.path
        assert self.inner is not None
        return self.inner.resolve(scope)

    def read(self, scope: Scope) -> Any:
        path = self.resolve(scope)
        try:
            root = scope[path.root]
        except KeyError:
            raise EvalError(f"undefined variable {path.root!r}") from None
        return get_in(root, path) if path.segments else root


def _template_names(pt: PathTemplate) -> frozenset[str]:
    names = {pt.root}
    for seg in pt.segments:
        if isinstance(seg, Template):
            names |= seg.names
    return frozenset(names)


def compile_ref(text: str) -> PathRef:
    if "{" in text:
        inner = compile_path_template(text)
        return PathRef(text, None, inner, _template_names(inner))
    path = parse_path(text)
    return PathRef(text, path, None, frozenset({path.root}))


@dataclass(frozen=True, slots=True)
class _Ref:
    ref: PathRef
    conversion: str | None
    spec: str | None


@dataclass(frozen=True, slots=True)
class Template(Value):
    source: str
    parts: tuple[str | _Ref, ...]
    names: frozenset[str] = frozenset()

    def evaluate(self, scope: Scope) -> Any:
        if len(self.parts) == 1 and isinstance(self.parts[0], _Ref):
            part = self.parts[0]
            if part.conversion is None and part.spec is None:
                return self._read(part, scope)
        return self.render(scope)

    def render(self, scope: Scope) -> str:
        """The text; refused once it passes ``MAX_TEXT_CHARS`` (a reference repeated
        many times over a big value would otherwise take gigabytes)."""
        out: list[str] = []
        total = 0
        for part in self.parts:
            if isinstance(part, str):
                text = part
            else:
                value = self._read(part, scope)
                if part.conversion == "r":
                    value = repr(value)
                elif part.conversion == "a":
                    value = ascii(value)
                try:
                    text = format(value, part.spec) if part.spec else to_text(value)
                except (ValueError, TypeError) as exc:
                    raise EvalError(
                        f"cannot format {{{part.ref.text}:{part.spec}}} in {self.source!r}: {exc}"
                    ) from None
            total += len(text)
            if total > MAX_TEXT_CHARS:
                raise EvalError(
                    f"template {_clip(self.source)!r} renders a text that is too large"
                    f" (more than {MAX_TEXT_CHARS:,} characters)"
                )
            out.append(text)
        return "".join(out)

    def _read(self, part: _Ref, scope: Scope) -> Any:
        try:
            return part.ref.read(scope)
        except EvalError as exc:
            raise type(exc)(f"{exc} (in template {self.source!r})") from None


def _check_spec(spec: str, ref: str) -> None:
    """A format spec that fits no value (``{x:>>>>}``) is a load-time error, not a surprise;
    so is a width or precision that would allocate megabytes per message."""
    m = _SPEC_RE.fullmatch(spec)
    if m is None:
        raise EvalError(f"invalid format spec in {ref}: ':{spec}' fits no text or number")
    for name, limit in (("width", MAX_FORMAT_WIDTH), ("precision", MAX_FORMAT_PRECISION)):
        digits = m.group(name)
        if digits and (len(digits) > 9 or int(digits) > limit):
            raise EvalError(f"format {name} in {_clip(ref)} is too large (limit {limit:,})")
    for sample in ("", 0, 0.0):
        try:
            format(sample, spec)
            return
        except (ValueError, TypeError):
            continue
    raise EvalError(f"invalid format spec in {ref}: ':{spec}' fits no text or number")


def compile_template(source: str) -> Template:
    """Split ``source`` into literal text and references."""
    parts: list[str | _Ref] = []
    names: set[str] = set()
    buf: list[str] = []
    i = 0
    n = len(source)
    while i < n:
        ch = source[i]
        if ch == "{":
            if source.startswith("{{", i):
                buf.append("{")
                i += 2
                continue
            m = _REF_RE.match(source, i)
            if m:
                try:
                    ref = compile_ref(m.group(1))
                except PathError:
                    ref = None
                if ref is not None:
                    if m.group(3):
                        _check_spec(m.group(3), m.group(0))
                    if buf:
                        parts.append("".join(buf))
                        buf = []
                    parts.append(_Ref(ref, m.group(2), m.group(3)))
                    names |= ref.names
                    i = m.end()
                    continue
        elif ch == "}" and source.startswith("}}", i):
            buf.append("}")
            i += 2
            continue
        buf.append(ch)
        i += 1
    if buf:
        parts.append("".join(buf))
    return Template(source, tuple(parts), frozenset(names))


@dataclass(frozen=True, slots=True)
class Expression(Value):
    source: str
    tree: Any
    refs: tuple[tuple[str, PathRef, str | None], ...]
    names: frozenset[str] = frozenset()

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
    return Expression(source, tree, tuple(refs), frozenset(names))


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
            m = _REF_RE.match(source, i)
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
        return _ListValue(tuple(items), frozenset().union(*(v.names for v in items)))
    if isinstance(raw, dict):
        entries = {str(k): _compile_value(v) for k, v in raw.items()}
        if all(v.constant for v in entries.values()):
            return Constant(raw)
        return _MapValue(entries, frozenset().union(*(v.names for v in entries.values())))
    return Constant(raw)


def _ref_count(value: Any) -> int:
    """References a compiled value looks up when evaluated (nested keys included)."""
    if isinstance(value, Template):
        return sum(_ref_count(p) for p in value.parts if isinstance(p, _Ref))
    if isinstance(value, _Ref):
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

    def evaluate(self, scope: Scope) -> Any:
        result = [v.evaluate(scope) for v in self.items]
        _check_built(result, "a list value")
        return result


@dataclass(frozen=True, slots=True)
class _MapValue(Value):
    entries: dict[str, Value]
    names: frozenset[str] = frozenset()

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
        return PathValue(raw, None, pt, _template_names(pt) - {pt.root})
    path = parse_path(raw)
    return PathValue(raw, path, None, frozenset())


def _clip(text: str, limit: int = 200) -> str:
    """Source text short enough for an error message."""
    return text if len(text) <= limit else text[:limit] + "…"


def render_text(value: Any, where: str, limit: int = MAX_TEXT_CHARS) -> str:
    """:func:`to_text`, refused with an error naming ``where`` past ``limit`` characters."""
    text = to_text(value)
    if len(text) > limit:
        raise EvalError(
            f"{where} renders a text that is too large (more than {limit:,} characters)"
        )
    return text


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


def to_text(value: Any) -> str:
    """How a value reads in a reply or a template: JSON for containers, '' for None."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list, tuple)):
        try:
            return json.dumps(value, ensure_ascii=False, default=str)
        except (ValueError, TypeError):  # too deep / huge ints, or keys JSON cannot hold
            try:
                return repr(value)
            except ValueError:
                return "<value too large to show>"
    try:
        return str(value)
    except ValueError:  # int beyond the str-digit limit
        return "<number too large to show>"


def truthy(value: Any) -> bool:
    """Truth of a ``when:`` value; the strings '', 0, false, no, none, null are false."""
    if isinstance(value, str):
        return value.strip().lower() not in ("", "0", "false", "no", "none", "null")
    return bool(value)
