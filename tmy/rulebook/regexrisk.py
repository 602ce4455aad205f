r"""Regex triggers that can backtrack exponentially: the heuristic behind ``check``'s warning.

tmy bounds the time regex triggers take whatever they are (see
:data:`tmy.rulebook.triggers.REGEX_BUDGET`); this analysis only tells the
author, at load time, which patterns are likely to hit that bound. It reads
the standard library's private regex parser; when that changes, the
analysis gives no verdict rather than a wrong one.
"""

from __future__ import annotations

import re
import warnings
from typing import Any


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


# Spellings only the regex module reads that rules use most (``\p{Han}``,
# ``(?<name>…)``), rewritten to what ``re``'s parser accepts for the analysis.
_REGEX_ONLY_SYNTAX = re.compile(r"\\([pP])(?:\{[^}]*\}|[A-Za-z])|\\.|\(\?<(?![=!])", re.DOTALL)

# Characters tried, after the pattern's own, when looking for a text that a
# repeated part matches in two ways; and bounds on how many texts are tried.
_PROBE = "a0_ x.-!\n\té中A"
_MAX_SAMPLES = 32
_MAX_SAMPLE_LEN = 16


def _as_re_syntax(pattern: str) -> str:
    def swap(m: re.Match[str]) -> str:
        if m.group(1):
            return r"\w" if m.group(1) == "p" else r"\W"
        return "(?P<" if m.group(0) == "(?<" else m.group(0)  # other escapes stay

    return _REGEX_ONLY_SYNTAX.sub(swap, pattern)


def _parse(pattern: str, flags: int) -> Any:
    """``re``'s parse tree of ``pattern``, or None for syntax only the regex module knows."""
    from re import _parser  # type: ignore[attr-defined]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. "possible nested set" for [[:alpha:]]
        try:
            return _parser.parse(_as_re_syntax(pattern), flags)
        except Exception:
            return None


def backtracking_risk(pattern: str, *, ignore_case: bool = False) -> str | None:
    r"""Why ``pattern`` can backtrack exponentially on a near-miss, or None.

    Two shapes cause nearly all catastrophic backtracking: a repeat inside a
    repeat (``(a+)+``) and a repeat over a part that matches one text in more
    than one way (``(a|aa)+``, ``(.|\s)*``). The first shows in the parse tree;
    the second is found by generating short texts the repeated part matches and
    checking whether one is also two or more repetitions of it, or is matched
    by two alternatives of one branch. A heuristic for ``check`` (tmy bounds
    the time regex triggers take either way): it can miss a pattern, and it
    says nothing about syntax only the regex module reads.
    """
    parsed = _parse(pattern, re.IGNORECASE if ignore_case else 0)
    if parsed is None:
        return None
    if _walk_repeats(parsed, False):
        return "has a nested quantifier (a repeat inside a repeat)"
    try:
        return _Ambiguity(parsed, pattern).find(parsed)
    except Exception:  # re's private parser or compiler changed: no verdict
        return None


def nested_quantifier(pattern: str) -> bool:
    r"""Whether ``pattern`` repeats something that itself repeats (``(a+)+``, ``(\w*\s?)*``)."""
    parsed = _parse(pattern, 0)
    return parsed is not None and _walk_repeats(parsed, False)


