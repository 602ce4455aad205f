r"""Trigger words: parsing, normalisation and the match result.

``word`` exact, ``word*`` prefix, ``*word`` suffix, ``*word*`` contains,
``re:<regex>`` regular expression, ``*`` anything. Matching is done on the
message stripped of characters drawn as nothing (format characters such as
U+200B, other default-ignorables, variation selectors after a letter),
normalised to Unicode NFKC, trimmed, and case-folded unless the rule is
``case_sensitive``.

Regex triggers are compiled with the ``regex`` module rather than ``re``: it
reads the same syntax (Unicode ``\w``, lookarounds and backreferences keep
working, unlike a linear-time engine such as RE2) and, unlike ``re``, it can stop
a match after a time limit. The index gives all regex triggers of one message a
shared budget (:data:`REGEX_BUDGET`), so a pattern with catastrophic
backtracking (``^(a+)+$``) costs one message at most that long instead of
stalling every chat; ``check`` warns about nested quantifiers and repeated
alternatives that overlap (``(a|aa)+``) either way.
"""

from __future__ import annotations

import re
import unicodedata
import warnings
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
# Other characters Unicode marks default-ignorable (drawn as nothing) that are
# not Cf: combining grapheme joiner, Hangul fillers, Khmer inherent vowels,
# Mongolian free variation selectors. Same trick, same treatment.
_INVISIBLE.update(
    dict.fromkeys((0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180F))
    | dict.fromkeys((0x3164, 0xFFA0))
)
# Variation selectors are invisible too, but after an emoji they choose how it
# is drawn (❤️, 1️⃣), so they are only removed after a letter ("bad\ufe0fword").
_VARIATION = re.compile("[\ufe00-\ufe0f\U000e0100-\U000e01ef]")
_VARIATION_AFTER_LETTER = re.compile("(?<=[^\\W\\d_])[\ufe00-\ufe0f\U000e0100-\U000e01ef]+")

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


def normalise(text: str) -> str:
    """Invisible characters removed, NFKC, trimmed: what case-sensitive triggers see."""
    if text.isascii():
        return text.strip()  # NFKC and Cf removal change nothing in ASCII
    return normal_form(text)[1].strip()


def normal_form(text: str) -> tuple[str, str]:
    """(``text`` without its invisible characters, that in NFKC): :func:`normalise` untrimmed."""
    # Invisible characters go first, so that NFKC can compose what they kept
    # apart ("e\u200b\u0301" is "é"); NFKC never produces one of them.
    cleaned = strip_invisible(text)
    return cleaned, unicodedata.normalize("NFKC", cleaned)


def strip_invisible(text: str) -> str:
    """``text`` without the characters a reader cannot see (see ``_INVISIBLE``)."""
    text = text.translate(_INVISIBLE)
    if _VARIATION.search(text) is None:  # the common case: one quick scan
        return text
    return _VARIATION_AFTER_LETTER.sub("", text)


_CLEAN_CUT_TRIES = 4  # boundaries tried past a cut NFKC composes across (Indic vowel signs)
_CLEAN_WINDOW = 4  # characters each side of a cut normalised to see whether NFKC composes across


