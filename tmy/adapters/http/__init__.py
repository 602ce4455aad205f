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
]


def from_settings(settings: Settings, store: Store | None = None) -> HttpAdapter | None:
    """The listener ``adapters.http`` describes, or None when it is off (``store`` is unused)."""
    if not settings.http_enabled:
        return None
    return HttpAdapter(
        settings.http_listen,
        settings.max_message_chars,
        settings.shutdown_grace,
        settings.max_id_chars,
        api_keys=settings.http_api_keys,
        header_timeout=settings.http_header_timeout,
        body_timeout=settings.http_body_timeout,
        keepalive_timeout=settings.http_keepalive_timeout,
        max_connections=settings.http_max_connections,
        max_requests_in_flight=settings.http_max_requests_in_flight,
        allowed_hosts=allowed_hosts_of(settings),
    )
