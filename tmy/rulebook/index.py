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

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import ahocorasick

from tmy.rulebook.dead import dead_triggers
from tmy.rulebook.nearmiss import NearIndex, NearMiss, near_misses
from tmy.rulebook.textform import TextMap, fold, normal_form, normalise
from tmy.rulebook.triggers import (
    KIND_RANK,
    Match,
    Trigger,
    is_word_prefix,
    match_of,
    question_after,
    regex_candidates,
)

Entry = tuple[tuple[int, int, int, int], Any, Trigger]  # (rank key, rule, trigger)
_RARE_KINDS = frozenset({"suffix", "contains", "regex", "any"})


@dataclass
class Side:
    """Index of the triggers of one case mode (folded or case-sensitive)."""

    exact: dict[str, Sequence[Entry]] = field(default_factory=dict)
    prefix: dict[str, Sequence[Entry]] = field(default_factory=dict)
    suffix: dict[str, Sequence[Entry]] = field(default_factory=dict)
    contains: dict[str, Sequence[Entry]] = field(default_factory=dict)
    regex: list[Entry] = field(default_factory=list)
    any: list[Entry] = field(default_factory=list)
    # lengths of the prefix literals other than "word " (one word and its space), which
    # are found with a single lookup of the text's first word, whatever their number
    prefix_lengths: tuple[int, ...] = ()
    word_prefixes: bool = False
    suffix_lengths: tuple[int, ...] = ()
    automaton: Any = None
    used: bool = False  # holds any trigger (set by freeze)
    plain: bool = True  # only exact and prefix triggers (set by freeze): :meth:`best` applies
    prefix_longest: tuple[int, ...] = ()  # every prefix literal length, longest first
    prefix_top: int = 0  # the best (lowest) -priority among the prefix triggers
    prefix_flat: bool = True  # every prefix trigger has that priority (none set: the usual)

    def add(self, entry: Entry) -> None:
        trig = entry[2]
        if trig.kind in ("regex", "any"):
            getattr(self, trig.kind).append(entry)
        else:
            _put(getattr(self, trig.kind), trig.literal, entry)
            # "echo *" also fires on a bare "echo" (QUESTION ""), but not on "echoes"
            bare = trig.literal.strip()
            if trig.kind in ("prefix", "suffix") and bare != trig.literal and bare:
                _put(self.exact, bare, entry)

    def freeze(self) -> None:
        """Ready for matching: each literal's entries as a tuple (a third of a list's bytes
        for the one entry most literals have), the lengths to look up, the automaton."""
        for table in (self.exact, self.prefix, self.suffix, self.contains):
            for literal, entries in table.items():
                table[literal] = tuple(entries)  # type: ignore[assignment]
        self.used = bool(  # read per message: a plain attribute
            self.exact or self.prefix or self.suffix or self.contains or self.regex or self.any
        )
        self.plain = not (self.suffix or self.contains or self.regex or self.any)
        self.prefix_longest = tuple(sorted({len(k) for k in self.prefix}, reverse=True))
        priorities = {e[0][0] for es in self.prefix.values() for e in es}
        self.prefix_top = min(priorities, default=0)
        self.prefix_flat = len(priorities) <= 1
        self.word_prefixes = any(map(is_word_prefix, self.prefix))
        self.prefix_lengths = tuple(sorted({len(k) for k in self.prefix if not is_word_prefix(k)}))
        self.suffix_lengths = tuple(sorted({len(k) for k in self.suffix}))
        if self.contains:
            auto = ahocorasick.Automaton()
            for literal in self.contains:
                auto.add_word(literal, literal)
            auto.make_automaton()
            self.automaton = auto

    def collect(self, text: str, shown: str) -> list[tuple[Entry, str, dict[str, str]]]:
        """:meth:`candidates` as a list, without a generator on the per-message path.

        Exact and prefix literals (nearly every trigger) are plain dict lookups
        here; the rarer kinds fall back to :meth:`candidates`.
        """
        src = shown if len(shown) == len(text) else text
        size = len(text)
        found: list[tuple[Entry, str, dict[str, str]]] = []
        exact = self.exact.get(text)
        if exact is not None:
            for e in exact:
                found.append((e, "", {}))
        prefix = self.prefix
        word = text.find(" ") + 1 if self.word_prefixes else 0  # "kw5 " of "kw5 hello"
        if word > 1:
            hit = prefix.get(text[:word])
            if hit is not None:
                question = src[word:].strip()
                for e in hit:
                    found.append((e, question, {}))
        for n in self.prefix_lengths:
            if n > size:
                break
            if n == word:  # the same key: looked up above
                continue
            hit = prefix.get(text[:n])
            if hit is not None:
                question = src[n:].strip()
                for e in hit:
                    found.append((e, question, {}))
        if self.suffix or self.contains or self.regex or self.any:
            found.extend(self.candidates(text, shown, _RARE_KINDS))
        return found

    def best(self, text: str, shown: str) -> Match | None:
        """:meth:`best_entry` as a Match (``shown``: ``text`` before case folding)."""
        entry = self.best_entry(text)
        return None if entry is None else match_of(entry, question_after(entry[2], text, shown))

    def best_entry(self, text: str) -> Entry | None:
        """The best-ranked exact or prefix trigger entry matching ``text``, without filters
        (:meth:`collect` and a sort, for a :attr:`plain` side: no list, no sort, and no
        Match, which the engine's FAQ way does without: it asks this).

        Prefix lengths are tried longest first, and stop once no shorter literal can
        outrank the best hit (none of a higher priority): at 10,000 rules ``kw1*`` …
        ``kw9999*``, "kw9999 hi" is one lookup, not four.
        """
        best: Entry | None = None
        exact = self.exact.get(text)
        if exact is not None:
            for e in exact:
                if best is None or e[0] < best[0]:
                    best = e
        prefix = self.prefix
        word = text.find(" ") + 1 if self.word_prefixes else 0  # "kw5 " of "kw5 hello"
        if word > 1:
            hit = prefix.get(text[:word])
            if hit is not None:
                for e in hit:
                    if best is None or e[0] < best[0]:
                        best = e
        size = len(text)
        top = self.prefix_top
        for n in self.prefix_longest:
            if n > size or n == word:  # too long, or the key looked up above
                continue
            if best is not None:
                key = best[0]  # stop: every shorter prefix ranks below the best hit
                if key[0] < top or (key[0] == top and (key[1] == 0 or -key[2] > n)):
                    break
            hit = prefix.get(text[:n])
            if hit is not None:
                for e in hit:
                    if best is None or e[0] < best[0]:
                        best = e
                if self.prefix_flat:  # one priority: no shorter literal ranks above this hit
                    break
        return best

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
            word = text.find(" ") + 1 if self.word_prefixes else 0
            if word > 1:
                for e in self.prefix.get(text[:word], ()):
                    yield e, src[word:].strip(), {}
            for n in self.prefix_lengths:
                if n > size:
                    break
                if n == word:
                    continue
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
            yield from regex_candidates(self.regex, shown)
        if kinds is None or "any" in kinds:
            for e in self.any:
                yield e, shown, {}


