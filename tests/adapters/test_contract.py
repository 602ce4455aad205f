"""Every adapter satisfies tmy.types.Adapter, and every platform has one factory signature.

The app builds adapters with ``module.from_settings(settings, store)`` and calls
``routes()`` and ``health()`` on each without asking first; this holds all of
them to that.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from tmy.adapters.console import ConsoleAdapter
from tmy.adapters.discord_adapter import DiscordAdapter
from tmy.adapters.feishu import FeishuAdapter
from tmy.adapters.http import HttpAdapter
from tmy.adapters.matrix import MatrixAdapter
from tmy.adapters.onebot import OneBotAdapter
from tmy.adapters.openai import OpenAIFacade
from tmy.adapters.qq import QQAdapter
from tmy.adapters.satori import SatoriAdapter
from tmy.adapters.slack import SlackAdapter
from tmy.adapters.telegram import TelegramAdapter
from tmy.config import Settings
from tmy.config.adapters import Adapters
from tmy.types import Adapter

PLATFORMS = [
    "http", "openai", "onebot", "discord_adapter", "telegram",
    "qq", "feishu", "slack", "matrix", "satori",
]  # fmt: skip


@pytest.mark.parametrize(
    "adapter",
    [
        ConsoleAdapter(),
        DiscordAdapter(),
        HttpAdapter("127.0.0.1:0"),
        OneBotAdapter(),
        OpenAIFacade(),
        TelegramAdapter(),
        QQAdapter(),
        FeishuAdapter(),
        SlackAdapter(),
        MatrixAdapter(),
        SatoriAdapter(),
    ],
    ids=lambda a: type(a).__name__,
)
def test_every_adapter_satisfies_the_contract(adapter: Adapter) -> None:
    assert isinstance(adapter, Adapter)
    assert isinstance(adapter.routes(), list)
    assert isinstance(adapter.health()["state"], str)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_platform_that_is_off_builds_nothing(platform: str) -> None:
    module = importlib.import_module(f"tmy.adapters.{platform}")
    off = Settings(http_enabled=False)  # chat platforms are off by default
    assert module.from_settings(off, None) is None


def test_the_listener_and_the_facade_follow_adapters_http() -> None:
    on = Settings(http_listen="127.0.0.1:0", http_api_keys=("k",))
    listener = importlib.import_module("tmy.adapters.http").from_settings(on, None)
    facade = importlib.import_module("tmy.adapters.openai").from_settings(on, None)
    assert isinstance(listener, HttpAdapter) and listener.api_keys == ("k",)
    assert isinstance(facade, OpenAIFacade) and facade.api_keys == ("k",)
    assert listener.routes() == []  # it mounts the others' routes; it has none to give


NEEDS = {  # platform -> (a mode with a webhook and its route, the variable a missing secret names)
    "qq": ("webhook", "/qq/webhook", "QQ_APP_ID"),
    "feishu": ("webhook", "/feishu/events", "FEISHU_APP_ID"),
    "slack": ("webhook", "/slack/events", "SLACK_BOT_TOKEN"),
    "matrix": (None, None, "MATRIX_ACCESS_TOKEN"),
}


@pytest.mark.parametrize("platform", sorted(NEEDS))
async def test_a_newer_platform_without_credentials_is_failed_and_says_what_to_set(
    platform: str,
) -> None:
    """Enabled with nothing to log in with, it starts (never raises), shows ``failed`` naming
    the variable to set, and in webhook mode offers its route on the listener."""
    mode, route, variable = NEEDS[platform]
    section = {"enabled": True, **({"mode": mode} if mode else {})}
    settings = Settings(http_enabled=False, adapters=Adapters.parse({platform: section}))
    adapter = importlib.import_module(f"tmy.adapters.{platform}").from_settings(
        settings, None, env={}
    )
    assert adapter is not None and adapter.name == platform
    if route is not None:
        assert [(r.method, r.path) for r in adapter.routes()] == [("POST", route)]
    await adapter.start(_never_called)
    try:
        health = adapter.health()
        assert health["state"] == "failed", health
        assert variable in health["error"]
    finally:
        await adapter.stop()


async def _never_called(message: Any) -> Any:
    raise AssertionError(f"nothing should run: {message!r}")
