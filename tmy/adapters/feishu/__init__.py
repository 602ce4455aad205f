"""Feishu / Lark: group and private (p2p) chats talk to tmy's rules.

Its settings are ``settings.adapters.feishu`` (:class:`tmy.config.feishu.FeishuConfig`);
``api`` the token and the server API, ``longconn`` the event WebSocket with its
``frames``, ``webhook`` and ``crypto`` the webhook's checks, ``incoming`` what an
event becomes for the rules, ``compose``/``sending`` how replies go out,
``admins`` group owners and managers, ``replies`` the answering half, and
``adapter`` the platform adapter the daemon builds with :func:`from_settings`
(the module docstring there says why it is written on aiohttp, not lark-oapi).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from tmy.adapters.feishu.adapter import WEBHOOK_PATH, FeishuAdapter
from tmy.adapters.feishu.compose import MAX_TEXT, split_text
from tmy.config import Settings
from tmy.config.feishu import FeishuConfig
from tmy.config.section import credential
from tmy.store.base import Store

__all__ = [
    "MAX_TEXT",
    "WEBHOOK_PATH",
    "FeishuAdapter",
    "FeishuConfig",
    "from_settings",
    "split_text",
]


def from_settings(
    settings: Settings, store: Store | None = None, *, env: Mapping[str, str] | None = None
) -> FeishuAdapter | None:
    """The adapter ``adapters.feishu`` describes, or None when it is not enabled.

    Each credential is the key itself or the environment variable its ``<key>_env``
    names. A missing one is not a config error: the adapter starts ``failed``
    saying which to set, and the rest of the daemon serves on. ``store`` keeps the
    delivered event ids (a redelivery runs once); ``env`` stands in for ``os.environ``.
    """
    config = settings.adapters.feishu
    if not config.enabled:
        return None
    env = os.environ if env is None else env
    return FeishuAdapter(
        config,
        app_id=credential(config, "app_id", env),
        app_secret=credential(config, "app_secret", env),
        verification_token=credential(config, "verification_token", env),
        encrypt_key=credential(config, "encrypt_key", env),
        store=store,
        shutdown_grace=settings.limits.shutdown_grace,
        rules_dir=settings.rules,
    )
