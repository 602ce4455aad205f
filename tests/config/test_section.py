"""The shared parts of a platform section: credentials from the key or its ``<key>_env``."""

from __future__ import annotations

import pytest

from tmy.config.adapters import Adapters
from tmy.config.section import credential
from tmy.config.slack import SlackConfig
from tmy.errors import ConfigError


def test_a_credential_given_directly_wins_over_its_environment_variable() -> None:
    config = SlackConfig(bot_token=" xoxb-file ")
    assert credential(config, "bot_token", {"SLACK_BOT_TOKEN": "xoxb-env"}) == "xoxb-file"


def test_a_credential_left_empty_is_read_from_the_variable_its_env_key_names() -> None:
    config = SlackConfig(bot_token_env="MY_SLACK")
    assert credential(config, "bot_token", {"MY_SLACK": " xoxb-env\n"}) == "xoxb-env"
    assert credential(config, "bot_token", {"SLACK_BOT_TOKEN": "other"}) == ""


def test_an_app_id_written_as_a_number_is_text() -> None:
    parsed = Adapters.parse({"qq": {"enabled": True, "app_id": 102012345}})
    assert credential(parsed.qq, "app_id", {}) == "102012345"


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"slack": {"enabled": True, "mode": "rtm"}}, r"adapters\.slack\.mode must be socket or"),
        ({"qq": {"enabled": True, "api_base": "api.sgroup.qq.com"}}, r"adapters\.qq\.api_base"),
        ({"qq": {"enabled": True, "token_url": "ftp://x"}}, r"adapters\.qq\.token_url"),
        ({"feishu": {"enabled": True, "app_secret_env": ""}}, r"app_secret_env must name"),
        ({"matrix": {"enabled": True, "admins_from": ["mod"]}}, r"'mod' is not one of"),
        ({"satori": {"enabled": True, "max_pending_per_chat": 0}}, r"from 1 to"),
    ],
)
def test_an_enabled_section_is_checked_for_use(section: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Adapters.parse(section)


def test_a_disabled_section_is_not_held_against_the_file() -> None:
    assert Adapters.parse({"slack": {"mode": "rtm"}}).slack.mode == "rtm"


def test_no_secret_given_in_the_file_shows_in_a_repr() -> None:
    """A section's repr (a traceback, debug output) never carries a credential."""
    given = {
        "qq": {"secret": "s-qq-1"},
        "feishu": {"app_secret": "s-fs-2", "encrypt_key": "s-fs-3", "verification_token": "s-fs-4"},
        "slack": {"bot_token": "s-sl-5", "app_token": "s-sl-6", "signing_secret": "s-sl-7"},
        "matrix": {"access_token": "s-mx-8", "password": "s-mx-9"},
        "satori": {"token": "s-st-10"},
        "onebot": {"access_token": "s-ob-11"},
        "telegram": {"webhook_secret": "s-tg-12"},
    }
    shown = repr(Adapters.parse(given))
    leaked = [v for section in given.values() for v in section.values() if v in shown]
    assert leaked == []
