"""Telegram's media and tmy's address check: the adapter's own file URLs (on the
configured ``api_base``) are trusted by construction — a self-hosted Bot API server
on 127.0.0.1 needs no ``limits.media_private_hosts`` — but what they serve must still
be a picture; a reply's files come only from the rules' ``media/``."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiogram import Bot as AiogramBot
from aiogram.client.telegram import PRODUCTION, TelegramAPIServer

from tests.adapters.test_telegram_rules import PHOTO, driven
from tests.support.llm_fake_provider import PNG, FakeProvider
from tests.support.llm_fake_provider import Reply as Completion
from tests.support.telegram_fake import TOKEN
from tmy.adapters.telegram.compose import compose
from tmy.adapters.telegram.media import TelegramApi
from tmy.errors import AdapterError
from tmy.message import Outgoing


@pytest.mark.parametrize(
    ("server", "hosts"),
    [
        (TelegramAPIServer.from_base("http://127.0.0.1:8081"), ("127.0.0.1",)),
        (TelegramAPIServer.from_base("https://tg-api.internal/"), ("tg-api.internal",)),
        (PRODUCTION, ("api.telegram.org",)),
    ],
)
async def test_the_api_base_host_is_the_trusted_media_host(
    server: TelegramAPIServer, hosts: tuple[str, ...]
) -> None:
    bot = AiogramBot(TOKEN)
    try:
        assert TelegramApi(bot, server, None).trusted_media_hosts == hosts
    finally:
        await bot.session.close()


async def test_a_self_hosted_api_on_loopback_needs_no_config(provider: FakeProvider) -> None:
    """The fake Bot API listens on 127.0.0.1 and the Bot has no media_private_hosts."""
    provider.script("fake", [Completion("a small square")])
    async with driven(provider) as d:
        assert d.bot.settings.limits.media_private_hosts == ()
        d.fake.files["pic"] = PNG
        await d.fake.message(None, photo=PHOTO, caption="describe this")
        assert (await d.fake.next_sent())["text"] == "a small square"


async def test_a_file_that_is_no_picture_is_refused_before_the_provider(
    provider: FakeProvider,
) -> None:
    async with driven(provider) as d:
        d.fake.files["pic"] = b'{"secret": "not a picture"}'
        await d.fake.message(None, photo=PHOTO, caption="describe this")
        text = (await d.fake.next_sent())["text"]
    assert text.startswith("failed: images: picture 1: the image") and "is not a picture" in text
    assert provider.seen() == []


def test_a_replys_file_must_be_under_the_rules_media_dir(tmp_path: Path) -> None:
    (tmp_path / "media").mkdir()
    (tmp_path / "media" / "chart.png").write_bytes(PNG)
    (tmp_path / "bot.yaml").write_text("rules: []")
    (doc,) = compose("", Outgoing(files=["media/chart.png"]), rules_dir=tmp_path / "bot.yaml")
    assert doc.method == "document" and doc.media.data == PNG  # type: ignore[union-attr]
    with pytest.raises(AdapterError, match=r"not in the media directory .*media"):
        compose("", Outgoing(files=["bot.yaml"]), rules_dir=tmp_path)
