"""mautrix's HTTP client with the homeserver's "retry after" kept, and its errors in words.

mautrix's :class:`~mautrix.api.HTTPAPI` turns an error answer into its typed
exceptions (``MUnknownToken``, ``MLimitExceeded`` …) but drops the rest of the
body, and with it ``retry_after_ms``, the wait a 429 ``M_LIMIT_EXCEEDED`` asks
for (the Matrix client-server spec, "Rate limiting"). :class:`MatrixHttp`
overrides the one method that reads an answer to keep it: the exception gets a
``retry_after`` attribute in seconds (from ``retry_after_ms``, else the
``Retry-After`` header), the same attribute Telegram's and Discord's errors have,
so :class:`tmy.adapters.streaming.GrowingMessage` and the send queue honour it.
"""

from __future__ import annotations

import math
from json import JSONDecodeError
from typing import Any

from aiohttp import ClientError, ClientResponse, ContentTypeError
from mautrix.api import HTTPAPI, Method
from mautrix.errors import (
    MatrixConnectionError,
    MatrixInvalidToken,
    MatrixRequestError,
    MatrixResponseError,
    make_request_error,
)
from yarl import URL

from tmy import redact
from tmy.backoff import retry_after as parse_retry_after

DEFAULT_RETRY_AFTER = 5.0  # seconds waited on a 429 that names no wait


class MatrixHttp(HTTPAPI):
    """HTTPAPI whose error answers keep ``retry_after`` (seconds) on the exception."""

    async def _send(
        self,
        method: Method,
        url: URL,
        content: Any,
        query_params: dict[str, str],
        headers: dict[str, str],
    ) -> tuple[Any, ClientResponse]:
        request = self.session.request(
            str(method), url, data=content, params=query_params, headers=headers
        )
        async with request as response:
            if 200 <= response.status < 300:
                return await response.json(), response
            text = await response.text()
            body: dict[str, Any] = {}
            try:
                parsed = await response.json(content_type=None)
                body = parsed if isinstance(parsed, dict) else {}
            except (JSONDecodeError, ContentTypeError, ValueError):
                pass
            error = make_request_error(
                http_status=response.status,
                text=text,
                errcode=body.get("errcode"),
                message=body.get("error"),
                unstable_errcode=body.get("org.matrix.msc3848.unstable.errcode"),
            )
            if response.status == 429 or body.get("errcode") == "M_LIMIT_EXCEEDED":
                error.retry_after = _retry_after(body, response)  # type: ignore[attr-defined]
            raise error


def _retry_after(body: dict[str, Any], response: ClientResponse) -> float:
    ms = body.get("retry_after_ms")
    if isinstance(ms, int | float) and not isinstance(ms, bool) and 0 <= ms < math.inf:
        return ms / 1000.0
    seconds = parse_retry_after(response.headers.get("Retry-After"))
    return seconds if seconds is not None and math.isfinite(seconds) else DEFAULT_RETRY_AFTER


def retry_after(exc: BaseException) -> float | None:
    """The seconds a 429 asked to wait, or None when ``exc`` is not a rate limit."""
    after = getattr(exc, "retry_after", None)
    return float(after) if isinstance(after, int | float) else None


def is_bad_token(exc: BaseException) -> bool:
    """The homeserver refused the access token (``M_UNKNOWN_TOKEN``, ``M_MISSING_TOKEN``)."""
    return isinstance(exc, MatrixInvalidToken)


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: the network, a timeout, a 5xx, a 429 or an answer that was not JSON."""
    if isinstance(exc, MatrixConnectionError | ClientError | TimeoutError | MatrixResponseError):
        return True
    if isinstance(exc, MatrixRequestError):
        return getattr(exc, "http_status", 0) >= 500 or retry_after(exc) is not None
    return False


def describe(exc: BaseException) -> str:
    """The homeserver's errcode, HTTP status and message (credentials masked)."""
    if isinstance(exc, MatrixRequestError):
        status = getattr(exc, "http_status", 0)
        code = getattr(exc, "errcode", None) or "no errcode"
        message = getattr(exc, "message", None) or str(exc)
        return redact.redact(f"{code} (HTTP {status}): {message}")
    if isinstance(exc, TimeoutError):
        return "timed out"
    return redact.redact(f"{type(exc).__name__}: {exc}")
