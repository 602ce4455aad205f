"""Action frames written together: what is ready in one pass of the event loop is one write.

OneBot v11 carries one JSON action per WebSocket frame, and that stays so: a
reply is one ``send_msg`` frame. But replies finish in bursts (a socket read
hands over several events; their runs end in the same pass of the event
loop), and each frame written on its own is one ``send()`` system call, which
on loopback also runs the receiving side's TCP work: about a third of the
server CPU of a message before this module. :class:`FrameBatch` queues the
frames and, once per pass of the loop (``call_soon``), writes every queued
frame in one transport write, in the order queued: several protocol-valid
frames, one system call.

The frames are built here (RFC 6455: FIN, text opcode, length, and the mask a
client must add) and written on the socket's transport, the same transport
aiohttp writes its control frames (ping, pong, close) on, whole frames at a
time, so the two never interleave inside a frame. Where that cannot be done
— a connection that negotiated ``permessage-deflate`` (whose compressor
aiohttp owns; tmy's reverse endpoint does not offer it), or an aiohttp
without the writer this relies on — the frames go out one by one through
``send_frame``, in order, as before. A frame that cannot be written fails
the action waiting for it (``on_error``) with the reason.

A frame over :data:`BIG_FRAME` (a reply carrying an image), and every frame
queued after it, goes through ``send_frame`` too, which waits while the peer
is not reading; so what the batches leave in the transport's buffer is at
most the actions in flight (the adapter caps them) times 256 KiB.
"""

from __future__ import annotations

import asyncio
import os
import struct
from collections.abc import Callable
from typing import Any

OnError = Callable[[Any, str], None]  # on_error(tag, why): the frame tagged so was not sent

_LEN1 = struct.Struct("!BB").pack
_LEN2 = struct.Struct("!BBH").pack
_LEN3 = struct.Struct("!BBQ").pack
_TEXT = 0x81  # FIN + text opcode
# a frame larger than this goes out on its own through send_frame, which waits for the
# peer to read (the batched ones are small, and as many as the actions in flight)
BIG_FRAME = 256 * 1024


def frame(payload: bytes, masked: bool) -> bytes:
    """One complete text frame carrying ``payload`` (masked when a client sends it)."""
    n = len(payload)
    bit = 0x80 if masked else 0
    if n < 126:
        head = _LEN1(_TEXT, n | bit)
    elif n < 65536:
        head = _LEN2(_TEXT, 126 | bit, n)
    else:
        head = _LEN3(_TEXT, 127 | bit, n)
    if not masked:
        return head + payload
    key = os.urandom(4)
    stream = (key * (n // 4 + 1))[:n]
    body = int.from_bytes(payload, "little") ^ int.from_bytes(stream, "little")
    return head + key + body.to_bytes(n, "little")


class FrameBatch:
    """The text frames one WebSocket writes, batched per pass of the event loop."""

    def __init__(self, ws: Any, on_error: OnError) -> None:
        self.ws = ws  # aiohttp WebSocketResponse or ClientWebSocketResponse
        # one callback for every frame (a closure per frame was a tenth of an action's cost)
        self.on_error = on_error
        self.writes = 0  # transport writes (or send_frame calls) so far
        self.frames = 0  # frames written so far
        self._queue: list[tuple[bytes, Any]] = []  # (payload, tag)
        self._flush_due = False
        self._slow: asyncio.Task[None] | None = None  # frames going out one by one

    def push(self, payload: bytes, tag: Any) -> None:
        """Queue one frame; it is written at the end of this pass of the event loop (else
        ``on_error(tag, why)``)."""
        self._queue.append((payload, tag))
        if not self._flush_due and self._slow is None:
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_due = False
        if not self._queue or self._slow is not None:
            return
        writer = getattr(self.ws, "_writer", None)
        transport = getattr(writer, "transport", None)
        masked = getattr(writer, "use_mask", None)
        if transport is None or masked is None or self.ws.compress:
            self._slow = asyncio.create_task(self._one_by_one(), name="onebot-frames")
            return
        queue = self._queue
        if self.ws.closed or transport.is_closing():
            self._queue = []
            self._fail(queue, "the connection is closing")
            return
        # the small frames up to the first big one: a big one (an image) and what follows
        # it go through send_frame, which waits while the peer is not reading
        cut = next((i for i, (p, _) in enumerate(queue) if len(p) > BIG_FRAME), len(queue))
        batch, self._queue = queue[:cut], queue[cut:]
        if batch:
            try:
                transport.write(_joined(batch, masked))
            except (ConnectionError, RuntimeError, OSError) as exc:
                self._fail(batch, str(exc) or type(exc).__name__)
            else:
                self.writes += 1
                self.frames += len(batch)
        if self._queue:
            self._slow = asyncio.create_task(self._one_by_one(), name="onebot-frames")

    async def _one_by_one(self) -> None:
        """The fallback: each queued frame through aiohttp's ``send_frame``, in order."""
        import aiohttp  # deferred: aiohttp is ~120 ms of every CLI start

        try:
            while self._queue:
                payload, tag = self._queue.pop(0)
                try:
                    await self.ws.send_frame(payload, aiohttp.WSMsgType.TEXT)
                except (ConnectionError, RuntimeError, aiohttp.ClientError) as exc:
                    self.on_error(tag, str(exc) or type(exc).__name__)
                    continue
                self.writes += 1
                self.frames += 1
        finally:
            self._slow = None
            if self._queue:  # cancelled mid-way (the connection is going): fail the rest
                batch, self._queue = self._queue, []
                self._fail(batch, "the connection closed")

    def _fail(self, batch: list[tuple[bytes, Any]], why: str) -> None:
        for _, tag in batch:
            self.on_error(tag, why)


def _joined(batch: list[tuple[bytes, Any]], masked: bool) -> bytes:
    """The batch's frames as one buffer (a server's frames, unmasked, built inline)."""
    if masked:
        return b"".join([frame(payload, True) for payload, _ in batch])
    parts = []
    for payload, _ in batch:
        n = len(payload)
        if n < 126:
            parts.append(_LEN1(_TEXT, n))
        elif n < 65536:
            parts.append(_LEN2(_TEXT, 126, n))
        else:
            parts.append(_LEN3(_TEXT, 127, n))
        parts.append(payload)
    return b"".join(parts)
