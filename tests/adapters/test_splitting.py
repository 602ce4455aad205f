"""tmy.adapters.splitting: one rule for cutting a long reply (a line break in the second
half, else a space there, else the limit), trimmed (QQ, Feishu, Matrix) or verbatim
(Telegram, Slack). Each platform's own tests show its limits; these pin the rule."""

from __future__ import annotations

from tmy.adapters.splitting import split_trimmed, split_verbatim


def test_a_piece_ends_at_a_line_break_in_its_second_half() -> None:
    text = "aaaa bbbb\ncc dd ee"
    assert split_trimmed(text, 12) == ["aaaa bbbb", "cc dd ee"]
    assert split_verbatim(text, 12) == ["aaaa bbbb", "cc dd ee"]


def test_else_at_a_space_there_else_exactly_at_the_limit() -> None:
    assert split_trimmed("ab\ncdefgh ijk", 10) == ["ab\ncdefgh", "ijk"]  # "\n" is in the first half
    assert split_verbatim("abcdefghijkl", 5) == ["abcde", "fghij", "kl"]


def test_trimmed_strips_each_piece_and_verbatim_keeps_the_spaces_it_did_not_cut_at() -> None:
    text = "  one   two  \n\n  three  "
    assert split_trimmed(text, 10) == ["one   two", "three"]
    assert split_verbatim(text, 10) == ["  one  ", "two  \n", "  three  "]
    assert split_verbatim("   \n   ", 2) == []  # blank pieces are dropped


def test_fit_and_hard_cut_set_where_a_piece_may_end() -> None:
    def fit(rest: str) -> int:  # at most 6 bytes of UTF-8
        n = min(len(rest), 6)
        while len(rest[:n].encode()) > 6:
            n -= 1
        return n

    assert split_trimmed("éééééé", 100, fit) == ["ééé", "ééé"]

    def before_entity(window: str) -> int:  # never inside "&amp;"
        at = window.rfind("&")
        return at if at > 0 else len(window)

    assert split_verbatim("a&amp;bcdef", 4, hard_cut=before_entity) == ["a", "&amp", ";bcd", "ef"]
