"""The daemon's one web server (``/v1/messages``, ``/healthz``, ``/metrics``, mounted routes).

``adapter`` is the listener (:class:`HttpAdapter`), ``gate`` the middleware
every request passes, ``api`` what keyed JSON routes share (the API-key check,
readable JSON, tmy's error body, which routes are JSON); the daemon builds the
listener with :func:`from_settings`.
"""

from __future__ import annotations

from tmy.adapters.http.adapter import MAX_BODY, HttpAdapter
from tmy.adapters.http.api import (
    api_key_problem,
    bearer,
    dumps,
    is_json_route,
    json_error,
    parse_listen,
    picture,
)
from tmy.adapters.origin import allowed_hosts_of
from tmy.config import Settings
from tmy.store.base import Store

__all__ = [
    "MAX_BODY",
    "HttpAdapter",
    "api_key_problem",
    "bearer",
    "dumps",
    "from_settings",
    "is_json_route",
    "json_error",
    "parse_listen",
    "picture",
]


def from_settings(settings: Settings, store: Store | None = None) -> HttpAdapter | None:
    """The listener ``adapters.http`` describes, or None when it is off (``store`` is unused)."""
    config = settings.adapters.http
    if not config.enabled:
        return None
    return HttpAdapter(
        config.listen,
        settings.limits.max_message_chars,
        settings.limits.shutdown_grace,
        settings.limits.max_id_chars,
        api_keys=config.api_keys,
        header_timeout=config.header_timeout,
        body_timeout=config.body_timeout,
        keepalive_timeout=config.keepalive_timeout,
        max_connections=config.max_connections,
        max_requests_in_flight=config.max_requests_in_flight,
        allowed_hosts=allowed_hosts_of(settings),
    )