def _admit_all(rule: Any) -> bool:
    return True


def _as_sent(match: Match, form: tuple[str, str], shown: str, regex_match: Any) -> Match:
    """``match`` with QUESTION (and regex groups, MAGIC) cut from the text as the user sent it.

    ``form`` is the message's :func:`normal_form` (its text as sent, without
    invisible characters, and that in NFKC); ``shown`` the NFKC form trimmed.

    The index cut them from ``shown`` (NFKC, maybe case-folded), which folds the
    user's full-width punctuation and digits ("，３！" → ",3!"); the boundaries
    found there are mapped back to ``text`` (:class:`TextMap`). Where a boundary
    cannot be mapped (NFKC composing across it, very rare) the match is kept.
    """
    trig = match.trigger
    if trig is None:
        return match
    kind = trig.kind
    if kind == "exact" or (kind != "regex" and match.question == ""):
        return match
    tm = TextMap(*form)
    if kind == "any":
        match.question = tm.text.strip()
        return match
    if kind == "regex":
        if regex_match is None:
            return match
        groups = {}
        for name, value in match.groups.items():
            a, b = regex_match.span(name)
            groups[name] = tm.span(a, b, False) if a >= 0 else value
        magic = tm.span(*regex_match.span(0), False)
        if magic is None or None in groups.values():
            return match
        match.groups, match.magic = groups, magic
        if "QUESTION" in groups:
            match.question = groups["QUESTION"]
        return match
    folded = not trig.case_sensitive
    literal = trig.literal
    question: str | None = match.question
    if kind == "prefix":
        question = tm.after(len(literal), folded)
    elif kind == "suffix":
        size = len(fold(shown) if folded else shown)
        question = tm.before(size - len(literal), folded)
    elif kind == "contains":
        start = (fold(shown) if folded else shown).find(literal)
        parts = (tm.before(start, folded), tm.after(start + len(literal), folded))
        question = None if None in parts else " ".join(p for p in parts if p)
    if question is not None:
        match.question = question
    return match


