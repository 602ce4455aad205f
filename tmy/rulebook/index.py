"""The trigger index: finds the rule for a message without looping over rules.

Exact literals are a dict lookup; prefix and suffix literals are dict lookups
for each distinct literal length (a handful, whatever the number of rules);
``*contains*`` literals share one Aho-Corasick automaton (pyahocorasick), so
all of them are found in one pass over the text. Regex triggers are the
documented exception: each is tried in turn.

Candidates are ranked by (higher priority, kind, longer literal, file order);
the first whose rule's filters admit the message wins.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import ahocorasick

from tmy.logs import get_logger
from tmy.rulebook.triggers import KIND_RANK, REGEX_BUDGET, Match, Trigger, fold, normalise

log = get_logger("tmy")

Entry = tuple[tuple[int, int, int, int], Any, Trigger]  # (rank key, rule, trigger)


@dataclass
class _Side:
    """Index of the triggers of one case mode (folded or case-sensitive)."""

    exact: dict[str, list[Entry]] = field(default_factory=dict)
    prefix: dict[str, list[Entry]] = field(default_factory=dict)
    suffix: dict[str, list[Entry]] = field(default_factory=dict)
    contains: dict[str, list[Entry]] = field(default_factory=dict)
    regex: list[Entry] = field(default_factory=list)
    any: list[Entry] = field(default_factory=list)
    prefix_lengths: tuple[int, ...] = ()
    suffix_lengths: tuple[int, ...] = ()
    automaton: Any = None

    def add(self, entry: Entry) -> None:
        trig = entry[2]
        if trig.kind in ("regex", "any"):
            getattr(self, trig.kind).append(entry)
        else:
            getattr(self, trig.kind).setdefault(trig.literal, []).append(entry)
            # "echo *" also fires on a bare "echo" (QUESTION ""), but not on "echoes"
            bare = trig.literal.strip()
            if trig.kind in ("prefix", "suffix") and bare != trig.literal and bare:
                self.exact.setdefault(bare, []).append(entry)

    def freeze(self) -> None:
        self.prefix_lengths = tuple(sorted({len(k) for k in self.prefix}))
        self.suffix_lengths = tuple(sorted({len(k) for k in self.suffix}))
        if self.contains:
            auto = ahocorasick.Automaton()
            for literal in self.contains:
                auto.add_word(literal, literal)
            auto.make_automaton()
            self.automaton = auto

    def candidates(
        self, text: str, shown: str, kinds: frozenset[str] | None = None
    ) -> Iterator[tuple[Entry, str, dict[str, str]]]:
        """Every trigger of this side that matches ``text``, with its QUESTION.

        ``shown`` is the same text before case folding; QUESTION is cut from it
        when folding kept the length (it almost always does), so the user's
        capitals survive.
        """
        src = shown if len(shown) == len(text) else text
        size = len(text)
        if (kinds is None or "exact" in kinds) and text in self.exact:
            for e in self.exact[text]:
                yield e, "", {}
        if kinds is None or "prefix" in kinds:
            for n in self.prefix_lengths:
                if n > size:
                    break
                for e in self.prefix.get(text[:n], ()):
                    yield e, src[n:].strip(), {}
        if kinds is None or "suffix" in kinds:
            for n in self.suffix_lengths:
                if n > size:
                    break
                for e in self.suffix.get(text[size - n :], ()):
                    yield e, src[: size - n].strip(), {}
        if self.automaton is not None and (kinds is None or "contains" in kinds):
            seen: set[str] = set()
            for end, literal in self.automaton.iter(text):
                if literal in seen:
                    continue
                seen.add(literal)
                start = end - len(literal) + 1
                question = " ".join(p for p in (src[:start].strip(), src[end + 1 :].strip()) if p)
                for e in self.contains[literal]:
                    yield e, question, {}
        if self.regex and (kinds is None or "regex" in kinds):
            yield from _regex_candidates(self.regex, shown)
        if kinds is None or "any" in kinds:
            for e in self.any:
                yield e, shown, {}


def _regex_candidates(entries: list[Entry], shown: str) -> Iterator[tuple[Entry, str, dict]]:
    """Regex triggers matching ``shown``, all of them within one time budget.

    A trigger still matching when the budget runs out (catastrophic
    backtracking, or simply too many slow patterns) is abandoned as no match,
    with a warning naming it; later regex triggers are not tried for this
    message. Other messages never wait on it for longer than the budget.
    """
    deadline = time.perf_counter() + REGEX_BUDGET
    for e in entries:
        left = deadline - time.perf_counter()
        try:
            if left <= 0:
                raise TimeoutError
            m = e[2].regex.search(shown, timeout=left)
        except TimeoutError:
            log.warning(
                "trigger.regex_timeout",
                trigger=e[2].source,
                rule=getattr(e[1], "id", None),
                budget_ms=REGEX_BUDGET * 1000,
                hint="this pattern backtracks too much on this text; avoid nested quantifiers",
            )
            return
        if m:
            groups = {k: v for k, v in m.groupdict().items() if v is not None}
            yield e, groups.get("QUESTION", ""), groups | {"_magic": m.group(0)}


class TriggerIndex:
    """All triggers of a rulebook, indexed for constant-time matching."""

    def __init__(self, rules: Iterable[Any]) -> None:
        self.folded = _Side()
        self.sensitive = _Side()
        for order, rule in enumerate(rules):
            for trig in rule.triggers:
                key = (-rule.priority, KIND_RANK[trig.kind], -len(trig.literal), order)
                (self.sensitive if trig.case_sensitive else self.folded).add((key, rule, trig))
        self.folded.freeze()
        self.sensitive.freeze()

    def match(self, text: str, admits: Callable[[Any], bool] = lambda rule: True) -> Match | None:
        """The best rule for ``text`` whose filters admit the message, or None."""
        shown = normalise(text)
        found = list(self.folded.candidates(fold(shown), shown))
        found.extend(self.sensitive.candidates(shown, shown))
        if not found:
            return None
        if len(found) > 1:
            found.sort(key=lambda c: c[0][0])
        for (_, rule, trig), question, groups in found:
            if admits(rule):
                magic = groups.pop("_magic", trig.magic)
                return Match(rule, trig, magic, question, groups)
        return None

    def dead_triggers(self) -> list[tuple[Any, Trigger, Any, Trigger]]:
        """Triggers that can never fire: another rule's trigger wins on every text they match.

        Returns ``(rule, trigger, winning_rule, winning_trigger)``. Regex triggers
        are not analysed; a winner only counts when its rule's filters admit every
        message the loser's rule admits (no filters, or the same ones).
        """
        covers = {
            "exact": None,
            "prefix": frozenset({"prefix", "contains", "any"}),
            "suffix": frozenset({"suffix", "contains", "any"}),
            "contains": frozenset({"contains", "any"}),
            "any": frozenset({"any"}),
        }
        dead = []
        for side in (self.folded, self.sensitive):
            entries = {
                id(e[2]): e
                for group in (side.exact, side.prefix, side.suffix, side.contains)
                for lst in group.values()
                for e in lst
            }
            for key, rule, trig in [*entries.values(), *side.any]:
                for (ukey, urule, utrig), _, _ in side.candidates(
                    trig.literal, trig.literal, covers[trig.kind]
                ):
                    if urule is rule or ukey >= key:
                        continue
                    if urule.filters.is_open or urule.filters == rule.filters:
                        dead.append((rule, trig, urule, utrig))
                        break
        return dead
