"""Satori (satori.chat, Koishi's protocol): every platform a Satori server reaches — QQ
through Chronocat or LLOneBot's Satori mode, KOOK, Discord, Telegram, Lark … through
Koishi's server plugin — talks to tmy's rules through one adapter.

tmy is the protocol's *application* side (a client): the WebSocket event service
and the HTTP API of the server at ``adapters.satori.api_base``
(:class:`tmy.config.satori.SatoriConfig`). ``PLATFORM`` is ``satori:<platform>``
(``satori:qq``, ``satori:discord``), so rules tell the platforms apart with
``platforms: [satori:qq]`` or take them all with ``platforms: [satori]``.

**Library.** None beyond aiohttp, which tmy already uses. ``satori-python-client``
owns the application's lifecycle (launart, graia-amnesia, loguru) and would fight
the daemon's; ``satori-python-core`` has the models and an element parser, but its
parser strips every blank line out of a message's text (``re.MULTILINE`` on the
protocol's "leading/trailing whitespace with a line break" rule), its attribute
interpolation ``eval``\\ s expressions, and its model classes reject the partial
resources real servers send (Satori makes most fields optional, and servers older
than 1.1 name them differently). The protocol is small — six opcodes, one POST per
API call, an XHTML-like element syntax — so tmy reads and writes it itself:
``elements`` (the syntax), ``incoming`` (elements → text, attachments, mentions,
quote), ``compose`` (a reply → elements), ``api`` (HTTP), ``connection`` (the
WebSocket), ``logins`` (the accounts), ``events`` (events → Messages), ``admins``
(roles), ``media`` (``Message.api``), ``replies`` and ``sending`` (answering),
``adapter`` (the adapter the daemon builds with :func:`from_settings`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from tmy.adapters.satori.adapter import SatoriAdapter
from tmy.config import Settings
from tmy.config.satori import SatoriConfig
from tmy.config.section import credential
from tmy.store.base import Store

__all__ = ["SatoriAdapter", "SatoriConfig", "from_settings"]


def from_settings(
    settings: Settings, store: Store | None = None, *, env: Mapping[str, str] | None = None
) -> SatoriAdapter | None:
    """The adapter ``adapters.satori`` describes, or None when it is not enabled.

    The token is ``token``, else the environment variable ``token_env`` names; none
    at all is allowed (a server may ask for none) — a server that wants one refuses
    the connection, and the adapter then shows ``failed`` saying which key to set.
    ``store`` holds the delivered message ids (a replay runs nothing twice).
    """
    config = settings.adapters.satori
    if not config.enabled:
        return None
    env = os.environ if env is None else env
    return SatoriAdapter(
        config,
        token=credential(config, "token", env),
        store=store,
        shutdown_grace=settings.limits.shutdown_grace,
        rules_dir=settings.rules,
    )
