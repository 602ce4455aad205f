"""Follow-ups after silence (seed 003): a burst inside a debounced session is answered once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.support.log_helpers import read_log
from tmy.engine.debounce import MAX_BURST, Debouncer
from tmy.testing import Bot

RULES = """
rules:
  - id: weather
    triggers: ["weather*"]
    session: {seconds: 60, debounce: 2}
    steps:
      - plugin: ADJUST
        input: >-
          ?= 'asked: ' + QUESTION if len(BURST) < 2
          else 'burst of ' + str(len(BURST)) + ': ' + '|'.join(BURST)
  - id: chat
    triggers: ["chat*"]
    session: 60
    steps:
      - {plugin: ADJUST, input: "got: {QUESTION}"}
"""


@pytest.mark.slow
async def test_a_three_message_burst_is_answered_once_with_all_three_texts(log_file: Path) -> None:
    async with Bot({"d.yaml": RULES}) as bot:
        opened = await bot.ask("weather", chat="g", private=False)
        assert opened.text == "asked: "  # the trigger's run: answered at once

        async def later(text: str, delay: float):
            await asyncio.sleep(delay)
            return await bot.ask(text, chat="g", private=False)

        replies = await asyncio.gather(
            later("in Paris", 0.0), later("and tomorrow", 0.3), later("please", 0.6)
        )
        other = await bot.ask("in Rome", chat="g", private=False, user="someone-else")
    first, second, last = replies
    for early in (first, second):
        assert early.text == "" and early.rule == "weather" and early.error is None
        assert early.reason is not None and early.reason.startswith("debounced:")
    assert last.text == "burst of 3: in Paris|and tomorrow|please"
    assert last.rule == "weather" and last.reason is None
    assert other.rule is None  # another user's message is no follow-up of this session
    lines = read_log(log_file)
    done = [e for e in lines if e["event"] == "run.done" and e["rule"] == "weather"]
    assert len(done) == 2  # the trigger's run and the burst's, nothing for the others
    assert done[1]["question"] == "in Paris\nand tomorrow\nplease"
    debounced = [e for e in lines if e["event"] == "message.debounced"]
    assert [e["trace_id"] for e in debounced] == [first.trace_id, second.trace_id]


async def test_without_debounce_each_follow_up_is_answered_at_once() -> None:
    async with Bot({"d.yaml": RULES}) as bot:
        assert (await bot.ask("chat")).text == "got: "
        replies = await asyncio.gather(bot.ask("one"), bot.ask("two"))
    assert sorted(r.text for r in replies) == ["got: one", "got: two"]
    assert all(r.reason is None for r in replies)


async def test_a_burst_that_reaches_the_cap_is_answered_at_once() -> None:
    bursts = Debouncer()
    key = ("p", "c", "u", "r")
    waiting = [asyncio.create_task(bursts.collect(key, f"m{i}", 60)) for i in range(MAX_BURST - 1)]
    await asyncio.sleep(0)
    full = await bursts.collect(key, "last", 60)
    assert full == [*(f"m{i}" for i in range(MAX_BURST - 1)), "last"]
    assert await asyncio.gather(*waiting) == [None] * (MAX_BURST - 1)
    assert len(bursts) == 0


async def test_a_cancelled_burst_is_dropped() -> None:
    bursts = Debouncer()
    key = ("p", "c", "u", "r")
    task = asyncio.create_task(bursts.collect(key, "hi", 60))
    await asyncio.sleep(0)
    assert len(bursts) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(bursts) == 0
    # the next message starts a fresh burst and, alone, answers it after the silence
    assert await bursts.collect(key, "again", 0.01) == ["again"]
