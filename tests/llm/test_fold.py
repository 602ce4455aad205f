"""tmy.llm.fold's transcript: what was said, without the context the tail carried."""

from __future__ import annotations

from tmy.llm.fold import transcript


def test_time_sender_memory_and_knowledge_are_left_out_of_what_was_said() -> None:
    ask = (
        "Time: 2026-11-26 10:00\nFrom: ann\n\n"
        "<knowledge>\n[1] returns.md (chars 0–80; base faq)\n"
        "Returns within 30 days.\n</knowledge>\n\n"
        "<memory>\n- ann likes tea\n</memory>\n\n"
        "how long do I have to return it?"
    )
    assert transcript([[ask, "30 days [1]."]]) == (
        "user: how long do I have to return it?\nassistant: 30 days [1]."
    )
