"""OneBot v11 (QQ through NapCat, LLOneBot, Lagrange): reverse or forward WebSocket.

``codec`` reads and writes messages (segment arrays, CQ-code strings),
``connection`` is one socket (events in, echo-matched actions out, silence
detection), ``batching`` writes the actions ready in one pass of the event
loop with one transport write, ``accounts`` the open sockets and their bot
accounts, ``handshake`` the reverse endpoint's checks, ``events`` what an
event becomes (the first-delivery check, an in-process front then the store's
claim, is :mod:`tmy.adapters.dedup`, which every chat adapter shares),
``sending`` a reply's ``send_msg`` actions, and ``adapter`` the platform
adapter the daemon builds with :func:`from_settings`.
"""

from __future__ import annotations

from tmy.adapters.onebot.adapter import OneBotAdapter
from tmy.adapters.onebot.handshake import exposed
from tmy.config import Settings
from tmy.config.adapters import OneBotConfig
from tmy.logs import get_logger
from tmy.store.base import Store

__all__ = ["OneBotAdapter", "OneBotConfig", "from_settings"]

log = get_logger("tmy.adapter.onebot")


def from_settings(settings: Settings, store: Store | None = None) -> OneBotAdapter | None:
    """The adapter ``adapters.onebot`` describes, or None when it is not enabled.

    ``store`` keeps the de-duplication window (so it holds across daemons sharing it).
    """
    config = settings.adapters.onebot  # checked by load_settings when enabled
    if not config.enabled:
        return None
    listen = settings.adapters.http.listen
    if config.mode == "reverse" and not config.access_token and exposed(listen):
        log.warning(
            "onebot.no_access_token",
            listen=listen,
            hint="anyone who reaches this port can speak as any QQ user: set "
            "adapters.onebot.access_token (or TMY_ONEBOT_TOKEN) here and in the implementation",
        )
    rules = settings.rules  # a reply's image/file paths are read from under the rules directory
    return OneBotAdapter(
        config,
        store=store,
        shutdown_grace=settings.limits.shutdown_grace,
        rules_dir=rules if rules.is_dir() else rules.parent,
        media_private_hosts=settings.limits.media_private_hosts,
    )
