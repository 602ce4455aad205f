"""Bounded body decoding (tmy/bodies.py) against a real loopback server."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import AsyncIterator

import httpx
import pytest
from aiohttp import web

from tmy import bodies

TEXT = b"hello bounded world " * 50  # 1,000 bytes


def _raw_deflate(data: bytes) -> bytes:
    comp = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return comp.compress(data) + comp.flush()


ENCODED = {
    "identity": ("", TEXT),
    "gzip": ("gzip", gzip.compress(TEXT)),
    "deflate": ("deflate", zlib.compress(TEXT)),
    "raw-deflate": ("deflate", _raw_deflate(TEXT)),
    "twice": ("gzip, deflate", zlib.compress(gzip.compress(TEXT))),
    "br": ("br", b"\x0b\x02\x80hello\x03"),
    "broken": ("gzip", b"not gzip at all"),
}


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async def body(request: web.Request) -> web.Response:
        encoding, data = ENCODED[request.match_info["name"]]
        headers = {"Content-Encoding": encoding} if encoding else {}
        return web.Response(body=data, headers=headers)

    app = web.Application()
    app.router.add_get("/{name}", body)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


class TooLarge(Exception):
    pass


async def _fetch(url: str, cap: int) -> bytes:
    async with (
        httpx.AsyncClient() as client,
        client.stream("GET", url, headers={"Accept-Encoding": bodies.ACCEPT_ENCODING}) as resp,
    ):
        return await bodies.read_capped(resp, cap, TooLarge)


@pytest.mark.parametrize("name", ["identity", "gzip", "deflate", "raw-deflate", "twice"])
async def test_each_accepted_encoding_decodes_to_the_text(server: str, name: str) -> None:
    assert await _fetch(f"{server}/{name}", 10_000) == TEXT
    assert await _fetch(f"{server}/{name}", len(TEXT)) == TEXT  # exactly the cap is fine


@pytest.mark.parametrize("name", ["identity", "gzip", "twice"])
async def test_one_byte_over_the_cap_is_too_large(server: str, name: str) -> None:
    with pytest.raises(TooLarge):
        await _fetch(f"{server}/{name}", len(TEXT) - 1)


async def test_an_encoding_tmy_did_not_ask_for_is_refused_by_name(server: str) -> None:
    with pytest.raises(bodies.BadEncoding, match="'br'"):
        await _fetch(f"{server}/br", 10_000)


async def test_a_body_that_is_not_in_its_encoding_is_a_clear_error(server: str) -> None:
    with pytest.raises(bodies.BadEncoding, match="not valid gzip"):
        await _fetch(f"{server}/broken", 10_000)
