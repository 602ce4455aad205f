r"""Trigger words: parsing, the warnings ``check`` gives, and the match result.

``word`` exact, ``word*`` prefix, ``*word`` suffix, ``*word*`` contains,
``re:<regex>`` regular expression, ``*`` anything. Matching is done on the
message stripped of characters drawn as nothing, normalised to Unicode NFKC,
trimmed, and case-folded unless the rule is ``case_sensitive``
(:mod:`tmy.rulebook.textform`); the trigger index (:mod:`tmy.rulebook.index`)
finds the rule.

Regex triggers are compiled with the ``regex`` module rather than ``re``: it
reads the same syntax (Unicode ``\w``, lookarounds and backreferences keep
working, unlike a linear-time engine such as RE2) and, unlike ``re``, it can stop
a match after a time limit. The index gives all regex triggers of one message a
shared budget (:data:`REGEX_BUDGET`), so a pattern with catastrophic
backtracking (``^(a+)+$``) costs one message at most that long instead of
stalling every chat; ``check`` warns about nested quantifiers and repeated
alternatives that overlap (``(a|aa)+``) either way (:mod:`tmy.rulebook.regexrisk`).
"""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import regex

from tmy.errors import RuleError
from tmy.logs import get_logger
from tmy.rulebook.regexrisk import backtracking_risk, nested_quantifier
from tmy.rulebook.textform import (
    TextMap,
    fold,
    invisible_characters,
    normal_form,
    normalise,
    strip_invisible,
)

# names other modules and tests import from here (the text form and the regex risk
# analysis live in their own modules)
__all__ = [
    "KIND_RANK",
    "REGEX_BUDGET",
    "Match",
    "TextMap",
    "Trigger",
    "backtracking_risk",
    "fold",
    "invisible_characters",
    "nested_quantifier",
    "normal_form",
    "normalise",
    "parse_trigger",
    "strip_invisible",
    "trigger_warnings",
]

log = get_logger("tmy")

# Seconds of regex matching one message may cost, all regex triggers together;
# a trigger still running then is abandoned (no match) and logged.
REGEX_BUDGET = 0.05

# Precedence of kinds when several rules match (lower wins).
KIND_RANK = {"exact": 0, "prefix": 1, "suffix": 2, "contains": 3, "regex": 4, "any": 5}


_new = object.__new__  # match_of: a Match field by field, no __init__ frame


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
    # a regex anchored at the start with literal ASCII text (``^rx-…``): a text that
    # does not start with it cannot match, and is not searched (lower case unless
    # case_sensitive); "" when the pattern has no such prefix
    anchor: str = ""