class TriggerIndex:
    """All triggers of a rulebook, indexed for constant-time matching."""

    def __init__(self, rules: Iterable[Any]) -> None:
        self.folded = Side()
        self.sensitive = Side()
        for order, rule in enumerate(rules):
            for trig in rule.triggers:
                key = (-rule.priority, KIND_RANK[trig.kind], -len(trig.literal), order)
                (self.sensitive if trig.case_sensitive else self.folded).add((key, rule, trig))
        self.folded.freeze()
        self.sensitive.freeze()
        # the one lookup an ASCII text needs when every trigger is a case-folded exact or
        # prefix literal and no rule has filters to ask (:meth:`match`'s first way; the
        # engine calls it directly): ``quick(shown.casefold())``, the best entry; else None
        plain = self.folded.plain and not self.sensitive.used
        self.quick = self.folded.best_entry if plain else None

    def match(self, text: str, admits: Callable[[Any], bool] | None = None) -> Match | None:
        """The best rule for ``text`` whose filters admit the message (``admits``; None:
        every rule's do), or None."""
        if text.isascii():
            shown = text.strip()  # NFKC and invisible-character removal change no ASCII
            form = None
            if admits is None and self.folded.plain and not self.sensitive.used:
                return self.folded.best(shown.casefold(), shown)  # fold(), inline
        else:
            form = normal_form(text)
            shown = form[1].strip()
        if admits is None:
            admits = _admit_all
        found = self.folded.collect(fold(shown), shown)
        if self.sensitive.used:
            found.extend(self.sensitive.candidates(shown, shown))
        if not found:
            return None
        if len(found) > 1:
            found.sort(key=lambda c: c[0][0])
        for (_, rule, trig), question, groups in found:
            if admits(rule):
                magic = groups.pop("_magic", trig.magic)
                regex_match = groups.pop("_match", None)
                if form is None:  # matched as sent: QUESTION is the user's text already
                    return Match(rule, trig, magic, question, groups)
                match = Match(rule, trig, magic, question, groups)
                return _as_sent(match, form, shown, regex_match)
        return None

    def explain_matches(self, text: str) -> list[Candidate]:
        """Every trigger that matches ``text``, filters ignored, best first (for ``explain``).

        The order is exactly the one :meth:`match` walks, so the first candidate
        whose rule's filters admit a message is the rule ``match`` returns.
        Slower than :meth:`match` (it builds every Match); never on the hot path.
        """
        shown = normalise(text)
        found = list(self.folded.candidates(fold(shown), shown))
        found.extend(self.sensitive.candidates(shown, shown))
        found.sort(key=lambda c: c[0][0])
        out: list[Candidate] = []
        seen: set[int] = set()
        for (key, rule, trig), question, groups in found:
            if id(trig) in seen:
                continue
            seen.add(id(trig))
            groups = dict(groups)
            magic = groups.pop("_magic", trig.magic)
            regex_match = groups.pop("_match", None)
            match = Match(rule, trig, magic, question, groups)
            if not text.isascii():
                match = _as_sent(match, normal_form(text), shown, regex_match)
            out.append(Candidate(rule, trig, key, match))
        return out

    def near_misses(
        self, text: str, skip: Iterable[Trigger] = (), limit: int = 20
    ) -> list[NearMiss]:
        """Triggers that almost fired on ``text``, and why not (:mod:`tmy.rulebook.nearmiss`)."""
        return near_misses(self._near_index(), text, skip, limit)

    def _near_index(self) -> NearIndex:
        near = self.__dict__.get("_near")
        if near is None:
            near = self._near = NearIndex.build((self.folded, self.sensitive))
        return near

    def dead_triggers(self) -> list[tuple[Any, Trigger, Any, Trigger]]:
        """Triggers that can never fire (:func:`tmy.rulebook.dead.dead_triggers`)."""
        return dead_triggers((self.folded, self.sensitive))


@dataclass(slots=True)
class Candidate:
    """A trigger that matched a text, with the key it is ranked by (``explain``)."""

    rule: Any
    trigger: Trigger
    key: tuple[int, int, int, int]  # (-priority, kind rank, -literal length, file order)
    match: Match


def _put(table: dict[str, Any], literal: str, entry: Entry) -> None:
    """A one-tuple for a literal's first entry (freeze keeps it: no list freed among the
    rules, ~96 B of RSS a rule), a list from its second on."""
    got = table.get(literal)
    if got is None:
        table[literal] = (entry,)
    elif type(got) is tuple:
        table[literal] = [*got, entry]
    else:
        got.append(entry)
