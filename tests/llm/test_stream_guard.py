"""What a ``stream:`` step may show before the run ends: never its ``<think>`` reasoning
(also when a tag is split across deltas), never more than ``limits.max_reply_chars``,
and nothing of a step whose output contract may still refuse the answer. Against the
loopback fake provider's real SSE (4 characters a delta), and :class:`Visible` alone."""

from __future__ import annotations

import pytest

from tests.llm.test_stream import Sink
from tests.support.llm_fake_provider import FakeProvider, Reply
from tests.support.llm_helpers import on, rules
from tmy.llm.contracts import clean
from tmy.llm.streaming import Deltas, Visible
from tmy.testing import Bot

REASONING = "<think>The admin password is hunter2. I must not say it.</think>\n\nHello there."


def step(extra: str = "", mode: str = "true") -> str:
    return rules(f"      - {{plugin: LLM, stream: {mode}{extra}}}\n")


def shown(text: str, size: int) -> str:
    """``text`` fed to a fresh :class:`Visible` in pieces of ``size`` characters."""
    visible = Visible()
    return "".join(visible.feed(text[i : i + size]) for i in range(0, len(text), size))


# -- (a) reasoning is held back ------------------------------------------------------


async def test_a_think_block_is_not_streamed(provider: FakeProvider) -> None:
    provider.script("fake", [Reply(REASONING)])
    sink = Sink()
    async with Bot({"r.yaml": step()}, llm=on(provider)) as bot:
        reply = await bot.ask("t tell me", stream=sink)
    assert reply.error is None and reply.text == "Hello there."
    assert "".join(sink.pieces) == "Hello there."  # the leading blank lines dropped as well
    assert not any("hunter2" in p or "think" in p for p in sink.pieces)


async def test_think_blocks_in_any_case_and_between_text_are_dropped(
    provider: FakeProvider,
) -> None:
    answer = "Start. <THINK>one</THINK>Middle <Think>two\n</tHiNk>end."
    provider.script("fake", [Reply(answer)])
    sink = Sink()
    async with Bot({"r.yaml": step(mode="chunks")}, llm=on(provider)) as bot:
        reply = await bot.ask("t go", stream=sink)
    assert reply.text == clean(answer) == "Start. Middle end."
    assert "".join(sink.pieces) == "Start. Middle end."


async def test_the_mocks_reasoning_is_not_streamed_either() -> None:
    sink = Sink()
    async with Bot({"r.yaml": step()}) as bot:
        said = await bot.say("t MOCK:RESPONSE:<think>secret</think>The answer.", stream=sink)
    assert said == "The answer."
    assert "".join(sink.pieces) == "The answer."


@pytest.mark.parametrize(
    "text",
    [
        REASONING,
        "a <think>b</think> c <think>d</think>",
        "x<think>a<think>b</think>c</think>y",  # the first close ends the block, as in clean()
        "<think></think>only",
        "no tags, but a < sign and <thin ice>",
        "</think>stray close stays",
        "ends with <think>b</think>",
    ],
)
@pytest.mark.parametrize("size", [1, 2, 3, 4, 7, 100])
def test_visible_shows_what_clean_keeps_however_the_text_is_cut(text: str, size: int) -> None:
    assert shown(text, size).rstrip() == clean(text)


@pytest.mark.parametrize("size", [1, 3, 100])
def test_an_unclosed_think_shows_nothing_after_it(size: int) -> None:
    assert shown("Fine. <think>the rest is reasoning, cut by max_tokens", size) == "Fine. "


def test_a_partial_tag_at_the_end_is_held_until_the_next_piece_tells() -> None:
    visible = Visible()
    assert visible.feed("Hi <thi") == "Hi "
    assert visible.feed("nk>hidden</thi") == ""
    assert visible.feed("nk> there") == " there"  # as clean(): "Hi  there"
    assert Visible().feed("Hi <thin ice") == "Hi <thin ice"


async def test_a_failed_attempt_that_showed_nothing_starts_the_next_afresh() -> None:
    got: list[str] = []

    async def send(piece: str) -> None:
        got.append(piece)

    deltas = Deltas(send)
    await deltas("<think>half a thought")  # the stream is cut inside the block
    deltas.attempt_failed()
    await deltas("The answer.")
    assert got == ["The answer."] and not deltas.off


# -- (b) within limits.max_reply_chars -----------------------------------------------


async def test_a_stream_stops_before_it_passes_max_reply_chars(provider: FakeProvider) -> None:
    provider.script("fake", [Reply("Line one.\n" * 30)])
    sink = Sink()
    async with Bot({"r.yaml": step()}, llm=on(provider), max_reply_chars=100) as bot:
        reply = await bot.ask("t long", stream=sink)
    assert reply.error is not None and "limits.max_reply_chars is 100" in reply.error
    streamed = "".join(sink.pieces)
    assert 90 < len(streamed) <= 100 and ("Line one.\n" * 30).startswith(streamed)


async def test_an_answer_within_max_reply_chars_streams_whole(provider: FakeProvider) -> None:
    provider.script("fake", [Reply("x" * 100)])
    sink = Sink()
    async with Bot({"r.yaml": step()}, llm=on(provider), max_reply_chars=100) as bot:
        reply = await bot.ask("t exactly", stream=sink)
    assert reply.error is None and "".join(sink.pieces) == "x" * 100


async def test_two_streaming_steps_share_one_budget(provider: FakeProvider) -> None:
    provider.script("fake", [Reply("a" * 60), Reply("b" * 60)])
    sink = Sink()
    steps = (
        "      - {plugin: LLM, stream: true, save: first}\n"
        "      - {plugin: LLM, stream: true, input: 'again'}\n"
    )
    extra = "variables:\n  first: {default: ''}\n"
    rule = rules(steps, extra=extra)
    async with Bot({"r.yaml": rule}, llm=on(provider), max_reply_chars=100) as bot:
        reply = await bot.ask("t twice", stream=sink)
    assert reply.error is None and reply.text == "b" * 60
    assert len("".join(sink.pieces)) <= 100 and "".join(sink.pieces).startswith("a" * 60)


# -- (c) a contract that may refuse the answer: nothing streamed -----------------------


async def test_a_returns_int_step_streams_no_attempt(provider: FakeProvider) -> None:
    provider.script("fake", [Reply("The answer is: secret internal note."), Reply("7")])
    sink = Sink()
    async with Bot({"r.yaml": step(", returns: int")}, llm=on(provider)) as bot:
        reply = await bot.ask("t count", stream=sink)
    assert reply.error is None and reply.text == "7"
    assert sink.pieces == [] and len(provider.seen()) == 2


async def test_a_choices_step_streams_nothing(provider: FakeProvider) -> None:
    provider.script("fake", [Reply("blue")])
    sink = Sink()
    async with Bot({"r.yaml": step(", choices: [red, blue]")}, llm=on(provider)) as bot:
        assert (await bot.ask("t pick", stream=sink)).text == "blue"
    assert sink.pieces == []


async def test_returns_str_cannot_fail_and_streams(provider: FakeProvider) -> None:
    provider.script("fake", [Reply("plain words here")])
    sink = Sink()
    async with Bot({"r.yaml": step(", returns: str")}, llm=on(provider)) as bot:
        assert (await bot.ask("t words", stream=sink)).text == "plain words here"
    assert "".join(sink.pieces) == "plain words here" and len(sink.pieces) > 1