def trigger_warnings(trig: Trigger) -> list[str]:
    """What ``check`` should warn about in one trigger (it still loads)."""
    out = []
    risk = (
        backtracking_risk(trig.magic, ignore_case=not trig.case_sensitive)
        if trig.kind == "regex"
        else None
    )
    if risk:
        out.append(
            f"regex trigger {trig.source!r} {risk}:"
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


def _anchor(pattern: str, case_sensitive: bool) -> str:
    """The ASCII literal a match of ``pattern`` must start the text with, or "".

    Read with the standard library's parser: a pattern it cannot read (syntax
    only the ``regex`` module knows), a multi-line one, or one that does not
    start with ``^`` and literal characters has no anchor and is always searched.
    """
    import re
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from re import _parser as sre_parse  # type: ignore[attr-defined]
        except ImportError:  # pragma: no cover - Python < 3.11
            import sre_parse  # type: ignore[no-redef]
        try:
            parsed = sre_parse.parse(pattern, 0 if case_sensitive else re.IGNORECASE)
        except Exception:
            return ""
    if parsed.state.flags & (re.MULTILINE | re.VERBOSE):
        return ""
    items = list(parsed)
    if not items or items[0] != (sre_parse.AT, sre_parse.AT_BEGINNING):
        return ""
    chars = []
    for op, arg in items[1:]:
        if op is not sre_parse.LITERAL or arg > 127:
            break
        chars.append(chr(arg))
    literal = "".join(chars)
    if case_sensitive and parsed.state.flags & re.IGNORECASE:
        return ""  # an inline (?i) in a case-sensitive trigger: compared as written, rare
    return literal if case_sensitive else literal.lower()


def parse_trigger(source: Any, *, case_sensitive: bool) -> Trigger:
    """Compile one trigger string; RuleError (without location) when it is malformed."""
    if not isinstance(source, str) or not source.strip():
        raise RuleError(f"a trigger must be a non-empty string, got {source!r}")
    if source.startswith("re:"):
        pattern = strip_invisible(source[3:])  # messages reach it without them
        flags = regex.V0 if case_sensitive else regex.V0 | regex.IGNORECASE
        try:
            compiled = regex.compile(pattern, flags)
        except (regex.error, ValueError, OverflowError) as exc:
            raise RuleError(f"trigger {source!r}: invalid regular expression: {exc}") from None
        groups = tuple(compiled.groupindex)
        anchor = _anchor(pattern, case_sensitive)
        return Trigger(source, "regex", "", pattern, case_sensitive, compiled, groups, 0, anchor)
    # ASCII holds no invisible character, and NFKC keeps it as it is
    text = source if source.isascii() else unicodedata.normalize("NFKC", strip_invisible(source))
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
        folded = fold(literal)
        if folded != literal:  # else keep the one string (100,000 rules keep them all)
            literal = folded
    magic = body.strip()
    if magic == literal:
        magic = literal  # one string, not two equal ones (100,000 rules keep them all)
    return Trigger(source, kind, literal, magic, case_sensitive)


@dataclass(slots=True)
class Match:
    """A rule chosen for a message, with what the trigger captured."""

    rule: Any  # tmy.rulebook.model.Rule
    trigger: Trigger | None  # None for a session follow-up
    magic: str
    question: Any  # text for a trigger; a tool call passes its arguments (a map)
    groups: dict[str, Any] = field(default_factory=dict)


def match_of(entry: tuple[Any, Any, Trigger], question: str) -> Match:
    """``Match(rule, trigger, magic, question, {})`` of an index entry (rank key, rule,
    trigger), without a frame."""
    trig = entry[2]
    match = _new(Match)
    match.rule = entry[1]
    match.trigger = trig
    match.magic = trig.magic
    match.question = question
    match.groups = {}
    return match


def question_after(trig: Trigger, text: str, shown: str) -> str:
    """QUESTION of an exact or prefix hit of ``trig`` on ``text``: what follows a prefix
    literal, stripped ("" for an exact hit, and for the bare "echo" of "echo *"), cut from
    ``shown`` (the text before case folding) when folding kept its length."""
    n = len(trig.literal)
    if len(text) <= n:
        return ""
    return (shown if len(shown) == len(text) else text)[n:].strip()


def regex_candidates(entries: list[Any], shown: str) -> Iterator[tuple[Any, str, dict]]:
    """Regex triggers matching ``shown``, all of them within one time budget (``entries``:
    the index's (rank key, rule, trigger)).

    A trigger still matching when the budget runs out (catastrophic
    backtracking, or simply too many slow patterns) is abandoned as no match,
    with a warning naming it; later regex triggers are not tried for this
    message. Other messages never wait on it for longer than the budget.
    """
    deadline = time.perf_counter() + REGEX_BUDGET
    for e in entries:
        anchor = e[2].anchor
        if anchor:  # "^literal…": a text that does not start so cannot match
            head = shown[: len(anchor)]
            if (head if e[2].case_sensitive else head.lower()) != anchor:
                continue
        left = deadline - time.perf_counter()
        try:
            if left <= 0:
                raise TimeoutError
            m = e[2].regex.search(shown, timeout=left)
        except TimeoutError:
            log.warning(
                "trigger.regex_timeout",
                trigger=e[2].source,
                rule=e[1].id,
                budget_ms=REGEX_BUDGET * 1000,
                hint="this pattern backtracks too much on this text; avoid nested quantifiers",
            )
            return
        if m:
            groups = {k: v for k, v in m.groupdict().items() if v is not None}
            yield e, groups.get("QUESTION", ""), groups | {"_magic": m.group(0), "_match": m}


def is_word_prefix(literal: str) -> bool:
    """One word and the space after it: a text starts with it exactly when its first
    word and space are it (the only space of ``literal`` is its last character)."""
    return literal.find(" ") == len(literal) - 1 > 0
