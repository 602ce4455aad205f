"""The Discord adapter's reply media loader (:class:`MediaLoader`) against the attack of
a reply map naming internal URLs and rules files: a loopback "metadata service", a
"public" URL that redirects to it, the rules YAML — none is uploaded; listed hosts and
files under the rules' ``media/`` are."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.support.llm_fake_provider import PNG
from tmy.adapters.discord_adapter import from_settings
from tmy.adapters.discord_adapter.parts import MediaLoader, prepare
from tmy.config import Settings
from tmy.message import Outgoing

CREDS = b'{"AccessKeyId":"ASIA-INTERNAL","SecretAccessKey":"s3cr3t"}'


@pytest.fixture
async def port() -> AsyncIterator[int]:
    """``/role``: credentials; ``/cat.png``: a 302 to ``/role`` on 127.0.0.1; ``/pic.png``."""
    number = 0

    async def role(_: web.Request) -> web.Response:
        return web.Response(body=CREDS, content_type="application/json")

    async def hop(_: web.Request) -> web.Response:
        raise web.HTTPFound(f"http://127.0.0.1:{number}/role")

    async def pic(_: web.Request) -> web.Response:
        return web.Response(body=PNG, content_type="image/png")

    app = web.Application()
    app.router.add_get("/role", role)
    app.router.add_get("/cat.png", hop)
    app.router.add_get("/pic.png", pic)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    number = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield number
    finally:
        await runner.cleanup()


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    folder = tmp_path / "rules"
    (folder / "media").mkdir(parents=True)
    (folder / "media" / "logo.png").write_bytes(PNG)
    (folder / "bot.yaml").write_text("rules: []  # and its secrets")
    return folder


async def test_internal_urls_redirects_and_rules_files_are_not_uploaded(
    port: int, rules: Path
) -> None:
    files = [
        f"http://127.0.0.1:{port}/role",
        f"http://localhost:{port}/cat.png",  # stands for a public host that 302s inside
        "bot.yaml",
        "../config/tmy.yaml",
    ]
    loader = MediaLoader(rules)
    try:
        parts = await prepare(Outgoing(files=files), loader)
    finally:
        await loader.aclose()
    assert parts.uploads == []
    assert parts.notes == [files[0], files[1], "[file not sent]", "[file not sent]"]


async def test_the_redirect_hop_is_checked_even_from_an_allowed_host(
    port: int, rules: Path
) -> None:
    loader = MediaLoader(rules, private_hosts=["localhost"])  # 127.0.0.1 is not listed
    try:
        parts = await prepare(Outgoing(files=[f"http://localhost:{port}/cat.png"]), loader)
    finally:
        await loader.aclose()
    assert parts.uploads == [] and parts.notes == [f"http://localhost:{port}/cat.png"]


async def test_listed_hosts_and_media_files_are_uploaded(port: int, rules: Path) -> None:
    loader = MediaLoader(rules, private_hosts=["127.0.0.1"])
    try:
        parts = await prepare(
            Outgoing(files=[f"http://127.0.0.1:{port}/pic.png", "media/logo.png"]), loader
        )
    finally:
        await loader.aclose()
    assert parts.uploads == [(PNG, "pic.png"), (PNG, "logo.png")] and parts.notes == []


def test_the_adapter_takes_the_config_key(rules: Path) -> None:
    settings = Settings(
        rules=rules,
        adapters={"discord": {"enabled": True}},
        media_private_hosts=("127.0.0.1",),
    )
    adapter = from_settings(settings, env={"DISCORD_TOKEN": "x"})
    assert adapter is not None and isinstance(adapter.load, MediaLoader)
    assert adapter.load.private_hosts == ("127.0.0.1",)
    assert adapter.load.base_dir == rules
