"""Matrix: rooms and DMs of one bot account talk to tmy's rules.

**Library: mautrix** (mautrix-python), not matrix-nio. Both are maintained; what
decided it:

* mautrix runs on aiohttp alone (plus attrs and yarl), as tmy already does;
  matrix-nio adds h2, h11, aiofiles, aiohttp-socks, jsonschema, pycryptodome and
  unpaddedbase64 to every install, for features a bot does not use.
* mautrix's client API is split the way tmy needs it: typed calls
  (:class:`mautrix.client.ClientAPI`: login, whoami, sync, send, upload, join,
  state) without an event loop of its own, so tmy runs its own ``/sync`` loop and
  reports ``connected`` / ``reconnecting`` / ``failed`` (mautrix's and nio's own
  sync loops retry a revoked token or a network error silently). Its
  :class:`~mautrix.client.state_store.SyncStore` interface is where the sync
  token goes: tmy implements it on its store
  (:class:`~tmy.adapters.matrix.session.StoredSyncToken`).
* mautrix is what the mautrix bridges (Telegram, WhatsApp, Signal … bridges
  running on many homeservers) are built on, so it follows the spec closely
  (authenticated media, room v11 redactions, intentional mentions).

What it lacks, tmy adds in :mod:`~tmy.adapters.matrix.http`: a 429's
``retry_after_ms`` (mautrix's error drops it).

**End-to-end encryption is not supported.** mautrix's (and nio's older)
encryption needs python-olm on libolm, which its authors deprecated in 2024;
an encrypted room's messages arrive as ``m.room.encrypted`` events tmy cannot
read. In such a room the bot says once (an unencrypted ``m.notice``) that it
cannot read encrypted messages, logs ``matrix.encrypted_room``, and answers
nothing there. Use rooms without encryption (Element: a room's Settings >
Security & Privacy, before enabling it; encryption cannot be turned off later).

**Modules.** ``session`` the login and the stored sync token; ``http`` mautrix's
HTTP client keeping ``retry_after``; ``incoming`` what a sync's events become;
``rooms`` DMs, power levels, encryption per room; ``invites`` joining invited
rooms; ``text`` splitting and mentions; ``compose`` a reply as events; ``sending``
the send step; ``replies`` running and answering; ``media`` ``Message.api``;
``adapter`` the adapter.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from tmy.adapters.matrix.adapter import MatrixAdapter
from tmy.adapters.matrix.compose import MediaLoader
from tmy.adapters.matrix.session import Credentials
from tmy.adapters.matrix.text import MAX_TEXT, split_text
from tmy.config import Settings
from tmy.config.matrix import MatrixConfig
from tmy.config.section import credential
from tmy.store.base import Store

__all__ = [
    "MAX_TEXT",
    "Credentials",
    "MatrixAdapter",
    "MatrixConfig",
    "from_settings",
    "split_text",
]


def from_settings(
    settings: Settings, store: Store | None = None, *, env: Mapping[str, str] | None = None
) -> MatrixAdapter | None:
    """The adapter ``adapters.matrix`` describes, or None when it is not enabled.

    Credentials are the keys themselves or the variables their ``_env`` keys name;
    a missing one starts the adapter in ``failed`` saying what to set. ``store``
    keeps the sync token, the device and the seen event ids; ``env`` stands in
    for ``os.environ`` in tests.
    """
    config = settings.adapters.matrix
    if not config.enabled:
        return None
    env = os.environ if env is None else env
    given = Credentials(
        user_id=credential(config, "user_id", env),
        access_token=credential(config, "access_token", env),
        password=credential(config, "password", env),
    )
    loader = MediaLoader(settings.rules, private_hosts=settings.limits.media_private_hosts)
    return MatrixAdapter(
        config,
        credentials=given,
        store=store,
        shutdown_grace=settings.limits.shutdown_grace,
        loader=loader,
    )
