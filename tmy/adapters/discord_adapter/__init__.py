"""Discord (discord.py 2.x): guild channels and DMs talk to tmy's rules.

Its settings are ``settings.adapters.discord``
(:class:`tmy.config.adapters.DiscordConfig`). ``adapter`` is the platform
adapter the daemon builds with :func:`from_settings` (connecting, intents);
``receiving`` its discord.py event handlers and runs (streaming, typing);
``inbound`` attachments and chat roles of a message, ``events`` gateway events
as tmy events, ``api`` the quoted message and media URLs a run may ask for;
``parts`` a reply's images, files, mentions and buttons, ``sending`` a queued
reply's way out, ``text`` the mention and message-splitting helpers.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping

with warnings.catch_warnings():
    # discord.py imports the stdlib ``audioop`` for voice (deprecated since 3.11); tmy
    # never uses voice, and the warning would only alarm users (and fail -W error runs).
    # The package imports it first, so its modules' plain ``import discord`` is quiet.
    warnings.filterwarnings("ignore", "'audioop' is deprecated", DeprecationWarning)
    import discord

from tmy.adapters.discord_adapter.adapter import DiscordAdapter
from tmy.adapters.discord_adapter.parts import MediaLoader
from tmy.adapters.discord_adapter.text import MAX_TEXT, split_message, strip_mention
from tmy.config import Settings
from tmy.config.adapters import DiscordConfig
from tmy.store.base import Store

__all__ = [
    "MAX_TEXT",
    "DiscordAdapter",
    "DiscordConfig",
    "discord",
    "from_settings",
    "split_message",
    "strip_mention",
]


def from_settings(
    settings: Settings, store: Store | None = None, *, env: Mapping[str, str] | None = None
) -> DiscordAdapter | None:
    """The adapter ``adapters.discord`` describes, or None when it is not enabled.

    A missing token is not a config error: the adapter starts in state
    ``failed`` saying so, and the rest of the daemon serves on. ``store`` is
    unused (every platform's factory takes it); ``env`` stands in for
    ``os.environ`` in tests.
    """
    config = settings.adapters.discord  # checked by load_settings when enabled
    if not config.enabled:
        return None
    env = os.environ if env is None else env
    token = (env.get(config.token_env) or "").strip()
    return DiscordAdapter(
        config,
        token=token,
        shutdown_grace=settings.limits.shutdown_grace,
        # a reply's files: URLs (public hosts), data: URLs, files under rules' media/
        load=MediaLoader(settings.rules, private_hosts=settings.limits.media_private_hosts),
    )
