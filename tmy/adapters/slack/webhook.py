"""``POST /slack/events``: the Events API and interactivity (button presses) over HTTP.

Slack signs every request: ``X-Slack-Signature`` is ``v0=`` and the hex
HMAC-SHA256, keyed with the app's signing secret, of ``v0:<timestamp>:<body>``,
with the timestamp in ``X-Slack-Request-Timestamp``. The SDK's
:class:`~slack_sdk.signature.SignatureVerifier` checks both, over the raw body,
and refuses a timestamp more than five minutes away from now (a replayed
request). A request without the two headers is answered 401, a wrong or stale
signature 403; nothing of it runs.

A signed request is one of:

* ``url_verification`` (when the Request URL is saved in the app's settings):
  answered with its ``challenge``;
* ``event_callback``: answered 200 at once (Slack wants an answer within three
  seconds, else it delivers again with ``X-Slack-Retry-Num``); the event runs
  later on the adapter's queues. A redelivery, and the same message sent as
  both ``message`` and ``app_mention``, run once (the adapter's delivery check);
* a form-encoded ``payload=`` (the app's *Interactivity* Request URL, set to this
  same path): a ``block_actions`` button press, likewise.

While the adapter is not ready (no or a bad bot token, stopping) a signed event
is answered 503, but the ``url_verification`` is answered all the same: Slack
checks the Request URL when it is saved, often before the app is installed and
has a bot token. With too many messages waiting, 503 too (Slack delivers again
later).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

from aiohttp import web
from slack_sdk.signature import SignatureVerifier

from tmy.logs import get_logger, preview

log = get_logger("tmy.adapter.slack")

PATH = "/slack/events"
MAX_AGE = 300  # seconds a request's timestamp may be from now (Slack's own rule)

Take = Callable[[dict[str, Any]], Awaitable[None]]


class EventsRoute:
    """The request handler for :data:`PATH` (see module doc)."""

    def __init__(
        self,
        signing_secret: str,
        *,
        take_event: Take,
        take_interactive: Take,
        not_ready: Callable[[], str | None],
        busy: Callable[[], bool],
    ) -> None:
        self._verifier = SignatureVerifier(signing_secret) if signing_secret else None
        self._take_event = take_event
        self._take_interactive = take_interactive
        self._not_ready = not_ready  # why requests cannot be served now (None: they can)
        self._busy = busy

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        if self._verifier is None:
            return web.json_response({"error": "no signing secret"}, status=503)
        body = await request.read()
        refused = self._refusal(request, body)
        if refused is not None:
            return refused
        retry = request.headers.get("X-Slack-Retry-Num")
        try:
            if request.content_type == "application/x-www-form-urlencoded":
                form = parse_qs(body.decode(), keep_blank_values=True)
                payload = json.loads((form.get("payload") or ["{}"])[0])
                kind = "interactive"
            else:
                payload = json.loads(body)
                kind = payload.get("type") if isinstance(payload, dict) else None
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: nested
            log.warning("slack.bad_request", error=preview(str(exc)))
            return web.json_response({"error": "not a Slack event"}, status=400)
        if not isinstance(payload, dict):
            return web.json_response({"error": "not a Slack event"}, status=400)
        if kind == "url_verification":  # needs no bot: answered whatever the adapter's state
            return web.Response(text=str(payload.get("challenge") or ""), content_type="text/plain")
        why = self._not_ready()
        if why is not None:
            return web.json_response({"error": why}, status=503)
        if self._busy():
            log.warning("slack.overloaded", retry=retry)
            return web.json_response({"error": "busy, deliver again later"}, status=503)
        if kind == "interactive":
            await self._take_interactive(payload)
        elif kind == "event_callback":
            await self._take_event(payload)
        return web.Response(status=200)

    def _refusal(self, request: web.Request, body: bytes) -> web.Response | None:
        """401/403 for a request Slack did not sign (None: it did)."""
        assert self._verifier is not None
        stamp = request.headers.get("X-Slack-Request-Timestamp")
        signature = request.headers.get("X-Slack-Signature")
        if not stamp or not signature:
            log.warning("slack.webhook_refused", status=401, peer=request.remote,
                        why="no X-Slack-Signature/X-Slack-Request-Timestamp")  # fmt: skip
            return web.json_response({"error": "missing Slack signature"}, status=401)
        try:
            age = abs(time.time() - int(stamp))
        except ValueError:
            age = float("inf")
        try:
            valid = age <= MAX_AGE and self._verifier.is_valid(body, stamp, signature)
        except (ValueError, TypeError, UnicodeDecodeError):  # hmac.compare_digest raises
            valid = False  # TypeError on a non-ASCII signature header
        if valid:
            return None
        why = "stale timestamp" if age > MAX_AGE else "wrong signature"
        log.warning("slack.webhook_refused", status=403, peer=request.remote, why=why)
        return web.json_response({"error": why}, status=403)