class TextMap:
    """Positions in a message's matched form mapped back to the message as sent.

    Triggers match on :func:`normalise`'s text (case-folded too, for most), but
    QUESTION and regex groups must carry the user's own characters: "记住 我的猫
    叫咪咪，它３岁！" remembers "我的猫叫咪咪，它３岁！", not NFKC's "…,它3岁!".
    NFKC changes lengths ("ﬁ" → "fi", "e" + U+0301 → "é"), so a position in the
    matched text is found in the original by searching, from a guess (lengths
    kept: most text) outwards, for where the normalised prefix reaches it; each
    try normalises the shorter side of the cut (a C-speed ``normalize`` call on
    a short string, not a Python loop over the message). The cut is then moved
    to a piece boundary (before a character of combining class 0) NFKC does not
    compose across; None when there is none near, and callers keep the
    normalised cut.

    :attr:`text` is the message without its invisible characters
    (:func:`strip_invisible`): those are removed before matching and stay out.
    Built only for non-ASCII text that matched (ASCII is its own normal form).
    """

    __slots__ = ("_lead", "_total", "text")

    def __init__(self, text: str, full: str | None = None) -> None:
        """``text``: the message; or, with ``full``, the message already without its
        invisible characters and ``full`` its NFKC form (as :func:`normal_form` gives)."""
        if full is None:
            text, full = normal_form(text)
        self.text = text
        self._lead = len(full) - len(full.lstrip())
        folded = full.casefold()
        self._total = (len(full), len(folded))

    def _length(self, k: int, folded: bool) -> int:
        """The length of the normalised text before ``k`` (from the nearer end)."""
        text = self.text
        if k <= len(text) // 2:
            piece = unicodedata.normalize("NFKC", text[:k])
            return len(piece.casefold() if folded else piece)
        piece = unicodedata.normalize("NFKC", text[k:])
        return self._total[folded] - len(piece.casefold() if folded else piece)

    def _first_beyond(self, limit: int, folded: bool) -> int:
        """The smallest ``k`` whose normalised prefix is longer than ``limit``."""
        n = len(self.text)
        if limit < 0:
            return 0
        if limit >= self._total[folded]:
            return n + 1

        text = self.text

        def beyond(k: int) -> bool:
            while 0 < k < n and not _is_starter(text[k]):  # lengths add up only at boundaries
                k += 1
            return k >= n or self._length(k, folded) > limit

        guess = min(n, limit + 1)  # right when every character kept its length
        if beyond(guess):
            hi, step = guess, 1  # the answer is at or below hi: walk down to a lower bound
            lo = hi - step  # (beyond(0) is false: the empty prefix is no longer than limit)
            while lo > 0 and beyond(lo):
                hi, step = lo, step * 2
                lo = hi - step
            lo = max(lo, 0)
        else:
            lo, step = guess, 1  # the answer is above lo: walk up to an upper bound
            hi = lo + step
            while hi < n and not beyond(hi):
                lo, step = hi, step * 2
                hi = lo + step
            hi = min(hi, n)
        while hi - lo > 1:  # beyond(lo) is false, beyond(hi) true
            mid = (lo + hi) // 2
            if beyond(mid):
                hi = mid
            else:
                lo = mid
        return hi

    def index(self, pos: int, folded: bool, up: bool) -> int | None:
        """The original index of position ``pos`` of the matched (stripped) text.

        ``up``: the first boundary at or after it (a character NFKC split, "㍻"
        → "平成", counts as reached once any part of it is); else the last
        boundary at or before it. None when no clean boundary is near.
        """
        text = self.text
        target = pos + self._lead
        k = self._first_beyond(target - 1, folded) if up else self._first_beyond(target, folded) - 1
        k = min(max(k, 0), len(text))
        step = 1 if up else -1
        for _ in range(_CLEAN_CUT_TRIES):  # to a boundary NFKC does not compose across
            while 0 < k < len(text) and not _is_starter(text[k]):
                k += step
            if self._clean(k):
                return k
            k += step
        return None

    def _clean(self, k: int) -> bool:
        """Is NFKC of the text around ``k`` the two sides' NFKC put together?"""
        text = self.text
        if k <= 0 or k >= len(text) or _never_joins(text[k]):
            return True
        a, b = max(0, k - _CLEAN_WINDOW), min(len(text), k + _CLEAN_WINDOW)
        while a > 0 and not _is_starter(text[a]):
            a -= 1
        while b < len(text) and not _is_starter(text[b]):
            b += 1
        nfkc = unicodedata.normalize
        return nfkc("NFKC", text[a:k]) + nfkc("NFKC", text[k:b]) == nfkc("NFKC", text[a:b])

    def before(self, start: int, folded: bool) -> str | None:
        """The original text before the matched text's position ``start``, trimmed."""
        k = self.index(start, folded, up=False)
        return None if k is None else self.text[:k].strip()

    def after(self, end: int, folded: bool) -> str | None:
        """The original text from the matched text's position ``end``, trimmed."""
        k = self.index(end, folded, up=True)
        return None if k is None else self.text[k:].strip()

    def span(self, start: int, end: int, folded: bool) -> str | None:
        """The original text of the matched text's ``[start, end)`` (not trimmed)."""
        a, b = self.index(start, folded, up=False), self.index(end, folded, up=True)
        return None if a is None or b is None else self.text[a:b]


def _never_joins(ch: str) -> bool:
    """Does NFKC leave ``ch`` apart from what precedes it? (Latin-1, CJK, kana, Hangul
    syllables, full-width forms: no composition pair ends with one of them.)"""
    cp = ord(ch)
    return (
        cp < 0x300
        or 0x3000 <= cp <= 0x3098
        or 0x30A0 <= cp <= 0x30FF
        or 0x3400 <= cp <= 0x9FFF
        or 0xAC00 <= cp <= 0xD7A3
        or 0xFF00 <= cp <= 0xFFEF
    )


def _is_starter(ch: str) -> bool:
    """Can NFKC's output of a piece starting at ``ch`` be made without what comes before?"""
    if unicodedata.combining(ch):
        return False
    cp = ord(ch)
    return not (0x1161 <= cp <= 0x1175 or 0x11A8 <= cp <= 0x11C2)  # Hangul jamo V, T


def invisible_characters(text: str) -> list[str]:
    """What :func:`strip_invisible` removes from ``text``, as ``U+200B`` names (for ``check``)."""
    found = {ord(c) for c in text if ord(c) in _INVISIBLE}
    for m in _VARIATION_AFTER_LETTER.finditer(text.translate(_INVISIBLE)):
        found.update(map(ord, m.group()))
    return [f"U+{cp:04X}" for cp in sorted(found)]


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


def fold(text: str) -> str:
    return text.casefold()


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
    text = unicodedata.normalize("NFKC", strip_invisible(source))
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
