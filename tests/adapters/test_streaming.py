"""The streaming shapes adapters share: a message that grows by edits, sentence chunks,
and "typing…" while a run works (tmy.adapters.streaming)."""

from __future__ import annotations

import asyncio
from typing import Any

from tmy.adapters.streaming import GrowingMessage, SentenceChunks, typing_while


class RetryAfter(Exception):
    """What a platform library raises on a 429 (aiogram's TelegramRetryAfter has this)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"retry after {seconds}")
        self.retry_after = seconds


class Screen:
    """A chat that shows one message and records every post and edit."""

    def __init__(self, refuse: list[Exception] | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.refuse = refuse or []  # raised, in order, by the next edits

    async def post(self, text: str) -> int:
        self.calls.append(("post", text))
        return 7

    async def edit(self, handle: Any, text: str) -> None:
        assert handle == 7
        if self.refuse:
            raise self.refuse.pop(0)
        self.calls.append(("edit", text))


async def test_a_growing_message_posts_once_then_edits_and_ends_as_the_final_text() -> None:
    screen = Screen()
    growing = GrowingMessage(screen.post, screen.edit, interval=0.01)
    await growing.delta("Hel")
    await growing.delta("lo")
    await asyncio.sleep(0.05)  # the pending edit goes out after the interval
    assert await growing.finish("Hello, world")
    assert screen.calls[0] == ("post", "Hel")
    assert screen.calls[-1] == ("edit", "Hello, world")
    assert [kind for kind, _ in screen.calls].count("post") == 1


async def test_nothing_shown_means_the_adapter_sends_the_reply_itself() -> None:
    screen = Screen()
    growing = GrowingMessage(screen.post, screen.edit)
    assert not await growing.finish("whole answer")
    assert screen.calls == []


async def test_a_retry_after_pauses_the_edits_and_finish_waits_it_out() -> None:
    screen = Screen(refuse=[RetryAfter(0.05)])
    growing = GrowingMessage(screen.post, screen.edit, interval=0.0)
    await growing.delta("<thi")  # posted
    await growing.delta("nking")  # the edit is refused with retry after 0.05 s: paused
    assert not growing.failed
    assert await growing.finish("the answer")  # waits the pause out, then edits
    assert screen.calls == [("post", "<thi"), ("edit", "the answer")]


async def test_a_refusal_without_retry_after_stops_the_stream() -> None:
    screen = Screen(refuse=[RuntimeError("message to edit not found")])
    growing = GrowingMessage(screen.post, screen.edit, interval=0.0)
    await growing.delta("a")
    await growing.delta("b")
    assert growing.failed
    assert not await growing.finish("ab")  # the adapter sends the reply itself


async def test_a_retry_after_longer_than_the_longest_pause_gives_up() -> None:
    screen = Screen(refuse=[RetryAfter(3600)])
    growing = GrowingMessage(screen.post, screen.edit, interval=0.0)
    await growing.delta("a")
    await growing.delta("b")
    assert growing.failed


async def test_sentence_chunks_send_whole_sentences_and_the_rest_once_done() -> None:
    sent: list[str] = []

    async def send(text: str) -> None:
        sent.append(text)

    chunks = SentenceChunks(send)
    await chunks.delta("ignored without chunks. ")  # plain stream: true sends nothing early
    assert sent == []
    for piece in ("Hello wor", "ld. How a", "re you? 我很", "好。还"):
        await chunks.delta(piece, chunks=True)
    assert sent == ["Hello world.", "How are you?", "我很好。"]
    assert chunks.rest("Hello world. How are you? 我很好。还有 more") == "还有 more"
    # a final reply that does not continue what was sent is sent whole
    assert chunks.rest("Something else") == "Something else"
    assert SentenceChunks(send).rest("all of it") == "all of it"


async def test_typing_shows_only_once_the_body_runs_past_its_delay() -> None:
    shown: list[int] = []

    async def action() -> None:
        shown.append(1)

    async with typing_while(action, after=10.0):
        pass  # a quick run: no typing at all
    assert shown == []
    async with typing_while(action, after=0.0, every=0.01):
        while len(shown) < 2:
            await asyncio.sleep(0.005)
    count = len(shown)
    await asyncio.sleep(0.03)
    assert len(shown) == count  # stopped with the body
