"""OneBot end to end: a fake NapCat on the real listener, the real engine and rules, a fake
LLM provider and image host on loopback. What a QQ user does reaches the rules, and what the
rules answer reaches QQ."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.llm_fake_provider import PNG, FakeProvider, ImageServer
from tests.support.llm_fake_provider import Reply as Completion
from tests.support.llm_helpers import on
from tests.support.onebot_fake import image, loopback, text
from tmy.testing import Bot

PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()

LLM_RULES = """
rules:
  - id: describe
    triggers: ["describe *"]
    on_error: "failed: {STEP_ERROR}"
    steps:
      - {plugin: LLM, vision: true}
  - id: tell
    triggers: ["tell *"]
    on_error: "failed: {STEP_ERROR}"
    steps:
      - {plugin: LLM, stream: chunks}
"""


def sent_text(action: dict[str, Any]) -> str:
    return "".join(s["data"]["text"] for s in action["params"]["message"] if s["type"] == "text")


@pytest.fixture
async def images() -> AsyncIterator[ImageServer]:
    async with ImageServer() as server:
        yield server


async def test_an_image_message_reaches_the_llm_step_as_a_downloaded_data_url(
    provider: FakeProvider, images: ImageServer
) -> None:
    """QQ's image URLs expire, so tmy fetches the picture (no headers) and sends its bytes."""
    url = images.url("/public/qq.png")
    provider.script("fake", [Completion("a small square")])
    async with (
        Bot({"r.yaml": LLM_RULES}, llm=on(provider)) as bot,
        loopback(bot.engine.handle, store=bot.app.store) as (_, impl),
    ):
        await impl.group([text("describe "), image(url)], group=30003, message_id=7)
        answer = await impl.next_action()
    assert sent_text(answer) == "a small square"
    content = provider.seen()[0]["messages"][-1]["content"]
    pictures = [p["image_url"]["url"] for p in content if p["type"] == "image_url"]
    assert pictures == [PNG_URL]
    (hit,) = images.hits
    assert hit["path"] == "/public/qq.png" and "Authorization" not in hit["headers"]


async def test_a_stream_chunks_answer_goes_out_sentence_by_sentence(provider: FakeProvider) -> None:
    provider.script("fake", [Completion("One is here. Two is here! And three.")])
    async with (
        Bot({"r.yaml": LLM_RULES}, llm=on(provider)) as bot,
        loopback(bot.engine.handle, store=bot.app.store, send_interval=0.05) as (_, impl),
    ):
        await impl.private("tell me three things")
        sent = [sent_text(await impl.next_action()) for _ in range(3)]
        await impl.no_action(0.2)
    assert provider.seen()[0]["stream"] is True
    assert sent == ["One is here.", "Two is here!", "And three."]
