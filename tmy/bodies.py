"""Response bodies read with a bound on what they *decode* to, not what was sent.

httpx inflates a compressed body one received chunk at a time with no output
limit, so 2 KB of ``Content-Encoding: gzip, gzip`` become a gigabyte inside a
single call, before any caller can count bytes. :func:`decoded_chunks` reads the
raw bytes instead and inflates each encoding layer itself with zlib's
``max_length``, so no layer ever produces more than the cap (plus one byte, to
tell "exactly the cap" from "more"). Only the encodings tmy asks for
(:data:`ACCEPT_ENCODING`) are decoded; any other is refused with a clear error
rather than handed on undecoded.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from tmy.errors import TmyError

if TYPE_CHECKING:  # deferred: httpx is ~50 ms of every CLI start
    import httpx

ACCEPT_ENCODING = "gzip, deflate"  # what the shared client asks for: all it can bound


class BodyTooLarge(TmyError):
    """The decoded body passed its cap; reading stopped."""


class BadEncoding(TmyError):
    """The body names an encoding tmy does not decode, or is not valid in it."""


class _Inflate:
    """One gzip/deflate layer that never returns more than it is allowed to."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        # gzip: header required; deflate: zlib-wrapped, or raw as some servers send it
        self.wbits = zlib.MAX_WBITS | 16 if encoding in ("gzip", "x-gzip") else zlib.MAX_WBITS
        self.inflater = zlib.decompressobj(self.wbits)
        self.started = False

    def feed(self, data: bytes, limit: int) -> bytes:
        """Inflate ``data``; raise :class:`BodyTooLarge` past ``limit`` bytes of output."""
        if not data:
            return b""
        try:
            out = self.inflater.decompress(data, limit + 1)
        except zlib.error:
            if self.encoding == "deflate" and not self.started:  # raw deflate after all
                self.inflater = zlib.decompressobj(-zlib.MAX_WBITS)
                self.started = True
                return self.feed(data, limit)
            raise BadEncoding(f"the body is not valid {self.encoding}") from None
        self.started = True
        if len(out) > limit:
            raise BodyTooLarge
        return out


def _layers(response: httpx.Response) -> list[_Inflate]:
    """Decoders for the response's Content-Encoding, outermost (last applied) first."""
    names = [
        name.strip().lower()
        for name in response.headers.get("content-encoding", "").split(",")
        if name.strip() and name.strip().lower() != "identity"
    ]
    for name in names:
        if name not in ("gzip", "x-gzip", "deflate"):
            raise BadEncoding(
                f"the body is sent with Content-Encoding {name!r}, which tmy does not decode "
                f"(it asks for {ACCEPT_ENCODING})"
            )
    return [_Inflate(name) for name in reversed(names)]


async def decoded_chunks(response: httpx.Response, cap: int) -> AsyncIterator[bytes]:
    """The response body, decoded, in chunks; :class:`BodyTooLarge` once it passes ``cap``.

    A declared ``Content-Length`` over the cap is refused before reading; every
    decoding layer is bounded by what is left of the cap.
    """
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap and "content-encoding" not in response.headers:
        raise BodyTooLarge
    layers = _layers(response)
    total = 0
    async for raw in response.aiter_raw():
        chunk = raw
        for layer in layers:
            chunk = layer.feed(chunk, cap - total)
        total += len(chunk)
        if total > cap:
            raise BodyTooLarge
        if chunk:
            yield chunk


async def read_capped(
    response: httpx.Response, cap: int, too_large: Callable[[], Exception]
) -> bytes:
    """The whole decoded body, or ``too_large()`` raised once it passes ``cap`` bytes."""
    body = bytearray()
    try:
        async for chunk in decoded_chunks(response, cap):
            body += chunk
    except BodyTooLarge:
        raise too_large() from None
    return bytes(body)
