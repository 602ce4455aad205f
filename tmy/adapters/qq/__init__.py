"""QQ's official bot API: guild channels, groups and C2C (private) chats talk to tmy's rules.

Its settings are ``settings.adapters.qq`` (:class:`tmy.config.qq.QQConfig`);
``api`` the access token and authorised calls, ``signing`` the webhook's ed25519
signatures, ``webhook`` what a webhook POST holds, ``gateway`` the WebSocket
gateway, ``incoming`` what a dispatch becomes for the rules, ``text`` reply
splitting, ``sending`` the send endpoints with their retries, and ``adapter`` the
platform adapter the daemon builds with :func:`from_settings`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from tmy.adapters.qq.adapter import WEBHOOK_PATH, QQAdapter
from tmy.adapters.qq.text import MAX_TEXT, split_text
from tmy.config import Settings
from tmy.config.qq import QQConfig
from tmy.config.section import credential
from tmy.store.base import Store

__all__ = ["MAX_TEXT", "WEBHOOK_PATH", "QQAdapter", "QQConfig", "from_settings", "split_text"]


def from_settings(
    settings: Settings, store: Store | None = None, *, env: Mapping[str, str] | None = None
) -> QQAdapter | None:
    """The adapter ``adapters.qq`` describes, or None when it is not enabled.

    ``app_id`` and ``secret`` are the section's own values, else the environment
    variables ``app_id_env`` / ``secret_env`` name. A missing one is not a config
    error: the adapter starts in state ``failed`` saying which to set, and the rest
    of the daemon serves on. ``store`` deduplicates message ids; ``env`` stands in
    for ``os.environ`` in tests.
    """
    config = settings.adapters.qq
    if not config.enabled:
        return None
    env = os.environ if env is None else env
    return QQAdapter(
        config,
        app_id=credential(config, "app_id", env),
        secret=credential(config, "secret", env),
        store=store,
        shutdown_grace=settings.limits.shutdown_grace,
    )
