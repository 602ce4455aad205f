"""An OpenAI-compatible facade: any OpenAI client or chat UI talks to the bot's rules.

``facade`` is the adapter (its routes, who is speaking, the request read into
a Message), ``payload`` OpenAI's request and answer shapes, ``stream`` the
server-sent events of a streamed answer; the daemon builds it with
:func:`from_settings`.
"""

from __future__ import annotations

from tmy.adapters.openai.facade import (
    DEFAULT_UNMATCHED,
    DEFAULT_USER_HEADER,
    MODEL_ID,
    OpenAIFacade,
)
from tmy.adapters.openai.payload import OpenAIError, key_identity, usage
from tmy.config import Settings
from tmy.store.base import Store

__all__ = [
    "DEFAULT_UNMATCHED",
    "DEFAULT_USER_HEADER",
    "MODEL_ID",
    "OpenAIError",
    "OpenAIFacade",
    "from_settings",
    "key_identity",
    "usage",
]


def from_settings(settings: Settings, store: Store | None = None) -> OpenAIFacade | None:
    """The facade rides on the HTTP listener: enabled whenever that is (``store`` is unused)."""
    if not settings.http_enabled:
        return None
    section = settings.adapters.get("openai") or {}
    return OpenAIFacade(
        api_keys=settings.http_api_keys,
        max_message_chars=settings.max_message_chars,
        max_id_chars=settings.max_id_chars,
        user_header=section.get("user_header", DEFAULT_USER_HEADER),
        user_header_trusted=bool(section.get("user_header_trusted", False)),
        unmatched_reply=section.get("unmatched_reply", DEFAULT_UNMATCHED),
    )
