"""QQ's OpenAPI over aiohttp: the app access token and authorised calls.

**Access token.** ``POST token_url {"appId", "clientSecret"}`` answers
``{"access_token", "expires_in"}`` (seconds, as a string; 7200 today). QQ hands
out a new token only in the last 60 s of the old one's life, the old one still
valid meanwhile, so :class:`AccessToken` asks again :attr:`AccessToken.margin`
seconds before expiry, and at once after the API answered 401 (a token revoked
early). One request at a time: concurrent callers share it. An answer without a
token (QQ's ``{"code", "message"}`` for a wrong app id or secret) or a 4xx is a
**refusal**: :class:`~tmy.errors.AdapterError`, which the adapter shows as
``failed`` and does not retry in a loop (:attr:`AccessToken.on_refused` tells it of
one met while running). A 5xx, a 408 or 429 or a network error propagates as
aiohttp's own error: the adapter retries those with backoff.

**Calls.** Every call carries ``Authorization: QQBot <token>`` and
``X-Union-Appid``; a 401 refreshes the token and is tried once more. The
answer is a :class:`Answer` (status and JSON body) whatever the status: the
caller decides what a refusal means for it (a reply waits out a rate limit,
a gateway lookup fails the adapter).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from tmy import redact
from tmy.errors import AdapterError
from tmy.logs import get_logger

log = get_logger("tmy.adapter.qq")

RATE_LIMIT_CODES = frozenset({20028, 22009})  # channel write limit; "msg limit exceed"
# sent, but held for QQ's manual review (a push / a reply): not a failure of the send
ACCEPTED_CODES = frozenset({304023, 304024})
# token endpoint answers that say "not now", not "wrong secret": rate limited, timed out
TRANSIENT_STATUSES = frozenset({408, 429})


@dataclass(frozen=True, slots=True)
class Answer:
    """One OpenAPI answer: the HTTP status and the JSON body ({} when it had none)."""

    status: int
    data: Any

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300 and (not self.code or self.code in ACCEPTED_CODES)

    @property
    def code(self) -> int:
        """QQ's business error code (0: none); QQ may send one with a 200."""
        if isinstance(self.data, dict):
            code = self.data.get("code") or self.data.get("err_code") or 0
            return int(code) if str(code).lstrip("-").isdigit() else 0
        return 0

    @property
    def message(self) -> str:
        if isinstance(self.data, dict):
            return str(self.data.get("message") or self.data.get("msg") or "")
        return ""

    @property
    def rate_limited(self) -> bool:
        return self.status == 429 or self.code in RATE_LIMIT_CODES

    def describe(self) -> str:
        return f"HTTP {self.status}, code {self.code}: {self.message or 'no message'}"


class AccessToken:
    """The app access token, fetched when missing or about to expire; see the module docstring."""

    margin = 30.0  # seconds before expiry a new one is asked for (QQ renews in the last 60)

    def __init__(self, session: aiohttp.ClientSession, url: str, app_id: str, secret: str) -> None:
        self._session = session
        self._url = url
        self._app_id = app_id
        self._secret = secret
        self._token = ""
        self._hidden = redact.RenewedSecret()  # the token now and the one before
        self._expires = 0.0  # monotonic
        self._lock = asyncio.Lock()
        self.fetched = 0  # tokens obtained (health, tests)
        # told of every refusal: one while running (the secret reset at q.qq.com) must
        # show in the adapter's health, not only fail the reply that met it
        self.on_refused: Callable[[str], None] | None = None

    @property
    def current(self) -> str:
        """The token last fetched ("" none yet)."""
        return self._token

    def invalidate(self, token: str) -> None:
        """Forget ``token`` (the API refused it); the next :meth:`get` fetches another."""
        if token == self._token:
            self._expires = 0.0

    async def get(self) -> str:
        """A token valid for at least :attr:`margin` seconds more."""
        if self._token and time.monotonic() < self._expires - self.margin:
            return self._token
        async with self._lock:
            if self._token and time.monotonic() < self._expires - self.margin:
                return self._token
            await self._fetch()
            return self._token

    async def _fetch(self) -> None:
        body = {"appId": self._app_id, "clientSecret": self._secret}
        async with self._session.post(self._url, json=body) as resp:
            if resp.status >= 500 or resp.status in TRANSIENT_STATUSES:
                resp.raise_for_status()  # retried with backoff: not a verdict on the secret
            try:
                data = await resp.json(content_type=None)
            except ValueError:
                data = None
        token = data.get("access_token") if isinstance(data, dict) else None
        if resp.status >= 400 or not isinstance(token, str) or not token:
            answer = Answer(resp.status, data if isinstance(data, dict) else {})
            refusal = AdapterError(
                f"qq: the token endpoint refused app_id {self._app_id} and its secret "
                f"({answer.describe()}); check app_id and secret (AppID / AppSecret at "
                "q.qq.com, 开发设置)"
            )
            if self.on_refused is not None:
                self.on_refused(str(refusal))
            raise refusal
        self._hidden.renew(token)
        try:
            lifetime = float(data.get("expires_in") or 0)
        except (TypeError, ValueError):
            lifetime = 0.0
        self._token = token
        if lifetime <= self.margin:  # no usable lifetime: keep it a little, not per call
            lifetime = self.margin + 1.0
        self._expires = time.monotonic() + lifetime
        self.fetched += 1
        log.info("qq.token_fetched", expires_in=lifetime)


class QQApi:
    """Authorised calls to ``api_base``; see the module docstring."""

    def __init__(
        self, session: aiohttp.ClientSession, api_base: str, app_id: str, token: AccessToken
    ) -> None:
        self.session = session
        self.base = api_base.rstrip("/")
        self.app_id = app_id
        self.token = token

    async def call(self, method: str, path: str, body: Any = None) -> Answer:
        """``method path`` with ``body`` as JSON; a 401 refreshes the token and retries once."""
        for attempt in (1, 2):
            token = await self.token.get()
            headers = {"Authorization": f"QQBot {token}", "X-Union-Appid": self.app_id}
            async with self.session.request(
                method, self.base + path, json=body, headers=headers
            ) as resp:
                try:
                    data = await resp.json(content_type=None)
                except ValueError:
                    data = {}
                answer = Answer(resp.status, data if data is not None else {})
            if answer.status == 401 and attempt == 1:
                log.info("qq.token_refused", path=path, code=answer.code)
                self.token.invalidate(token)
                continue
            return answer
        raise AssertionError("unreachable")  # pragma: no cover
