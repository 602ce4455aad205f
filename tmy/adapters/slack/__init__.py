"""Slack (``slack_sdk``): channels, DMs and threads talk to tmy's rules.

Its settings are ``settings.adapters.slack`` (:class:`tmy.config.slack.SlackConfig`);
``adapter`` is the platform adapter the daemon builds with :func:`from_settings`
(Socket Mode or the Events API, and why not Bolt), ``socket`` one Socket Mode
connection, ``webhook`` the signed ``POST /slack/events``, ``incoming`` and
``events`` what an event becomes for the rules, ``text`` Slack's markup and reply
splitting, ``compose`` a reply as Slack messages and blocks, ``sending`` the
calls with Slack's rate limits, ``replies`` running and answering, ``users``
names and workspace roles, ``media`` files and ``Message.api``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from tmy.adapters.slack.adapter import SlackAdapter
from tmy.adapters.slack.text import MAX_TEXT, readable, split_text, strip_bot_mention
from tmy.config import Settings
from tmy.config.section import credential
from tmy.config.slack import SlackConfig
from tmy.store.base import Store

__all__ = [
    "MAX_TEXT",
    "SlackAdapter",
    "SlackConfig",
    "from_settings",
    "readable",
    "split_text",
    "strip_bot_mention",
]


def from_settings(
    settings: Settings, store: Store | None = None, *, env: Mapping[str, str] | None = None
) -> SlackAdapter | None:
    """The adapter ``adapters.slack`` describes, or None when it is not enabled.

    Each credential is the key itself or the environment variable its ``<key>_env``
    names (``SLACK_BOT_TOKEN``, ``SLACK_APP_TOKEN``, ``SLACK_SIGNING_SECRET``). A
    missing one is not a config error: the adapter starts in state ``failed``
    saying which to set, and the rest of the daemon serves on. ``store`` keeps the
    deliveries seen (a redelivered event runs once, across daemons sharing it);
    ``env`` stands in for ``os.environ`` in tests.
    """
    config = settings.adapters.slack
    if not config.enabled:
        return None
    env = os.environ if env is None else env
    return SlackAdapter(
        config,
        bot_token=credential(config, "bot_token", env),
        app_token=credential(config, "app_token", env),
        signing_secret=credential(config, "signing_secret", env),
        store=store,
        shutdown_grace=settings.limits.shutdown_grace,
        rules_dir=settings.rules,
    )
