"""adapters: one frozen object per adapter, checked for use when its platform is enabled."""

from __future__ import annotations

from typing import Any

import pytest

from tmy.config.adapters import (
    PER_CHAT_LIMIT,
    Adapters,
    DiscordConfig,
    OneBotConfig,
    OpenAIConfig,
    TelegramConfig,
)
from tmy.errors import ConfigError


def test_defaults() -> None:
    adapters = Adapters()
    assert not (adapters.onebot.enabled or adapters.discord.enabled or adapters.telegram.enabled)
    assert adapters.console.enabled and adapters.http.enabled
    assert adapters.http.listen == "127.0.0.1:8080"
    assert adapters.openai == OpenAIConfig(
        "X-OpenWebUI-User-Id", False, "No rule matched this message."
    )
    assert adapters.telegram.max_pending_per_chat == 20


def test_parse_checks_only_enabled_platforms() -> None:
    off = Adapters.parse({"telegram": {"mode": "webhook"}})  # no webhook_url: unusable, but off
    assert off.telegram.mode == "webhook"
    with pytest.raises(ConfigError, match=r"adapters\.telegram\.webhook_url must be"):
        Adapters.parse({"telegram": {"enabled": True, "mode": "webhook"}})


def test_a_null_value_keeps_the_default() -> None:
    parsed = Adapters.parse({"onebot": {"enabled": True, "path": None}, "openai": {}})
    assert parsed.onebot.path == "/onebot/v11/ws"


@pytest.mark.parametrize(
    ("kind", "section", "says"),
    [
        (OneBotConfig, {"mode": "sideways"}, "adapters.onebot.mode must be reverse or forward"),
        (OneBotConfig, {"mode": "forward", "url": "http://x"}, "adapters.onebot.url must be"),
        (OneBotConfig, {"anonymous": "show"}, "adapters.onebot.anonymous must be key or ignore"),
        (DiscordConfig, {"shards": 0}, "adapters.discord.shards must be a number >= 1"),
        (DiscordConfig, {"token_env": ""}, "adapters.discord.token_env must name"),
        (TelegramConfig, {"api_base": "api.x"}, "adapters.telegram.api_base must be an http"),
        (TelegramConfig, {"webhook_secret": "a b"}, "adapters.telegram.webhook_secret may use"),
        (
            TelegramConfig,
            {"max_pending_per_chat": PER_CHAT_LIMIT + 1},
            f"from 1 to {PER_CHAT_LIMIT}",
        ),
    ],
)
def test_from_section_names_the_key(kind: Any, section: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        kind.from_section(section)


def test_a_section_reads_as_a_mapping_of_its_fields() -> None:
    onebot = OneBotConfig(enabled=True, access_token="t")
    assert onebot["access_token"] == "t" and onebot.get("enabled") is True
    assert "mode" in onebot and "nope" not in onebot
    assert list(onebot)[:2] == ["enabled", "mode"] and len(onebot) == len(dict(onebot))
    with pytest.raises(KeyError):
        onebot["nope"]
    assert OneBotConfig.from_section(onebot) == onebot
    assert Adapters()["onebot"] == OneBotConfig()
