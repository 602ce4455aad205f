"""``stream: true | chunks``: the answer's pieces reach ``message.stream`` as the provider
sends them (real SSE from the loopback fake), while the run still gets the whole answer."""

from __future__ import annotations

import pytest

from tests.support.llm_fake_provider import FakeProvider, Fault, Reply
from tests.support.llm_helpers import on, rules
from tmy.errors import RuleError
from tmy.testing import Bot

ANSWER = "The quick brown fox jumps over the lazy dog."


class Sink:
    """A stream sink that keeps what it was given."""

    def __init__(self, fail: bool = False) -> None:
        self.pieces: list[str] = []
        self.chunks: list[bool] = []
        self.fail = fail

    async def delta(self, text: str, *, chunks: bool = False) -> None:
        self.pieces.append(text)
        self.chunks.append(chunks)
        if self.fail:
            raise ConnectionError("the platform refused the edit")


def step(extra: str = "") -> str:
    return rules(f"      - {{plugin: LLM, stream: true{extra}}}\n")


async def test_each_delta_reaches_the_sink_as_it_comes(provider: FakeProvider) -> None:
    provider.script("fake", [Reply(ANSWER)])
    sink = Sink()
    async with Bot({"r.yaml": step()}, llm=on(provider)) as bot:
        reply = await bot.ask("t tell me", stream=sink)
    assert reply.error is None and reply.text == ANSWER
    assert len(sink.pieces) > 3 and "".join(sink.pieces) == ANSWER  # the fake sends 4 chars each
    assert set(sink.chunks) == {False}
    assert provider.seen()[0]["stream"] is True


async def test_stream_chunks_says_so_to_the_sink(provider: FakeProvider) -> None:
    provider.script("fake", [Reply(ANSWER)])
    sink = Sink()
    rule = rules("      - {plugin: LLM, stream: chunks}\n")
    async with Bot({"r.yaml": rule}, llm=on(provider)) as bot:
        assert (await bot.ask("t tell me", stream=sink)).text == ANSWER
    assert set(sink.chunks) == {True} and "".join(sink.pieces) == ANSWER


async def test_the_mock_streams_in_a_few_pieces() -> None:
    sink = Sink()
    async with Bot({"r.yaml": step()}) as bot:
        assert await bot.say(f"t MOCK:RESPONSE:{ANSWER}", stream=sink) == ANSWER
    assert 1 < len(sink.pieces) <= 4 and "".join(sink.pieces) == ANSWER


async def test_without_a_sink_or_without_stream_nothing_is_streamed(provider: FakeProvider) -> None:
    sink = Sink()
    async with Bot({"r.yaml": rules("      - {plugin: LLM}\n")}, llm=on(provider)) as bot:
        assert (await bot.ask("t plain", stream=sink)).error is None
    assert sink.pieces == [] and "stream" not in provider.seen()[0]
    async with Bot({"r.yaml": step()}, llm=on(provider)) as bot:
        assert (await bot.ask("t no sink")).text == "echo: no sink"


async def test_a_contract_and_save_see_the_whole_answer_which_is_not_streamed(
    provider: FakeProvider,
) -> None:
    provider.script("fake", [Reply('{"city": "Paris", "days": 3}')])
    sink = Sink()
    steps = (
        "      - plugin: LLM\n"
        "        stream: true\n"
        "        output: {type: object, properties: {city: {type: string}}}\n"
        "        save: trip\n"
        "      - {plugin: ADJUST, input: 'to {trip[city]}'}\n"
    )
    extra = "variables:\n  trip: {default: {}}\n"
    async with Bot({"r.yaml": rules(steps, extra=extra)}, llm=on(provider)) as bot:
        reply = await bot.ask("t plan", stream=sink)
        assert reply.error is None and reply.text == "to Paris"
    # an output contract may refuse the first attempt: nothing is shown before it passed
    assert sink.pieces == [] and provider.seen()[0]["stream"] is True


async def test_a_tool_call_turn_streams_no_text(provider: FakeProvider) -> None:
    provider.script(
        "fake",
        [
            Reply("let me look", tool_calls=[{"name": "ADJUST", "arguments": {"input": "x"}}]),
            Reply(ANSWER),
        ],
    )
    sink = Sink()
    rule = rules("      - {plugin: LLM, stream: true, tools: [ADJUST]}\n")
    async with Bot({"r.yaml": rule}, llm=on(provider)) as bot:
        reply = await bot.ask("t use a tool", stream=sink)
    assert reply.error is None and reply.text == ANSWER
    # what the model wrote before its first tool-call delta is shown (it cannot be known
    # to be a tool turn yet); nothing of that turn after it, then the answer
    assert "".join(sink.pieces) == "let me look" + ANSWER


async def test_a_cut_stream_retried_shows_no_second_copy(provider: FakeProvider) -> None:
    provider.script("fake", [Fault.cut(), Reply(ANSWER)])
    sink = Sink()
    async with Bot({"r.yaml": step()}, llm=on(provider)) as bot:
        reply = await bot.ask("t again", stream=sink)
    assert reply.error is None and reply.text == ANSWER  # the run has the whole answer
    assert "".join(sink.pieces) == "Half an answ"  # the retry is not appended to it
    assert len(provider.seen()) == 2


async def test_a_failing_sink_never_fails_the_answer(provider: FakeProvider) -> None:
    provider.script("fake", [Reply(ANSWER)])
    sink = Sink(fail=True)
    async with Bot({"r.yaml": step()}, llm=on(provider)) as bot:
        reply = await bot.ask("t x", stream=sink)
    assert reply.error is None and reply.text == ANSWER
    assert len(sink.pieces) == 1  # switched off after the first refusal


async def test_a_bad_stream_value_is_a_load_error() -> None:
    with pytest.raises(RuleError, match="stream 'words' must be true, false or chunks"):
        async with Bot({"r.yaml": rules("      - {plugin: LLM, stream: words}\n")}):
            pass


async def test_the_mocks_tool_turn_streams_nothing_and_its_answer_does() -> None:
    sink = Sink()
    rule = rules("      - {plugin: LLM, stream: true, tools: [ADJUST]}\n")
    async with Bot({"r.yaml": rule}) as bot:
        said = await bot.say('t MOCK:TOOL:ADJUST:{"input": "forty-two"}', stream=sink)
    assert said == "[TESTONLY mock] tool results: forty-two"
    assert "".join(sink.pieces) == said and len(sink.pieces) > 1
