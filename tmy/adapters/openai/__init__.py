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
    if not settings.adapters.http.enabled:
        return None
    config = settings.adapters.openai
    return OpenAIFacade(
        api_keys=settings.adapters.http.api_keys,
        max_message_chars=settings.limits.max_message_chars,
        max_id_chars=settings.limits.max_id_chars,
        user_header=config.user_header,
        user_header_trusted=config.user_header_trusted,
        unmatched_reply=config.unmatched_reply,
    )
