"""What an LLM step downloads for a picture: only from public hosts (or those
``limits.media_private_hosts`` or the platform's ``trusted_media_hosts`` allow), and
only what is a picture by its own bytes, labelled as what it is — real httpx to a
loopback host that lies about what it serves, and a loopback fake provider."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from tests.support.llm_fake_provider import PNG, FakeProvider
from tests.support.llm_helpers import on, rules
from tmy.message import Attachment
from tmy.testing import Bot

VISION = rules("      - {plugin: LLM, vision: true}\n")
GIF = b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;"  # noqa: E501
BODIES = {  # path -> (body, the Content-Type the host claims)
    "/lie.jpg": (PNG, "image/jpeg"),  # a PNG said to be a JPEG
    "/anim.png": (GIF, "application/octet-stream"),
    "/secret.jpg": (b'{"AccessKeyId":"ASIA","SecretAccessKey":"s3cr3t"}', "image/jpeg"),
    "/page.png": (b"<html><body>admin panel</body></html>", "text/html"),
}


class Api:
    """A platform whose pictures live on the loopback host (``trusted``: its own host)."""

    def __init__(self, url: str, trusted: tuple[str, ...] = ()) -> None:
        self.url = url
        self.trusted_media_hosts = trusted

    async def media_source(self, attachment: Any) -> tuple[str, dict[str, str]]:
        return self.url, {}

    async def quoted(self, message: Any) -> dict[str, Any] | None:
        return None


@pytest.fixture
async def host() -> AsyncIterator[str]:
    async def serve(request: web.Request) -> web.Response:
        body, kind = BODIES[request.path]
        return web.Response(body=body, headers={"Content-Type": kind})

    app = web.Application()
    app.router.add_get("/{name}", serve)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def photo(name: str) -> Attachment:
    return Attachment("image", file_id=name, name=name, mime="image/jpeg", inline=True)


def sent(provider: FakeProvider) -> list[str]:
    content = provider.seen()[0]["messages"][-1]["content"]
    return [p["image_url"]["url"] for p in content if p["type"] == "image_url"]


def data(mime: str, body: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(body).decode()}"


async def test_an_internal_host_is_refused_and_nothing_reaches_the_provider(
    provider: FakeProvider, host: str
) -> None:
    api = Api(host + "/lie.jpg")
    async with Bot({"r.yaml": VISION}, llm=on(provider)) as bot:
        reply = await bot.ask("t look", attachments=(photo("a.jpg"),), api=api)
    assert reply.error is not None
    assert "images: picture 1: refused to download from 127.0.0.1" in reply.error
    assert "limits.media_private_hosts" in reply.error
    assert provider.seen() == []


async def test_the_platforms_own_host_and_listed_hosts_are_allowed(
    provider: FakeProvider, host: str
) -> None:
    trusted = Api(host + "/lie.jpg", trusted=("127.0.0.1",))  # e.g. Telegram's api_base
    async with Bot({"r.yaml": VISION}, llm=on(provider)) as bot:
        reply = await bot.ask("t look", attachments=(photo("a.jpg"),), api=trusted)
    assert reply.error is None, reply.error
    assert sent(provider) == [data("image/png", PNG)]
    listed = Api(host + "/lie.jpg")
    async with Bot({"r.yaml": VISION}, llm=on(provider), media_private_hosts=["127.0.0.1"]) as b:
        assert (await b.ask("t look", attachments=(photo("a.jpg"),), api=listed)).error is None


@pytest.mark.parametrize(
    ("path", "expected"),
    [("/lie.jpg", data("image/png", PNG)), ("/anim.png", data("image/gif", GIF))],
)
async def test_the_mime_sent_is_the_sniffed_one(
    provider: FakeProvider, host: str, path: str, expected: str
) -> None:
    async with Bot({"r.yaml": VISION}, llm=on(provider), media_private_hosts=["*"]) as bot:
        reply = await bot.ask("t look", attachments=(photo("x.jpg"),), api=Api(host + path))
    assert reply.error is None, reply.error
    assert sent(provider) == [expected]


@pytest.mark.parametrize("path", ["/secret.jpg", "/page.png"])
async def test_a_body_that_is_no_picture_is_a_step_error(
    provider: FakeProvider, host: str, path: str
) -> None:
    """Bytes relabelled as a picture by their name or header (an internal JSON answer,
    a page) are not shipped to the provider as data:image/…"""
    async with Bot({"r.yaml": VISION}, llm=on(provider), media_private_hosts=["*"]) as bot:
        reply = await bot.ask("t look", attachments=(photo("x.jpg"),), api=Api(host + path))
    assert reply.error is not None
    assert "images: picture 1: the image 'x.jpg' is not a picture" in reply.error
    assert "PNG, JPEG, GIF, WebP, BMP, HEIC or AVIF" in reply.error
    assert provider.seen() == []


async def test_a_platform_data_url_that_is_no_picture_is_refused(provider: FakeProvider) -> None:
    api = Api(data("image/png", b"INTERNAL-ONLY db_password=hunter2"))
    async with Bot({"r.yaml": VISION}, llm=on(provider)) as bot:
        reply = await bot.ask("t look", attachments=(photo("x.png"),), api=api)
    assert reply.error is not None and "is not a picture" in reply.error
    assert provider.seen() == []
