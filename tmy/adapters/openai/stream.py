"""``"stream": true``: the answer as ``chat.completion.chunk`` server-sent events.

The request's message carries an :class:`SseSink` as ``Message.stream``: an LLM
step with ``stream:`` hands it each piece of its answer as the provider sends
it, and each piece goes out at once as a content chunk. When the run ends, what
of the final reply was not streamed goes out too (:meth:`SseSink.rest`), then
the ``stop`` chunk, the usage chunk when asked for, and ``data: [DONE]``. A run
without a streaming step sends its whole reply as one chunk at the end, as before.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from tmy import logs
from tmy.adapters.base import Handler
from tmy.adapters.http import dumps
from tmy.adapters.openai import payload
from tmy.adapters.openai.payload import OpenAIError
from tmy.logs import get_logger
from tmy.message import Message

if TYPE_CHECKING:  # deferred: aiohttp is ~120 ms of every CLI start
    from aiohttp import web

log = get_logger("tmy.adapter.openai")

STREAM_KEEPALIVE = 15.0  # seconds between SSE comments while a streamed run is still working
IDENTITY_HEADER = "X-Tmy-Identity"  # how USER was chosen (see tmy.adapters.openai.facade)


class SseSink:
    """One streamed response: chunks written in order (one writer at a time), the
    content sent so far, and whether the client is still there."""

    def __init__(self, response: web.StreamResponse, model: str, include_usage: bool) -> None:
        self.response = response
        self.model = model
        self.include_usage = include_usage
        self.base: dict[str, Any] | None = None  # the fields every chunk repeats
        self.sent = ""  # content streamed so far
        self.started = False  # the role chunk is out
        self.gone = False
        self._lock = asyncio.Lock()

    def chunk(self, delta: dict[str, Any], finish: str | None, **extra: Any) -> bytes:
        if self.base is None:  # the run's trace id: the same id the reply will carry
            self.begin(logs.TRACE.get() or "")
        assert self.base is not None
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _event({**self.base, "choices": [choice], **extra})

    def begin(self, trace_id: str) -> None:
        self.base = {
            "id": f"chatcmpl-{trace_id}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": self.model,
            "system_fingerprint": None,
        }
        if self.include_usage:
            self.base["usage"] = None  # OpenAI's shape: null on every chunk but the last

    def content(self, text: str) -> bytes:
        """A content chunk, after the role chunk when it is the first."""
        role = b""
        if not self.started:
            self.started = True
            role = self.chunk({"role": "assistant", "content": ""}, None)
        return role + (self.chunk({"content": text}, None) if text else b"")

    async def delta(self, text: str, *, chunks: bool = False) -> None:
        """The next piece of the answer, sent at once (``chunks`` makes no difference here)."""
        if self.gone or not text:
            return
        async with self._lock:
            data = self.content(text)
            self.sent += text
        await self.write(data)

    def rest(self, final: str) -> str:
        """What of ``final`` still has to go out: all of it when nothing streamed, the part
        after what streamed when it continues it, and, when a later step changed the
        answer, the whole of it after a blank line (sent chunks cannot be taken back)."""
        if not self.sent:
            return final
        if final.startswith(self.sent):
            return final[len(self.sent) :]
        return f"\n\n{final}" if final else ""

    async def write(self, data: bytes) -> bool:
        """Write in order; False once the client has gone away."""
        async with self._lock:
            if self.gone:
                return False
            try:
                await self.response.write(data)
            except (ConnectionError, RuntimeError):  # reset by peer; "transport is closing"
                self.gone = True
        return not self.gone


async def stream(
    request: web.Request,
    handle: Handler,
    message: Message,
    *,
    model: str,
    include_usage: bool,
    how: str,
    unmatched_reply: str,
) -> web.StreamResponse:
    """Server-sent events: headers at once, the answer's pieces as a streaming step makes
    them, comments while the run works otherwise, then the rest and the end.

    The keep-alive comments stop proxies and UIs from giving up on a long LLM
    run. A client that goes away does not cancel the run: it finishes (and
    saves what it saves) like any other.
    """
    from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",  # nginx: pass events through unbuffered
            IDENTITY_HEADER: how,
        }
    )
    await response.prepare(request)
    sink = SseSink(response, model, include_usage)
    message.stream = sink
    task = asyncio.ensure_future(handle(message))
    try:
        while not task.done():
            done, _ = await asyncio.wait({task}, timeout=STREAM_KEEPALIVE)
            if not done and not sink.gone:
                await sink.write(b": keep-alive\n\n")
    except asyncio.CancelledError:
        task.cancel()  # the listener is shutting down past its grace period
        raise
    reply = task.result()
    if sink.gone:
        log.debug("openai.client_gone", trace_id=reply.trace_id)
        return response
    try:
        payload.refusal(reply)
    except OpenAIError as exc:
        error = {"message": exc.message, "type": exc.type, "param": exc.param, "code": exc.code}
        await sink.write(_event({"error": error}))
        return response
    if sink.base is None:
        sink.begin(reply.trace_id)
    events = [sink.content(sink.rest(payload.content(reply, unmatched_reply)))]
    events.append(sink.chunk({}, "stop", tmy=payload.extension(reply)))
    if include_usage:
        assert sink.base is not None
        events.append(_event({**sink.base, "choices": [], "usage": payload.usage(reply)}))
    events.append(b"data: [DONE]\n\n")
    if await sink.write(b"".join(events)):
        try:
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the client left after the last event: nothing more to say
    return response


def _event(data: dict[str, Any]) -> bytes:
    return f"data: {dumps(data)}\n\n".encode()
