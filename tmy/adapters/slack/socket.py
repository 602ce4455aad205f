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
            request = SocketModeRequest.from_dict(data)
            if request is None:
                continue
            await ws.send_str(json.dumps(SocketModeResponse(request.envelope_id).to_dict()))
            await on_envelope(request)
        code = ws.close_code
        return f"the Socket Mode connection closed (code {code})" if code else "connection lost"
