r"""Trigger words: parsing, normalisation and the match result.

``word`` exact, ``word*`` prefix, ``*word`` suffix, ``*word*`` contains,
``re:<regex>`` regular expression, ``*`` anything. Matching is done on the
message normalised to Unicode NFKC, stripped of invisible format characters and
trimmed, and case-folded unless the rule is ``case_sensitive``.

Regex triggers are compiled with the ``regex`` module rather than ``re``: it
reads the same syntax (Unicode ``\w``, lookarounds and backreferences keep
working, unlike a linear-time engine such as RE2) and, unlike ``re``, it can stop
a match after a time limit. The index gives all regex triggers of one message a
shared budget (:data:`REGEX_BUDGET`), so a pattern with catastrophic
backtracking (``^(a+)+$``) costs one message at most that long instead of
stalling every chat; ``check`` warns about nested quantifiers either way.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from typing import Any

import regex

from tmy.errors import RuleError

# Seconds of regex matching one message may cost, all regex triggers together;
# a trigger still running then is abandoned (no match) and logged.
REGEX_BUDGET = 0.05

# Invisible format characters (Unicode category Cf: zero-width space/joiners,
# word joiner, BOM, soft hyphen, bidi controls, …). Removed before matching so
# that "bad\u200bword" cannot slip past a "*badword*" trigger.
# (Every Cf code point lies below U+20000 or in the tag block U+E0000-U+E0FFF;
# scanning just those keeps the import cheap.)
_INVISIBLE = {
    cp: None
    for cp in (*range(0x20000), *range(0xE0000, 0xE1000))
    if unicodedata.category(chr(cp)) == "Cf"
}

# Precedence of kinds when several rules match (lower wins).
KIND_RANK = {"exact": 0, "prefix": 1, "suffix": 2, "contains": 3, "regex": 4, "any": 5}


@dataclass(slots=True, eq=False)
class Trigger:
    """One trigger of a rule, compiled; immutable by convention (see rulebook.model.Step)."""

    source: str  # as written in the rule
    kind: str
    literal: str  # normalised literal the index keys on ("" for regex / any)
    magic: str  # MAGIC: the literal part as written, trimmed
    case_sensitive: bool
    regex: Any = None  # a compiled ``regex`` pattern
    groups: tuple[str, ...] = ()
    line: int = 0  # where it is written (set by the loader), for warnings


def trigger_warnings(trig: Trigger) -> list[str]:
    """What ``check`` should warn about in one trigger (it still loads)."""
    out = []
    if trig.kind == "regex" and nested_quantifier(trig.magic):
        out.append(
            f"regex trigger {trig.source!r} has a nested quantifier (a repeat inside a repeat):"
            " it can backtrack exponentially on a near-miss; each message gives all regex"
            f" triggers together {REGEX_BUDGET * 1000:g} ms, then they are abandoned"
        )
    hidden = invisible_characters(trig.source)
    if hidden:
        out.append(
            f"trigger {trig.source!r} contains invisible characters ({', '.join(hidden)}):"
            " they are ignored (removed from messages and triggers before matching)"
        )
    return out


def normalise(text: str) -> str:
    """NFKC, invisible format characters removed, trimmed: what case-sensitive triggers see."""
    if text.isascii():
        return text.strip()  # NFKC and Cf removal change nothing in ASCII
    return unicodedata.normalize("NFKC", text).translate(_INVISIBLE).strip()


def invisible_characters(text: str) -> list[str]:
    """The invisible format characters in ``text``, as ``U+200B`` names (for ``check``)."""
    return sorted({f"U+{ord(c):04X}" for c in text if ord(c) in _INVISIBLE})


def _walk_repeats(items: Any, inside_repeat: bool) -> bool:
    """True when a repeated sub-pattern itself contains an unbounded repeat."""
    from re import _constants as c  # type: ignore[attr-defined]

    for op, arg in items:
        if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
            low, high, sub = arg
            # a count that varies beyond one can split the same text many ways
            unbounded = (high is c.MAXREPEAT or high > 1) and high != low
            if unbounded and inside_repeat and op is not c.POSSESSIVE_REPEAT:
                return True
            if _walk_repeats(sub, inside_repeat or (unbounded and op is not c.POSSESSIVE_REPEAT)):
                return True
        elif op is c.SUBPATTERN:
            if _walk_repeats(arg[-1], inside_repeat):
                return True
        elif op is c.BRANCH:
            if any(_walk_repeats(branch, inside_repeat) for branch in arg[1]):
                return True
        elif op in (c.ASSERT, c.ASSERT_NOT) and _walk_repeats(arg[1], inside_repeat):
            return True
    return False


def nested_quantifier(pattern: str) -> bool:
    r"""Whether ``pattern`` repeats something that itself repeats (``(a+)+``, ``(\w*\s?)*``).

    Such patterns can backtrack exponentially on a near-miss; tmy bounds the
    time they take, but they are almost always a mistake worth a warning.
    """
    from re import _parser  # type: ignore[attr-defined]

    try:
        parsed = _parser.parse(pattern)
    except Exception:  # syntax only the regex module knows: no verdict
        return False
    return _walk_repeats(parsed, False)


def fold(text: str) -> str:
    return text.casefold()


def parse_trigger(source: Any, *, case_sensitive: bool) -> Trigger:
    """Compile one trigger string; RuleError (without location) when it is malformed."""
    if not isinstance(source, str) or not source.strip():
        raise RuleError(f"a trigger must be a non-empty string, got {source!r}")
    if source.startswith("re:"):
        pattern = source[3:]
        flags = regex.V0 if case_sensitive else regex.V0 | regex.IGNORECASE
        try:
            compiled = regex.compile(pattern, flags)
        except (regex.error, ValueError, OverflowError) as exc:
            raise RuleError(f"trigger {source!r}: invalid regular expression: {exc}") from None
        groups = tuple(compiled.groupindex)
        return Trigger(source, "regex", "", pattern, case_sensitive, compiled, groups)
    text = unicodedata.normalize("NFKC", source).translate(_INVISIBLE)
    if text.strip() == "*":
        return Trigger(source, "any", "", "", case_sensitive)
    starts, ends = text.startswith("*"), text.endswith("*")
    body = text[1 if starts else 0 : len(text) - 1 if ends else len(text)]
    if "*" in body:
        raise RuleError(
            f"trigger {source!r}: '*' may only stand at the start or end of a trigger"
            " (use 're:' for anything else)"
        )
    if starts and ends:
        kind, literal = "contains", body.strip()
    elif ends:
        kind, literal = "prefix", body.lstrip()
    elif starts:
        kind, literal = "suffix", body.rstrip()
    else:
        kind, literal = "exact", body.strip()
    if not literal.strip():
        raise RuleError(f"trigger {source!r} has no literal text")
    if not case_sensitive:
        literal = fold(literal)
    return Trigger(source, kind, literal, body.strip(), case_sensitive)


@dataclass(slots=True)
class Match:
    """A rule chosen for a message, with what the trigger captured."""

    rule: Any  # tmy.rulebook.model.Rule
    trigger: Trigger | None  # None for a session follow-up
    magic: str
    question: Any  # text for a trigger; a tool call passes its arguments (a map)
    groups: dict[str, Any] = field(default_factory=dict)
