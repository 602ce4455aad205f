"""Feishu / Lark: group and private (p2p) chats talk to tmy's rules.

**Library: aiohttp, not lark-oapi** (whose pins do not conflict with tmy's). The
SDK's long-connection client blocks in ``start()`` on an event loop its module
creates at import, so it cannot run inside the daemon's loop; its async API calls
fetch the tenant token with blocking ``requests`` and open an HTTP client per
call; its token manager cannot tell tmy that Feishu refused the ``app_secret``
(tmy must show ``failed`` once, not fail every call); and importing it costs
~2 s. What tmy needs is small and written here on aiohttp and ``cryptography``:
the token and calls (``api``), the protobuf frames of the long connection
(``frames``: checked in the tests against the SDK's own generated ``pbbp2_pb2``),
AES decryption and signatures (``crypto``). lark-oapi is left to the tests.

Its settings are ``settings.adapters.feishu`` (:class:`tmy.config.feishu.FeishuConfig`);
``longconn`` is the event WebSocket, ``webhook`` the ``/feishu/events`` route's
checks, ``incoming`` what an event becomes for the rules, ``compose``/``sending``
how replies go out, ``admins`` group owners and managers, ``replies`` the
answering half, and ``adapter`` the platform adapter the daemon builds with
:func:`from_settings`.
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
        media_private_hosts=settings.limits.media_private_hosts,
    )
