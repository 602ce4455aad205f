"""Telegram (aiogram 3): private chats, groups and supergroups talk to tmy's rules.

Its settings are ``settings.adapters.telegram``
(:class:`tmy.config.adapters.TelegramConfig`); ``incoming`` what an update
becomes for the rules, ``text`` the UTF-16 arithmetic and reply splitting,
``sending`` the ``sendMessage`` step with its retries, ``errors`` aiogram's
errors in Telegram's words, and ``adapter`` the platform adapter the daemon
builds with :func:`from_settings`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from tmy.adapters.telegram.adapter import TelegramAdapter
from tmy.adapters.telegram.incoming import read_addressing
from tmy.adapters.telegram.text import MAX_TEXT, split_text
from tmy.config import Settings
from tmy.config.adapters import TelegramConfig
from tmy.store.base import Store

__all__ = [
    "MAX_TEXT",
    "TelegramAdapter",
    "TelegramConfig",
    "from_settings",
    "read_addressing",
    "split_text",
]


def from_settings(
    settings: Settings, store: Store | None = None, *, env: Mapping[str, str] | None = None
) -> TelegramAdapter | None:
    """The adapter ``adapters.telegram`` describes, or None when it is not enabled.

    The token is read from the environment variable ``token_env`` names. A
    missing token is not a config error: the adapter starts in state
    ``failed`` saying so, and the rest of the daemon serves on. ``store`` is
    unused (every platform's factory takes it); ``env`` stands in for
    ``os.environ`` in tests.
    """
    config = settings.adapters.telegram  # checked by load_settings when enabled
    if not config.enabled:
        return None
    env = os.environ if env is None else env
    token = (env.get(config.token_env) or "").strip()
    return TelegramAdapter(
        config,
        token=token,
        shutdown_grace=settings.limits.shutdown_grace,
        rules_dir=settings.rules,
    )
