"""``quote: true``: the message a user replied to (REPLY_TO) goes into the prompt as a
quoted block before the question."""

from __future__ import annotations

from typing import Any

from tests.support.llm_fake_provider import FakeProvider
from tests.support.llm_helpers import on, rules
from tmy.llm.prompt import with_quote
from tmy.testing import Bot


def test_the_quoted_block_comes_before_the_question() -> None:
    quoted = {"text": "Paris is lovely\n\nin May", "user": "ann", "id": "7"}
    assert with_quote(quoted, "is it?") == (
        "In reply to ann:\n> Paris is lovely\n>\n> in May\n\nis it?"
    )
    assert (
        with_quote({"text": "hi", "user": "", "id": "1"}, "q")
        == "In reply to a message:\n> hi\n\nq"
    )
    assert with_quote(None, "q") == "q"
    assert with_quote({"text": "  ", "user": "ann"}, "q") == "q"
    assert with_quote("not a map", "q") == "q"


class Quoting:
    """A platform that knows the quoted message (``message.api.quoted``)."""

    def __init__(self, quoted: dict[str, Any] | None) -> None:
        self.quoted_message = quoted

    async def media_source(self, attachment: Any) -> tuple[str, dict[str, str]]:
        raise AssertionError("no pictures here")

    async def quoted(self, message: Any) -> dict[str, Any] | None:
        return self.quoted_message


async def test_quote_true_sends_reply_to_before_the_question(provider: FakeProvider) -> None:
    api = Quoting({"text": "Lunch at noon?", "user": "ann", "id": "41"})
    quote = rules("      - {plugin: LLM, quote: true}\n")
    plain = rules("      - {plugin: LLM}\n")
    async with Bot({"r.yaml": quote}, llm=on(provider)) as bot:
        reply = await bot.ask("t sounds good?", reply_to="41", api=api)
        assert reply.error is None, reply.error
        sent = provider.seen()[-1]["messages"][-1]["content"]
        assert sent.endswith("In reply to ann:\n> Lunch at noon?\n\nsounds good?")
        # no quote in the message: the question alone
        assert (await bot.ask("t and you?")).error is None
        assert "In reply to" not in provider.seen()[-1]["messages"][-1]["content"]
    async with Bot({"r.yaml": plain}, llm=on(provider)) as bot:
        assert (await bot.ask("t sounds good?", reply_to="41", api=api)).error is None
        assert "Lunch" not in provider.seen()[-1]["messages"][-1]["content"]
