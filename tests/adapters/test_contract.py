"""Every adapter satisfies tmy.types.Adapter, and every platform has one factory signature.

The app builds adapters with ``module.from_settings(settings, store)`` and calls
``routes()`` and ``health()`` on each without asking first; this holds all of
them to that.
"""

from __future__ import annotations

import importlib

import pytest

from tmy.adapters.console import ConsoleAdapter
from tmy.adapters.discord_adapter import DiscordAdapter
from tmy.adapters.http import HttpAdapter
from tmy.adapters.onebot import OneBotAdapter
from tmy.adapters.openai import OpenAIFacade
from tmy.adapters.telegram import TelegramAdapter
from tmy.config import Settings
from tmy.types import Adapter

PLATFORMS = ["http", "openai", "onebot", "discord_adapter", "telegram"]


@pytest.mark.parametrize(
    "adapter",
    [
        ConsoleAdapter(),
        DiscordAdapter(),
        HttpAdapter("127.0.0.1:0"),
        OneBotAdapter(),
        OpenAIFacade(),
        TelegramAdapter(),
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
