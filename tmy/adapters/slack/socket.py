"""One Socket Mode connection: open it, acknowledge every envelope at once, hand it on.

``apps.connections.open`` (with the app-level token, at ``api_base``) gives a
fresh ``wss://`` URL; Slack greets the connection with ``hello``, then sends
envelopes (``events_api``, ``interactive``, ``slash_commands``), each of which
must be acknowledged with its ``envelope_id`` within three seconds or Slack
delivers it again. Here every envelope is acknowledged as soon as it is read,
before tmy looks at it (the run happens later, on the adapter's queues), and
its payload goes to ``on_envelope``. A ``disconnect`` message (Slack recycles
connections every few hours: ``refresh_requested``, ``warning``,
``link_disabled``) ends the connection, as does a close or a missed
heartbeat (aiohttp's ping every ``heartbeat`` seconds); the adapter then
reconnects with backoff (:mod:`~tmy.adapters.slack.adapter`).

The SDK's envelope types (:class:`~slack_sdk.socket_mode.request.SocketModeRequest`,
:class:`~slack_sdk.socket_mode.response.SocketModeResponse`) read and answer
the frames; the URL (it holds a one-time ticket) is never logged.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from tmy.logs import get_logger, preview

log = get_logger("tmy.adapter.slack")


async def open_url(client: AsyncWebClient, app_token: str) -> str:
    """A fresh WebSocket URL (``apps.connections.open``; raises SlackApiError when refused)."""
    response = await client.apps_connections_open(app_token=app_token)
    return str(response["url"])


async def serve_connection(
    session: aiohttp.ClientSession,
    url: str,
    *,
    heartbeat: float,
    on_hello: Callable[[], None],
    on_envelope: Callable[[SocketModeRequest], Awaitable[None]],
) -> str:
    """Read one connection until it ends; returns why it ended (for health and the log)."""
    async with session.ws_connect(url, heartbeat=heartbeat, autoping=True) as ws:
        async for frame in ws:
            if frame.type != aiohttp.WSMsgType.TEXT:
                continue  # aiohttp ends the loop on close and error
            try:
                data = json.loads(frame.data)
            except ValueError:
                log.warning("slack.bad_frame", frame=preview(str(frame.data)))
                continue
            if not isinstance(data, dict):
                continue
            kind = data.get("type")
            if kind == "hello":
                on_hello()
                continue
            if kind == "disconnect":
                return f"Slack asked to reconnect ({data.get('reason') or 'disconnect'})"
            request = _request_of(data)
            envelope_id = data.get("envelope_id")
            if isinstance(envelope_id, str) and envelope_id:
                await ws.send_str(json.dumps(SocketModeResponse(envelope_id).to_dict()))
            if request is not None:
                await on_envelope(request)
        code = ws.close_code
        return f"the Socket Mode connection closed (code {code})" if code else "connection lost"


def _request_of(data: dict[str, Any]) -> SocketModeRequest | None:
    """The envelope in ``data``, or None for a frame that is none (logged): the SDK raises
    on a payload that is neither an object nor a string, and one odd frame must not end
    the connection. Its ``envelope_id`` is acknowledged all the same, so Slack does not
    send it again."""
    try:
        request = SocketModeRequest.from_dict(data)
    except (ValueError, TypeError) as exc:
        log.warning("slack.bad_envelope", kind=data.get("type"), error=preview(str(exc)))
        return None
    if request is not None and not isinstance(request.type, str):
        return None
    return request