class _Ambiguity:
    """Finds a repeat whose body matches one text in two ways (see :func:`backtracking_risk`).

    Works on ``re``'s parse tree and compiles sub-trees with ``re``'s compiler
    to test texts against them (``fullmatch``), so it agrees with real matching.
    """

    def __init__(self, parsed: Any, pattern: str) -> None:
        from re import _compiler, _constants, _parser  # type: ignore[attr-defined]

        self.c = _constants
        self.state = parsed.state
        self.compile = _compiler.compile
        self.subpattern = _parser.SubPattern
        self.probe = "".join(dict.fromkeys(pattern + _PROBE))[:48]
        self.matchers: dict[str, Any] = {}

    def matches(self, items: Any, text: str) -> bool:
        key = repr(items)
        m = self.matchers.get(key)
        if m is None:
            m = self.matchers[key] = self.compile(
                self.subpattern(self.state, list(items))
            ).fullmatch
        return m(text) is not None

    def find(self, items: Any) -> str | None:
        """The description of the first ambiguous repeat in ``items``, or None."""
        c = self.c
        for op, arg in items:
            found = None
            if op in (c.MAX_REPEAT, c.MIN_REPEAT):
                low, high, sub = arg
                if (high is c.MAXREPEAT or high > 1) and high != low:
                    found = self.repeat_ambiguity(sub)
                found = found or self.find(sub)
            elif op is c.POSSESSIVE_REPEAT:  # never backtracks into itself
                found = self.find(arg[2])
            elif op is c.SUBPATTERN:
                found = self.find(arg[-1])
            elif op is c.BRANCH:
                found = next(filter(None, map(self.find, arg[1])), None)
            elif op in (c.ASSERT, c.ASSERT_NOT):
                found = self.find(arg[1])
            elif op is c.ATOMIC_GROUP:
                found = self.find(arg)
            if found:
                return found
        return None

    def repeat_ambiguity(self, body: Any) -> str | None:
        c = self.c
        twice = [(c.MAX_REPEAT, (2, c.MAXREPEAT, body))]
        for text in self.samples(body) or ():
            if text and self.matches(body, text) and self.matches(twice, text):
                return f"repeats a group that matches {text!r} both once and as several repetitions"
        overlap = self.branch_overlap(body)
        if overlap is not None:
            what = repr(overlap) if overlap else "the empty text"
            return f"repeats a choice whose alternatives both match {what}"
        return None

    def branch_overlap(self, items: Any) -> str | None:
        """A text that two alternatives of one branch in ``items`` both match."""
        c = self.c
        for op, arg in items:
            found = None
            if op is c.BRANCH:
                alts = arg[1]
                for i, alt in enumerate(alts):
                    for text in self.samples(alt) or ():
                        if self.matches(alt, text) and any(
                            self.matches(other, text) for j, other in enumerate(alts) if j != i
                        ):
                            return text
                found = next((t for t in map(self.branch_overlap, alts) if t is not None), None)
            elif op is c.SUBPATTERN:
                found = self.branch_overlap(arg[-1])
            elif op in (c.MAX_REPEAT, c.MIN_REPEAT):
                found = self.branch_overlap(arg[2])
            if found is not None:
                return found
        return None

    def samples(self, items: Any) -> list[str] | None:
        """Some short texts ``items`` may match (checked by the caller), or None when unknown."""
        out = [""]
        for op, arg in items:
            part = self.item_samples(op, arg)
            if not part:
                return None
            out = [a + b for a in out for b in part if len(a) + len(b) <= _MAX_SAMPLE_LEN]
            out = out[:_MAX_SAMPLES]
        return out or None

    def item_samples(self, op: Any, arg: Any) -> list[str] | None:
        c = self.c
        if op is c.LITERAL:
            return [chr(arg)]
        if op in (c.NOT_LITERAL, c.ANY, c.IN):
            return [ch for ch in self.probe if self.matches([(op, arg)], ch)][:4]
        if op in (c.AT, c.ASSERT, c.ASSERT_NOT):
            return [""]
        if op is c.SUBPATTERN:
            return self.samples(arg[-1])
        if op is c.ATOMIC_GROUP:
            return self.samples(arg)
        if op is c.BRANCH:
            texts = [t for alt in arg[1] for t in self.samples(alt) or ()]
            return list(dict.fromkeys(texts))[:_MAX_SAMPLES] or None
        if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
            low, high, sub = arg
            part = self.samples(sub)
            if part is None or low > 4:
                return None
            texts = []
            for count in sorted({low, min(low + 1, high), min(max(low, 2), high)}):
                got = [""]
                for _ in range(count):
                    got = [a + b for a in got for b in part if len(a) + len(b) <= _MAX_SAMPLE_LEN]
                    got = got[:_MAX_SAMPLES]
                texts.extend(got)
            return list(dict.fromkeys(texts))[:_MAX_SAMPLES] or None
        return None  # backreferences, conditionals: no samples
