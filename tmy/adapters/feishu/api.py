"""Feishu's server API as tmy uses it: the tenant access token and the calls it authorises.

Every answer is ``{"code": 0, "msg": …, "data": …}``; a non-zero ``code`` is
the platform's error, kept with its HTTP status in an :class:`Answer` (the
callers decide: retry, give up, fail the adapter). Rate limits are HTTP 429 or
``code`` 99991400 (the gateway's), 11232 and 230020 (the message service's,
per app and per chat); the wait is the ``x-ogw-ratelimit-reset`` header in
seconds, else :data:`DEFAULT_RETRY_AFTER`.

**Token.** ``POST /open-apis/auth/v3/tenant_access_token/internal`` with
``app_id``/``app_secret`` gives a token valid ``expire`` seconds (two hours);
it is fetched again :attr:`Rest.refresh_margin` seconds before that (Feishu
hands out a new one in the last 30 minutes), one fetch at a time, and once
more when a call says the token is invalid (99991661/99991663/99991668). A
non-zero ``code`` there means Feishu refused the app's credentials:
:attr:`Rest.refused` says why, and the adapter shows ``failed`` (an answer without
Feishu's ``code`` — a gateway's error page — is a passing failure, tried again).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import aiohttp

from tmy import redact
from tmy.errors import AdapterError
from tmy.logs import get_logger

log = get_logger("tmy.adapter.feishu")

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
RATE_LIMIT_CODES = frozenset({99991400, 11232, 230020})
TOKEN_INVALID_CODES = frozenset({99991661, 99991663, 99991668})
DEFAULT_RETRY_AFTER = 1.0  # seconds, when a rate limit names no reset time
REQUEST_TIMEOUT = 30.0
MAX_OWN_MESSAGES = 4096  # ids of messages this bot sent, for reply-to-bot detection


@dataclass(slots=True)
class Answer:
    """One API answer: HTTP status, Feishu's ``code``/``msg``, the whole body, the wait."""

    status: int
    code: int
    msg: str
    body: dict[str, Any] = field(default_factory=dict)
    retry_after: float | None = None  # set when the call was refused by a rate limit

    @property
    def ok(self) -> bool:
        return self.status < 400 and self.code == 0

    @property
    def data(self) -> dict[str, Any]:
        data = self.body.get("data")
        return data if isinstance(data, dict) else {}

    @property
    def refusal(self) -> bool:
        """Feishu itself said no: a ``code`` of its own, not 0, not a rate limit, below
        HTTP 500. A body without one (a gateway's page) says nothing of the credentials."""
        code = self.body.get("code")
        return (
            isinstance(code, int) and code != 0 and self.status < 500 and self.retry_after is None
        )

    def describe(self) -> str:
        return f"HTTP {self.status}, code {self.code}: {self.msg or 'no message'}"


class Rest:
    """The HTTP side of one app: its token, its calls, the messages it sent."""

    refresh_margin = 300.0  # seconds before ``expire`` a token is replaced (tests shrink it)

    def __init__(self, api_base: str, app_id: str, app_secret: str) -> None:
        self.api_base = api_base.rstrip("/")
        self.app_id = app_id
        self.app_secret = app_secret
        redact.add(app_secret)
        self.refused: str | None = None  # why Feishu refused the credentials
        # told once when they are refused, at start or later (a secret reset in the console)
        self.on_refused: Callable[[str], None] | None = None
        self.session: aiohttp.ClientSession | None = None
        self._token = ""
        self._hidden = redact.RenewedSecret()  # the token now and the one before
        self._token_until = 0.0  # monotonic time the token is replaced at
        self._token_lock = asyncio.Lock()
        self._own: OrderedDict[str, None] = OrderedDict()

    async def open(self) -> None:
        if self.session is None:
            timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
            self.session = aiohttp.ClientSession(timeout=timeout)

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None

    # -- the token ------------------------------------------------------------------------------

    async def token(self) -> str:
        """A tenant access token valid for a while yet; AdapterError when none can be had."""
        if self._token and time.monotonic() < self._token_until:
            return self._token
        async with self._token_lock:
            if self._token and time.monotonic() < self._token_until:
                return self._token
            body = {"app_id": self.app_id, "app_secret": self.app_secret}
            answer = await self.request("POST", TOKEN_PATH, json_body=body, auth=False)
            if answer.refusal:
                self.refuse(f"Feishu refused app_id/app_secret ({answer.describe()})")
            token = answer.body.get("tenant_access_token")
            if not answer.ok or not isinstance(token, str) or not token:  # busy, a gateway
                raise AdapterError(f"feishu: tenant_access_token failed ({answer.describe()})")
            expire = answer.body.get("expire")
            expire = float(expire) if isinstance(expire, int | float) and expire > 0 else 7200.0
            self._hidden.renew(token)
            self._token = token
            self._token_until = time.monotonic() + max(expire - self.refresh_margin, expire / 2)
            log.info("feishu.token_refreshed", expire=expire)
            return token

    def refuse(self, why: str) -> NoReturn:
        """Feishu refused the app's credentials: remember why, tell the adapter, raise."""
        first = self.refused is None
        self.refused = why
        if first and self.on_refused is not None:
            self.on_refused(why)
        raise AdapterError(f"feishu: {why}")

    # -- calls ----------------------------------------------------------------------------------

    async def call(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: dict[str, str] | None = None,
        form: aiohttp.FormData | None = None,
    ) -> Answer:
        """``method path`` with the tenant token; a token Feishu calls invalid is replaced
        and the call made once more. Network errors propagate (aiohttp.ClientError, Timeout)."""
        answer = await self.request(method, path, json_body=json_body, params=params, form=form)
        if answer.code in TOKEN_INVALID_CODES:
            self._token_until = 0.0
            if form is None:  # a consumed multipart body cannot be sent again
                answer = await self.request(method, path, json_body=json_body, params=params)
        return answer

    async def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: dict[str, str] | None = None,
        form: aiohttp.FormData | None = None,
        auth: bool = True,
    ) -> Answer:
        await self.open()
        assert self.session is not None
        headers = {"Authorization": f"Bearer {await self.token()}"} if auth else {}
        data: Any = form
        if json_body is not None:
            headers["Content-Type"] = "application/json; charset=utf-8"
            data = json.dumps(json_body, ensure_ascii=False).encode()
        url = self.api_base + path
        async with self.session.request(
            method, url, data=data, params=params, headers=headers
        ) as resp:
            raw = await resp.read()
            return _answer(resp.status, resp.headers, raw)

    def remember(self, message_id: str) -> None:
        """A message this bot sent (a reply to it addresses the bot)."""
        if message_id:
            self._own[message_id] = None
            if len(self._own) > MAX_OWN_MESSAGES:
                self._own.popitem(last=False)

    def is_own(self, message_id: str) -> bool:
        return message_id in self._own


def _answer(status: int, headers: Any, raw: bytes) -> Answer:
    try:
        body = json.loads(raw) if raw else {}
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    code = body.get("code")
    code = code if isinstance(code, int) else (0 if status < 400 else -1)
    msg = str(body.get("msg") or "")
    answer = Answer(status, code, msg, body)
    if status == 429 or code in RATE_LIMIT_CODES:
        try:
            reset = float(headers.get("x-ogw-ratelimit-reset", ""))
        except ValueError:
            reset = math.nan
        # "nan" parses, compares false with everything and was taken as no wait at all: the
        # send was retried at once; a huge reset ("inf" too) fails the send (longest_wait)
        answer.retry_after = max(reset, 0.0) if not math.isnan(reset) else DEFAULT_RETRY_AFTER
    return answer
