"""Satori's HTTP API: ``POST {api_base}/v1/{resource}.{method}`` with a JSON body.

Every call names the account it acts for: ``Satori-Platform`` and
``Satori-User-ID`` (the protocol's headers), and ``X-Platform`` / ``X-Self-ID``
beside them, which servers written before Satori 1.1 (Koishi's server plugin
of 2023, Chronocat 0.0.x) read instead; the token goes as
``Authorization: Bearer``. Answers: 200 with JSON (or an empty body), 401/403 a
missing or wrong token (or an account the server does not serve), 404 an API the
platform lacks, 429 slow down (``Retry-After`` when the server says), 5xx the
server's or the platform's trouble.

:meth:`SatoriHttp.post` gives the :class:`Answer` whatever the status (the send
step decides what to retry); :meth:`SatoriHttp.call` raises
:class:`~tmy.errors.AdapterError` naming the method and the status.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aiohttp

from tmy.backoff import retry_after as parse_retry_after
from tmy.errors import AdapterError
from tmy.logs import preview

TIMEOUT = 30.0  # seconds one API call may take (a platform upload behind message.create)


@dataclass(frozen=True, slots=True)
class Answer:
    """One HTTP answer: its status, its JSON (None when empty or not JSON), its text."""

    status: int
    data: Any
    text: str
    retry_after: float | None = None  # seconds, from a Retry-After header

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def describe(self) -> str:
        body = preview(self.text.strip(), 200) if self.text.strip() else "no body"
        return f"HTTP {self.status}: {body}"


class SatoriHttp:
    """The API client of one Satori server (one aiohttp session, opened by the adapter)."""

    def __init__(self, api_base: str, token: str, session: aiohttp.ClientSession) -> None:
        self.api_base = api_base.rstrip("/")
        self.token = token
        self.session = session

    def headers(self, platform: str = "", user_id: str = "") -> dict[str, str]:
        out = {"Content-Type": "application/json"}
        if self.token:
            out["Authorization"] = f"Bearer {self.token}"
        if platform:
            out["Satori-Platform"] = out["X-Platform"] = platform
        if user_id:
            out["Satori-User-ID"] = out["X-Self-ID"] = user_id
        return out

    async def post(
        self, method: str, body: dict[str, Any], *, platform: str, user_id: str
    ) -> Answer:
        """POST ``method`` for the account ``(platform, user_id)``; network errors raise
        (aiohttp.ClientError, TimeoutError), every HTTP status is an :class:`Answer`."""
        url = f"{self.api_base}/v1/{method}"
        async with self.session.post(
            url,
            data=json.dumps(body, ensure_ascii=False),
            headers=self.headers(platform, user_id),
            timeout=aiohttp.ClientTimeout(total=TIMEOUT),
        ) as response:
            text = await response.text(errors="replace")
            retry_after = parse_retry_after(response.headers.get("Retry-After"))
            return Answer(response.status, _json(text), text, retry_after)

    async def call(self, method: str, body: dict[str, Any], *, platform: str, user_id: str) -> Any:
        """POST ``method`` and return its JSON; AdapterError on any failure."""
        try:
            answer = await self.post(method, body, platform=platform, user_id=user_id)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise AdapterError(f"satori: {method} failed: {type(exc).__name__}: {exc}") from exc
        if not answer.ok:
            raise AdapterError(f"satori: {method} failed ({answer.describe()})")
        return answer.data


def _json(text: str) -> Any:
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None
