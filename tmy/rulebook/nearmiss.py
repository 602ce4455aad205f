"""Near misses: triggers that almost fired on a text, and why not (for ``explain``).

Never on the message path: the first ``explain`` builds a second automaton
over every trigger literal (:class:`NearIndex`), kept on the trigger index.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ahocorasick
import regex as regex_module

from tmy.rulebook.textform import fold, normalise
from tmy.rulebook.triggers import REGEX_BUDGET, Trigger

if TYPE_CHECKING:
    from tmy.rulebook.index import Entry, Side

_IGNORECASE = regex_module.IGNORECASE


def near_misses(
    near: NearIndex, text: str, skip: Iterable[Trigger] = (), limit: int = 20
) -> list[NearMiss]:
    """Triggers that almost fired on ``text``, and why not (for ``explain``).

    Two kinds are found: the trigger's literal is in the text but not where
    its kind needs it (``joke *`` on ``tell joke``; ``echo *`` on
    ``echoes``; an exact trigger inside a longer message), and a
    ``case_sensitive`` trigger that would fire if case were ignored.
    Triggers in ``skip`` (those that matched) are left out. A literal found
    inside a longer word is not reported, except at the start or end of the
    message for prefix and suffix triggers. Best first, at most ``limit``.

    ``near`` is the index's :class:`NearIndex` (built on first use, kept on the
    index; :meth:`TriggerIndex.match` never uses it).
    """
    shown = normalise(text)
    folded = fold(shown)
    skipped = {id(t) for t in skip}
    found: dict[int, tuple[tuple[int, int, int, int], Any, Trigger, str, int]] = {}
    if near.automaton is not None and folded:
        for end, needle in near.automaton.iter(folded):
            start = end - len(needle) + 1
            for key, rule, trig in near.by_needle[needle]:
                if id(trig) in skipped:
                    continue
                verdict = _near_verdict(trig, shown, folded, needle, start, end + 1)
                if verdict is None:
                    continue
                why, strength = verdict
                old = found.get(id(trig))
                if old is None or strength > old[4]:
                    found[id(trig)] = (key, rule, trig, why, strength)
    if near.regex:
        for key, rule, trig, loose in _regex_case_misses(near.regex, shown, skipped):
            found[id(trig)] = (
                key,
                rule,
                trig,
                f"{trig.source!r} is case_sensitive; it would match {loose!r} if case were ignored",
                3,
            )
    ranked = sorted(found.values(), key=lambda f: f[0])
    return [NearMiss(rule, trig, key, why) for key, rule, trig, why, _ in ranked[:limit]]


@dataclass(slots=True)
class NearMiss:
    """A trigger that almost matched a text, and why it did not (``explain``)."""

    rule: Any
    trigger: Trigger
    key: tuple[int, int, int, int]
    why: str


@dataclass
class NearIndex:
    """Every trigger literal, case-folded and trimmed, in one automaton; case-sensitive regexes."""

    automaton: Any
    by_needle: dict[str, list[Entry]]
    regex: list[tuple[Entry, Any]]  # case-sensitive regex triggers with a case-blind twin

    @classmethod
    def build(cls, sides: Iterable[Side]) -> NearIndex:
        by_needle: dict[str, list[Entry]] = {}
        regex: list[tuple[Entry, Any]] = []
        seen: set[int] = set()
        for side in sides:
            for group in (side.exact, side.prefix, side.suffix, side.contains):
                for entries in group.values():
                    for entry in entries:
                        trig = entry[2]
                        if id(trig) in seen:
                            continue
                        seen.add(id(trig))
                        needle = fold(trig.literal).strip()
                        if needle:
                            by_needle.setdefault(needle, []).append(entry)
            for entry in side.regex:
                trig = entry[2]
                if trig.case_sensitive:
                    twin = regex_module.compile(trig.regex.pattern, trig.regex.flags | _IGNORECASE)
                    regex.append((entry, twin))
        automaton = None
        if by_needle:
            automaton = ahocorasick.Automaton()
            for needle in by_needle:
                automaton.add_word(needle, needle)
            automaton.make_automaton()
        return cls(automaton, by_needle, regex)


def _is_word(ch: str) -> bool:
    return ch.isascii() and (ch.isalnum() or ch == "_")


def _bounded(text: str, needle: str, start: int, end: int) -> bool:
    """Is ``text[start:end]`` (== needle) not part of a longer ASCII word?

    Literals of other scripts (Chinese has no spaces between words) always count.
    """
    if start > 0 and _is_word(needle[0]) and _is_word(text[start - 1]):
        return False
    return not (end < len(text) and _is_word(needle[-1]) and _is_word(text[end]))


def _near_verdict(
    trig: Trigger, shown: str, folded: str, needle: str, start: int, end: int
) -> tuple[str, int] | None:
    """Why ``trig`` did not fire although its literal ``needle`` is at ``folded[start:end]``.

    Returns (why, strength) — the strongest of several occurrences is kept —
    or None when this occurrence says nothing worth showing.
    """
    if len(needle) < 2 and needle.isascii():
        return None  # "?" or "a" inside a message is noise
    literal = fold(trig.literal) if trig.case_sensitive else trig.literal
    kind = trig.kind
    whole = folded == needle
    at_start = folded.startswith(literal) or (kind == "prefix" and whole)
    at_end = folded.endswith(literal) or (kind == "suffix" and whole)
    fires_folded = (
        (kind == "exact" and whole)
        or (kind == "prefix" and at_start)
        or (kind == "suffix" and at_end)
        or (kind == "contains" and literal.strip() in folded)
    )
    if fires_folded:
        if not trig.case_sensitive:
            return None  # it did fire (a candidate), or the index disagrees: nothing to say
        if len(folded) == len(shown):
            if kind == "prefix" or (kind == "exact" and whole):
                wrote = shown[: len(needle)] if not whole else shown
            elif kind == "suffix":
                wrote = shown[len(shown) - len(needle) :]
            else:
                wrote = shown[start:end]
        else:
            wrote = shown
        return (
            f"{trig.source!r} is case_sensitive and the message has {wrote!r}",
            3,
        )
    if kind == "contains":
        return None
    if kind == "prefix" and start == 0:
        if literal != needle and not whole:  # "echo *" needs "echo " (a space, or the end)
            nxt = shown[end : end + 1] if len(folded) == len(shown) else folded[end : end + 1]
            return (
                f"{trig.source!r} needs {trig.magic!r} followed by a space or the end of "
                f"the message, not {nxt!r}",
                2,
            )
        return None
    if kind == "suffix" and end == len(folded):
        if literal != needle and not whole:
            before = folded[start - 1 : start]
            return (
                f"{trig.source!r} needs a space before {trig.magic!r}, not {before!r}",
                2,
            )
        return None
    if not _bounded(folded, needle, start, end):
        return None
    if kind == "exact":
        return (
            f"{trig.source!r} is an exact trigger: the whole message must be {trig.magic!r}",
            1,
        )
    if kind == "prefix":
        return (
            f"{trig.source!r} fires only when the message starts with {trig.magic!r}; "
            f"here it is at position {start}",
            1,
        )
    return (
        f"{trig.source!r} fires only when the message ends with {trig.magic!r}; "
        f"here it is at position {start}",
        1,
    )


def _regex_case_misses(
    entries: list[tuple[Entry, Any]], shown: str, skipped: set[int]
) -> Iterator[tuple[tuple[int, int, int, int], Any, Trigger, str]]:
    """Case-sensitive regex triggers whose case-blind twin matches ``shown`` (one time budget)."""
    deadline = time.perf_counter() + REGEX_BUDGET
    for (key, rule, trig), twin in entries:
        if id(trig) in skipped:
            continue
        left = deadline - time.perf_counter()
        if left <= 0:
            return
        try:
            m = twin.search(shown, timeout=left)
            if m is not None and trig.regex.search(shown, timeout=left) is not None:
                continue  # it matches as written: not a miss
        except TimeoutError:
            return
        if m is not None:
            yield key, rule, trig, m.group(0)
