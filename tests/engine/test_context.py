"""The context locals: attachments, the quoted message (REPLY_TO), and their defaults."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.support.log_helpers import read_log
from tmy.engine import context
from tmy.message import Attachment, Message
from tmy.testing import Bot

RULES = """
rules:
  - id: pics
    triggers: ["*[image]*"]
    steps:
      - plugin: ADJUST
        input: >-
          ?= str(len(IMAGES)) + ' images of ' + str(len(ATTACHMENTS)) + ': '
          + IMAGES[0]['url']
  - id: quote
    triggers: ["what about*"]
    steps:
      - plugin: ADJUST
        input: >-
          ?= 'nothing' if REPLY_TO is None
          else REPLY_TO['user'] + ' said ' + REPLY_TO['text']
  - id: burst
    triggers: ["burst*"]
    steps:
      - {plugin: ADJUST, input: "?= str(BURST) + ' ' + str(APPROVE) + ' [' + APPROVE_REASON + ']'"}
"""


class FakeApi:
    """A platform's side of a message, as an adapter provides it (Message.api)."""

    def __init__(self, answer: Any = None, delay: float = 0.0, fail: bool = False) -> None:
        self.answer, self.delay, self.fail = answer, delay, fail
        self.asked: list[str | None] = []

    async def media_source(self, attachment: Attachment) -> tuple[str, dict[str, str]]:
        return attachment.url, {}

    async def quoted(self, message: Message) -> dict[str, Any] | None:
        self.asked.append(message.reply_to)
        await asyncio.sleep(self.delay)
        if self.fail:
            raise RuntimeError("get_msg failed: retcode 100")
        return self.answer


async def test_images_and_attachments_are_the_attachment_maps() -> None:
    pic = Attachment("image", url="https://x/1.png", size=10, mime="image/png")
    doc = Attachment("file", file_id="f1", name="a.pdf")
    async with Bot({"c.yaml": RULES}) as bot:
        reply = await bot.ask("look [image]", attachments=(doc, pic))
    assert reply.text == "1 images of 2: https://x/1.png"


async def test_reply_to_is_fetched_from_the_platform_when_a_rule_matched() -> None:
    api = FakeApi({"text": "it rains", "user": "u2", "id": 77})
    async with Bot({"c.yaml": RULES}) as bot:
        reply = await bot.ask("what about it", reply_to="77", api=api)
        plain = await bot.ask("what about it", api=api)  # quotes nothing: not asked
        unmatched = await bot.ask("hello", reply_to="78", api=api)  # no rule: not asked
    assert reply.text == "u2 said it rains"
    assert plain.text == "nothing" and unmatched.rule is None
    assert api.asked == ["77"]


async def test_a_failing_platform_costs_only_reply_to(log_file: Path) -> None:
    async with Bot({"c.yaml": RULES}) as bot:
        failed = await bot.ask("what about it", reply_to="1", api=FakeApi(fail=True))
        odd = await bot.ask("what about it", reply_to="3", api=FakeApi(["not", "a", "map"]))
    assert (failed.text, odd.text) == ("nothing", "nothing")
    errors = [e["error"] for e in read_log(log_file) if e["event"] == "reply_to.failed"]
    assert errors == ["get_msg failed: retcode 100", "not a map"]


@pytest.mark.slow
async def test_a_slow_platform_is_not_waited_for_past_the_bound(log_file: Path) -> None:
    slow_api = FakeApi({"text": "x"}, delay=context.QUOTE_TIMEOUT + 5)
    async with Bot({"c.yaml": RULES}) as bot:
        slow = await bot.ask("what about it", reply_to="2", api=slow_api)
    assert slow.text == "nothing" and slow.error is None
    errors = [e["error"] for e in read_log(log_file) if e["event"] == "reply_to.failed"]
    assert errors == ["timed out"]


async def test_the_defaults_of_a_plain_message() -> None:
    async with Bot({"c.yaml": RULES}) as bot:
        reply = await bot.ask("burst of words")
        empty = await bot.ask("burst")
    assert reply.text == "['of words'] None []"
    assert empty.text == "[] None []"
