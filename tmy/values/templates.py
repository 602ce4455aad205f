"""``{path}`` references and templates (str.format style), and paths whose keys hold them.

* ``{path}``, ``{path!r}``, ``{path!s}``, ``{path:spec}``; ``{{`` and ``}}`` are
  literal braces; a brace group that is not a valid reference (JSON in a
  prompt: ``{"a": 1}``) stays as written.
* A key inside a reference may itself be a reference: ``{scores[{USER}]}``.
* A string that is exactly one bare reference (``"{jokes}"``) yields the value
  itself, not its text, so lists and maps pass through templates intact.
* What a template may allocate is bounded: its rendered text by
  ``MAX_TEXT_CHARS``, format widths and precisions (checked at load) by
  ``MAX_FORMAT_WIDTH`` and ``MAX_FORMAT_PRECISION``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tmy.errors import EvalError, PathError
from tmy.values.paths import Path, get_in, parse_path
from tmy.values.value import MAX_TEXT_CHARS, Scope, Value, clip, render_text, to_text

_KEY = r"(?:[^\[\]{}]|\{[^{}\[\]]*(?:\[[^\[\]{}]*\])*\})*"
_REF_BODY = rf"[^\W\d]\w*(?:\[{_KEY}\])*"
REF_RE = re.compile(rf"\{{({_REF_BODY})(?:!([rsa]))?(?::([^{{}}]*))?\}}")


MAX_FORMAT_WIDTH = 1_000  # {x:>N}: padding is allocated, so N is bounded at load
MAX_FORMAT_PRECISION = 1_000  # {x:.Nf}: digits are allocated too

# [[fill]align][sign][z][#][0][width][grouping][.precision][type]: Python's format spec
_SPEC_RE = re.compile(
    r"(?:.?[<>=^])?[-+ ]?z?#?0?(?P<width>\d*)[,_]?(?:\.(?P<precision>\d*))?[bcdeEfFgGnosxX%]?",
    re.DOTALL,
)


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


def template_names(pt: PathTemplate) -> frozenset[str]:
    names = {pt.root}
    for seg in pt.segments:
        if isinstance(seg, Template):
            names |= seg.names
    return frozenset(names)


def compile_ref(text: str) -> PathRef:
    if "{" in text:
        inner = compile_path_template(text)
        return PathRef(text, None, inner, template_names(inner))
    path = parse_path(text)
    return PathRef(text, path, None, frozenset({path.root}))


@dataclass(frozen=True, slots=True)
class TemplateRef:
    ref: PathRef
    conversion: str | None
    spec: str | None


@dataclass(frozen=True, slots=True)
class Template(Value):
    source: str
    parts: tuple[str | TemplateRef, ...]
    names: frozenset[str] = frozenset()

    def evaluate(self, scope: Scope) -> Any:
        if len(self.parts) == 1 and isinstance(self.parts[0], TemplateRef):
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
                    f"template {clip(self.source)!r} renders a text that is too large"
                    f" (more than {MAX_TEXT_CHARS:,} characters)"
                )
            out.append(text)
        return "".join(out)

    def _read(self, part: TemplateRef, scope: Scope) -> Any:
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
            raise EvalError(f"format {name} in {clip(ref)} is too large (limit {limit:,})")
    for sample in ("", 0, 0.0):
        try:
            format(sample, spec)
            return
        except (ValueError, TypeError):
            continue
    raise EvalError(f"invalid format spec in {ref}: ':{spec}' fits no text or number")


def compile_template(source: str) -> Template:
    """Split ``source`` into literal text and references."""
    parts: list[str | TemplateRef] = []
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
            m = REF_RE.match(source, i)
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
                    parts.append(TemplateRef(ref, m.group(2), m.group(3)))
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
