"""OneBot image segments pointing at internal hosts: tmy does not download them for the
LLM unless ``limits.media_private_hosts`` lists the host (a NapCat serving pictures on
127.0.0.1), and what it downloads must be a picture; a reply's image/file URL on an
internal host is not handed to the implementation (which would download it). A
NapCat-like loopback client, a loopback "internal service", a loopback fake provider,
real httpx."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from tests.support.llm_fake_provider import PNG, FakeProvider
from tests.support.llm_fake_provider import Reply as Completion
from tests.support.llm_helpers import on
from tests.support.onebot_fake import image, loopback, text
from tmy.adapters.onebot import from_settings
from tmy.adapters.onebot.outbound import FileUpload, compose, localize
from tmy.config import Settings
from tmy.message import Outgoing
from tmy.testing import Bot

GROUP = {"message_type": "group", "group_id": 7}

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


# -- a reply's URLs: the implementation downloads them, so internal hosts are not passed on --


async def test_a_replys_internal_urls_are_not_handed_to_the_implementation() -> None:
    parts = Outgoing(
        images=["http://127.0.0.1:9/latest/meta-data/", "https://93.184.216.34/cat.png"],
        files=["http://169.254.169.254/creds.json", "https://no-such-host.invalid/a.pdf"],
    )
    local = await localize(parts, None)
    assert local == {
        "http://127.0.0.1:9/latest/meta-data/": "",
        "http://169.254.169.254/creds.json": "",
    }  # public and unresolvable names pass: the implementation fetches (or fails) itself
    (message, upload) = compose(GROUP, "here", parts, local=local)
    assert message == [
        {"type": "text", "data": {"text": "here\n[image: meta-data]\n[file: creds.json]"}},
        {"type": "image", "data": {"file": "https://93.184.216.34/cat.png"}},
    ]
    assert isinstance(upload, FileUpload)
    assert upload.params["file"] == "https://no-such-host.invalid/a.pdf"


async def test_listed_hosts_are_handed_on() -> None:
    parts = Outgoing(images=["http://127.0.0.1:9/pic.png"])
    assert await localize(parts, None, ["127.0.0.1"]) == {}
    (message,) = compose(GROUP, "", parts, local={})
    assert message == [{"type": "image", "data": {"file": "http://127.0.0.1:9/pic.png"}}]


async def test_the_adapter_takes_the_config_key(tmp_path) -> None:
    settings = Settings(
        rules=tmp_path,
        adapters={"onebot": {"enabled": True, "access_token": "t"}},
        media_private_hosts=("127.0.0.1",),
    )
    adapter = from_settings(settings)
    assert adapter is not None and adapter.media_private_hosts == ("127.0.0.1",)
