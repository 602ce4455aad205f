"""Showing an answer while it is written: a message that grows by edits, sentence-sized
chunks, and "typing…" while a run works.

Three shapes, one per kind of platform:

* :class:`GrowingMessage` (Telegram, Discord, Slack, Matrix): the first piece is posted, later
  pieces edit that one message at most once per ``interval`` (their rate limits
  allow about one edit a second per chat), and :meth:`GrowingMessage.finish`
  edits it to the run's final reply.
* :class:`SentenceChunks` (OneBot, which cannot edit): whole sentences are sent
  as they are completed, each send paced by the adapter's own queue; ``finish``
  sends what the final reply has beyond them.
* :func:`typing_while` (Discord typing, Telegram ``sendChatAction``): once a run
  has worked ``after`` seconds, ``action`` is called and repeated every
  ``every`` seconds until the run ends.

Each is made by the adapter for one message and given to the engine as
``Message.stream`` (:class:`tmy.types.StreamSink`).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

from tmy.logs import get_logger

log = get_logger("tmy.adapter")

MAX_PAUSE = 30.0  # the longest "retry after" a growing message waits out (s); longer: gives up
SENTENCE_END = re.compile(r"(?<=[。！？!?；;…\n])|(?<=[.])(?=\s)")


class GrowingMessage:
    """A reply shown as it grows: posted once, then edited (see module doc).

    ``post(text)`` sends the first message and returns whatever ``edit`` needs to
    find it again (a message id, a message object); ``edit(handle, text)``
    replaces its text. A post or edit refused with a "retry after" (Telegram's
    429 ``TelegramRetryAfter``, discord.py's ``RateLimited``: an exception with a
    ``retry_after`` in seconds) pauses the edits until then, and :meth:`finish`
    waits that pause out (up to :data:`MAX_PAUSE`) instead of leaving half an
    answer on screen; any other failure is logged and the stream goes quiet:
    :meth:`finish` then tells the adapter to send the final reply itself.
    """

    def __init__(
        self,
        post: Callable[[str], Awaitable[Any]],
        edit: Callable[[Any, str], Awaitable[None]],
        *,
        interval: float = 1.0,
        limit: int = 4000,
    ) -> None:
        self._post = post
        self._edit = edit
        self.interval = interval
        self.limit = limit  # the platform's longest message: the growing text is cut there
        self.text = ""
        self.shown = ""  # what the platform shows now
        self.handle: Any = None
        self.failed = False
        self._last = 0.0
        self._paused_until = 0.0  # a "retry after" from the platform: no edit before then
        self._timer: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.edits = 0

    async def delta(self, text: str, *, chunks: bool = False) -> None:
        if self.failed or not text:
            return
        self.text += text
        now = time.monotonic()
        if self.handle is None and now >= self._paused_until:
            await self._flush()
            return
        wait = max(self._last + self.interval, self._paused_until) - now
        if wait <= 0:
            await self._flush()
        elif self._timer is None:
            self._timer = asyncio.create_task(self._flush_after(wait))

    async def _flush_after(self, wait: float) -> None:
        await asyncio.sleep(wait)
        self._timer = None
        await self._flush()

    async def _flush(self) -> None:
        async with self._lock:
            shown = self.text[: self.limit]
            if self.failed or shown == self.shown or not shown.strip():
                return
            if time.monotonic() < self._paused_until:
                return  # the timer set by the pause flushes when it ends
            try:
                if self.handle is None:
                    self.handle = await self._post(shown)
                else:
                    await self._edit(self.handle, shown)
                    self.edits += 1
            except Exception as exc:
                if not self._pause(exc):  # refused for good: stop streaming, answer normally
                    log.warning("stream.failed", error=f"{type(exc).__name__}: {exc}")
                    self.failed = True
                return
            self.shown = shown
            self._last = time.monotonic()

    def _pause(self, exc: Exception) -> bool:
        """True when ``exc`` asks to retry after a while (paused until then, the pending
        text flushed at its end); False for any other refusal."""
        after = getattr(exc, "retry_after", None)
        if isinstance(after, bool) or not isinstance(after, int | float) or after > MAX_PAUSE:
            return False
        self._paused_until = time.monotonic() + max(float(after), 0.0)
        log.info("stream.paused", seconds=after)
        if self._timer is None:
            self._timer = asyncio.create_task(self._flush_after(max(float(after), 0.0)))
        return True

    async def finish(self, final: str) -> bool:
        """Edit the growing message to ``final``. False: nothing stands shown (no piece
        came, or the platform refused one) and the adapter sends the reply itself;
        True: the reply is on screen (``final`` longer than ``limit`` is the adapter's
        to send on in further messages: only its first ``limit`` characters are here)."""
        if self._timer is not None:
            self._timer.cancel()
            with suppress(asyncio.CancelledError):
                await self._timer
            self._timer = None
        async with self._lock:
            head = final[: self.limit]
            for _ in range(3):  # a "retry after" is waited out, a couple of times at most
                if self.handle is None or self.failed:
                    return False
                if head == self.shown or not head.strip():
                    return True
                wait = self._paused_until - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                try:
                    await self._edit(self.handle, head)
                except Exception as exc:
                    if self._pause(exc):
                        self._cancel_timer()
                        continue
                    log.warning("stream.failed", error=f"{type(exc).__name__}: {exc}")
                    return False
                self.edits += 1
                self.shown = head
                return True
            return False

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class SentenceChunks:
    """A reply sent a sentence at a time, for platforms that cannot edit (OneBot).

    Only a step with ``stream: chunks`` feeds it (``chunks=True``); plain
    ``stream: true`` pieces are ignored and the reply goes out whole as before.
    """

    def __init__(self, send: Callable[[str], Awaitable[None]], *, always: bool = False) -> None:
        self._send = send
        self.always = always  # chunk even a plain stream: true step
        self.pending = ""
        self.sent = ""  # every character sent so far, in order
        self.failed = False

    async def delta(self, text: str, *, chunks: bool = False) -> None:
        if not (chunks or self.always) or self.failed or not text:
            return
        self.pending += text
        pieces = SENTENCE_END.split(self.pending)
        if len(pieces) < 2:
            return
        done, self.pending = "".join(pieces[:-1]), pieces[-1]
        await self._emit(done)

    async def _emit(self, text: str) -> None:
        self.sent += text
        if not text.strip():
            return
        try:
            await self._send(text.strip())
        except Exception as exc:
            log.warning("stream.failed", error=f"{type(exc).__name__}: {exc}")
            self.failed = True

    def rest(self, final: str) -> str | None:
        """What of ``final`` is still to send once the run ended: the whole reply when
        nothing was chunked, the part after what was sent when ``final`` continues it,
        and "" when it is all out. A final reply that differs from the chunks (a later
        step changed it) is sent whole: chunks already sent cannot be taken back."""
        if not self.sent:
            return final
        if final.startswith(self.sent):
            return final[len(self.sent) :].strip()
        return final


@asynccontextmanager
async def typing_while(
    action: Callable[[], Awaitable[Any]], *, after: float = 1.0, every: float = 5.0
) -> AsyncIterator[None]:
    """Show "typing…" (``action``) once the body has run ``after`` seconds, again every
    ``every`` seconds (Telegram's chat action lasts 5 s, Discord's typing 10 s), and
    stop when the body ends. A failing ``action`` is logged once and not retried."""

    async def keep_typing() -> None:
        await asyncio.sleep(after)
        while True:
            try:
                await action()
            except Exception as exc:
                log.debug("typing.failed", error=f"{type(exc).__name__}: {exc}")
                return
            await asyncio.sleep(every)

    task = asyncio.create_task(keep_typing())
    try:
        yield
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
