"""``"stream": true``: the answer as ``chat.completion.chunk`` server-sent events."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

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
    """Server-sent events: headers at once, comments while the run works, then the answer.

    The engine answers a message whole, so the content arrives as one chunk
    after the role chunk; the keep-alive comments stop proxies and UIs from
    giving up on a long LLM run. A client that goes away does not cancel
    the run: it finishes (and saves what it saves) like any other.
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
    task = asyncio.ensure_future(handle(message))
    gone = False
    try:
        while not task.done():
            done, _ = await asyncio.wait({task}, timeout=STREAM_KEEPALIVE)
            if not done and not gone:
                gone = not await _write(response, b": keep-alive\n\n")
    except asyncio.CancelledError:
        task.cancel()  # the listener is shutting down past its grace period
        raise
    reply = task.result()
    if gone:
        log.debug("openai.client_gone", trace_id=reply.trace_id)
        return response
    try:
        payload.refusal(reply)
    except OpenAIError as exc:
        error = {"message": exc.message, "type": exc.type, "param": exc.param, "code": exc.code}
        await _write(response, _event({"error": error}))
        return response
    base = {
        "id": f"chatcmpl-{reply.trace_id}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": None,
    }
    if include_usage:
        base["usage"] = None  # OpenAI's shape: null on every chunk but the last

    def chunk(delta: dict[str, Any], finish: str | None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _event({**base, "choices": [choice], **extra})

    events = [chunk({"role": "assistant", "content": ""}, None)]
    content = payload.content(reply, unmatched_reply)
    if content:
        events.append(chunk({"content": content}, None))
    events.append(chunk({}, "stop", tmy=payload.extension(reply)))
    if include_usage:
        events.append(_event({**base, "choices": [], "usage": payload.usage(reply)}))
    events.append(b"data: [DONE]\n\n")
    if await _write(response, b"".join(events)):
        try:
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the client left after the last event: nothing more to say
    return response


def _event(data: dict[str, Any]) -> bytes:
    return f"data: {dumps(data)}\n\n".encode()


async def _write(response: web.StreamResponse, data: bytes) -> bool:
    """Write to a streamed response; False when the client has gone away."""
    try:
        await response.write(data)
    except (ConnectionError, RuntimeError):  # reset by peer; "transport is closing"
        return False
    return True
