"""Trigger words: parsing, normalisation and the match result.

``word`` exact, ``word*`` prefix, ``*word`` suffix, ``*word*`` contains,
``re:<regex>`` regular expression, ``*`` anything. Matching is done on the
message normalised to Unicode NFKC and trimmed, and case-folded unless the rule
is ``case_sensitive``.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from tmy.errors import RuleError

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
    regex: re.Pattern[str] | None = None
    groups: tuple[str, ...] = ()


def normalise(text: str) -> str:
    """NFKC + trim: the text case-sensitive triggers see."""
    return unicodedata.normalize("NFKC", text).strip()


def fold(text: str) -> str:
    return text.casefold()


def parse_trigger(source: Any, *, case_sensitive: bool) -> Trigger:
    """Compile one trigger string; RuleError (without location) when it is malformed."""
    if not isinstance(source, str) or not source.strip():
        raise RuleError(f"a trigger must be a non-empty string, got {source!r}")
    if source.startswith("re:"):
        pattern = source[3:]
        flags = 0 if case_sensitive else re.IGNORECASE
        try:
            regex = re.compile(pattern, flags)
        except re.error as exc:
            raise RuleError(f"trigger {source!r}: invalid regular expression: {exc}") from None
        return Trigger(source, "regex", "", pattern, case_sensitive, regex, tuple(regex.groupindex))
    text = unicodedata.normalize("NFKC", source)
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
