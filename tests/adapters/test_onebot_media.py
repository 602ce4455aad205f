"""OneBot image segments pointing at internal hosts: tmy does not download them for the
LLM unless ``limits.media_private_hosts`` lists the host (a NapCat serving pictures on
127.0.0.1), and what it downloads must be a picture. A NapCat-like loopback client, a
loopback "internal service", a loopback fake provider, real httpx."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from tests.support.llm_fake_provider import PNG, FakeProvider
from tests.support.llm_fake_provider import Reply as Completion
from tests.support.llm_helpers import on
from tests.support.onebot_fake import image, loopback, text
from tmy.testing import Bot

RULES = """
rules:
  - id: describe
    triggers: ["describe *"]
    on_error: "failed: {STEP_ERROR}"
    steps:
      - {plugin: LLM, vision: true}
"""


class Internal:
    """An internal service: ``/admin/secret`` text, ``/pic.png`` a real PNG."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.base = ""

    async def serve(self, request: web.Request) -> web.Response:
        self.hits.append(request.path)
        if request.path == "/pic.png":
            return web.Response(body=PNG, content_type="image/png")
        return web.Response(text="INTERNAL-ONLY db_password=hunter2")


@pytest.fixture
async def internal() -> AsyncIterator[Internal]:
    service = Internal()
    app = web.Application()
    app.router.add_get("/{tail:.*}", service.serve)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    service.base = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    try:
        yield service
    finally:
        await runner.cleanup()


async def ask(provider: FakeProvider, url: str, **settings: Any) -> str:
    """Send ``describe`` with an image segment of ``url``; the reply's text."""
    async with (
        Bot({"r.yaml": RULES}, llm=on(provider), **settings) as bot,
        loopback(bot.engine.handle, store=bot.app.store) as (_, impl),
    ):
        await impl.group([text("describe "), image(url, file="x.jpg")], message_id=7)
        action = await impl.next_action()
    return "".join(s["data"].get("text", "") for s in action["params"]["message"])


async def test_an_image_segment_on_an_internal_host_is_not_downloaded(
    provider: FakeProvider, internal: Internal
) -> None:
    said = await ask(provider, internal.base + "/admin/secret")
    assert said.startswith("failed: images: picture 1: refused to download from 127.0.0.1")
    assert "limits.media_private_hosts" in said
    assert internal.hits == [] and provider.seen() == []


async def test_a_listed_host_is_downloaded_but_only_pictures_are_sent(
    provider: FakeProvider, internal: Internal
) -> None:
    provider.script("fake", [Completion("a small square")])
    listed = {"media_private_hosts": ["127.0.0.1"]}
    assert await ask(provider, internal.base + "/pic.png", **listed) == "a small square"
    said = await ask(provider, internal.base + "/admin/secret", **listed)
    assert "is not a picture" in said and "hunter2" not in said
    assert len(provider.seen()) == 1  # only the real picture's request
