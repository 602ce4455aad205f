"""The form of a message that triggers match, and the way back to the text as sent.

Triggers match on the message stripped of characters drawn as nothing
(format characters such as U+200B, other default-ignorables, variation
selectors after a letter), normalised to Unicode NFKC, trimmed, and
case-folded unless the rule is ``case_sensitive``. QUESTION and regex groups
must still carry the user's own characters: :class:`TextMap` maps positions in
the matched form back to the message as sent.
"""

from __future__ import annotations

import functools
import re
import unicodedata

# Invisible format characters (Unicode category Cf: zero-width space/joiners,
# word joiner, BOM, soft hyphen, bidi controls, …). Removed before matching so
# that "bad\u200bword" cannot slip past a "*badword*" trigger.
# (Every Cf code point lies below U+20000 or in the tag block U+E0000-U+E0FFF;
# scanning just those keeps the scan short.)
# Other characters Unicode marks default-ignorable (drawn as nothing) that are
# not Cf: combining grapheme joiner, Hangul fillers, Khmer inherent vowels,
# Mongolian free variation selectors. Same trick, same treatment.
_IGNORABLE_NOT_CF = (0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180F)


@functools.cache
def invisible_table() -> dict[int, None]:
    """The ``str.translate`` table deleting the invisible characters above.

    Built on first use, not at import: the scan of ~200,000 code points costs ~15 ms,
    which every one-shot command would pay (``serve`` builds it at start-up).
    """
    table: dict[int, None] = {
        cp: None
        for cp in (*range(0x20000), *range(0xE0000, 0xE1000))
        if unicodedata.category(chr(cp)) == "Cf"
    }
    table.update(dict.fromkeys(_IGNORABLE_NOT_CF) | dict.fromkeys((0x3164, 0xFFA0)))
    return table


# Variation selectors are invisible too, but after an emoji they choose how it
# is drawn (❤️, 1️⃣), so they are only removed after a letter ("bad\ufe0fword").
_VARIATION = re.compile("[\ufe00-\ufe0f\U000e0100-\U000e01ef]")
_VARIATION_AFTER_LETTER = re.compile("(?<=[^\\W\\d_])[\ufe00-\ufe0f\U000e0100-\U000e01ef]+")


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
    """``text`` without the characters a reader cannot see (see :func:`invisible_table`)."""
    text = text.translate(invisible_table())
    if _VARIATION.search(text) is None:  # the common case: one quick scan
        return text
    return _VARIATION_AFTER_LETTER.sub("", text)


def fold(text: str) -> str:
    """Case folding as triggers compare it (not ``case_sensitive``)."""
    return text.casefold()


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
    invisible = invisible_table()
    found = {ord(c) for c in text if ord(c) in invisible}
    for m in _VARIATION_AFTER_LETTER.finditer(text.translate(invisible)):
        found.update(map(ord, m.group()))
    return [f"U+{cp:04X}" for cp in sorted(found)]
