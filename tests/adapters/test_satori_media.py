"""Satori media in: what the server's content points at is downloaded, and only there.

The server's own host is trusted for downloads (its proxy is usually on 127.0.0.1),
but a message's ``src`` comes from the platform, so another service on that host
must stay out of reach."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from aiohttp import web

from tests.support.satori_fake import driven
from tmy.errors import AdapterError
from tmy.media import download

RULES = """
rules:
  - id: look
    triggers: ["look*"]
    steps:
      - {plugin: ADJUST, input: seen}
"""
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16


@asynccontextmanager
async def local_service() -> AsyncIterator[tuple[str, list[str]]]:
    """Another service on loopback (a Redis UI, a router page …): its base URL and the
    paths it was asked for."""
    asked: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        asked.append(request.path)
        return web.Response(body=PNG, content_type="image/png")

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", asked
    finally:
        await runner.cleanup()


async def test_a_src_on_another_port_of_the_servers_host_is_not_downloaded() -> None:
    async with driven(RULES) as d, local_service() as (other, asked):
        d.fake.files["internal:qq/1/a.png"] = PNG
        await d.fake.message(
            f'look <img src="{other}/admin/export.png"/><img src="internal:qq/1/a.png"/>'
            f'<img src="{d.fake.base}/v1/proxy/internal:qq/1/a.png"/>'
        )
        await d.fake.next_sent()
        message = d.seen[-1]
        api = message.api
        assert api is not None
        trusted = api.trusted_media_hosts  # type: ignore[attr-defined]
        outside, internal, own = message.attachments
        with pytest.raises(AdapterError, match="not its origin"):
            await api.media_source(outside)  # what tmy.llm.images does before download()
        async with httpx.AsyncClient() as http:
            for attachment in (internal, own):  # the server's own URLs still download
                url, headers = await api.media_source(attachment)
                got = await download(http, url, headers, 1000, private_hosts=trusted)
                assert got.data == PNG
    assert asked == []


async def test_a_proxied_src_cannot_climb_out_of_the_proxy_route() -> None:
    """``internal:../../x`` became ``{api_base}/v1/proxy/internal:../../x``, which the HTTP
    client resolves to ``{api_base}/x``: a GET of another route, with the token."""
    async with driven(RULES) as d:
        d.fake.proxy_urls = ["https://cdn.example/"]
        await d.fake.drop()  # READY again, now with the proxy URL
        await d.state("reconnecting")
        await d.state("connected")
        await d.fake.message(
            'look <img src="internal:../../../../admin"/>'
            '<img src="https://cdn.example/../../../../../admin"/><img src="internal:qq/1/a.png"/>'
        )
        await d.fake.next_sent()
        api = d.seen[-1].api
        assert api is not None
        climbing, via_cdn, fine = d.seen[-1].attachments
        for attachment in (climbing, via_cdn):
            with pytest.raises(AdapterError, match="dot segments"):
                await api.media_source(attachment)
        url, headers = await api.media_source(fine)
    assert url == f"{d.fake.base}/v1/proxy/internal:qq/1/a.png" and headers
