"""Forward mode: tmy connects to the implementation's WebSocket server, and reconnects.

The token goes as ``Authorization: Bearer``; the account is learnt from the
lifecycle ``connect`` event (or any event's ``self_id``). A dropped or silent
socket is reconnected with capped exponential backoff and jitter; a session
that lasted ``healthy_after`` seconds without a failure frame starts the
backoff over.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from tmy.adapters.base import Backoff
from tmy.adapters.onebot.connection import CLOSE_TIMEOUT, MAX_FRAME_BYTES
from tmy.logs import get_logger

if TYPE_CHECKING:
    from tmy.adapters.onebot.adapter import OneBotAdapter

log = get_logger("tmy.adapter.onebot")


async def forward_loop(adapter: OneBotAdapter) -> None:
    """Connect, serve, and reconnect with capped backoff until ``adapter`` stops."""
    import aiohttp  # deferred: aiohttp is ~120 ms of every CLI start

    assert adapter._session is not None
    backoff = adapter._backoff = Backoff(
        adapter.backoff_base, adapter.backoff_cap, adapter.healthy_after
    )
    token = adapter.config.access_token
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = adapter.config.url
    while not adapter._stopping:
        try:
            ws = await adapter._session.ws_connect(
                url,
                headers=headers,
                autoping=False,
                max_msg_size=MAX_FRAME_BYTES,
                timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=CLOSE_TIMEOUT),
            )
        except aiohttp.WSServerHandshakeError as exc:
            why = f"{url} refused the connection with HTTP {exc.status}"
            if exc.status in (401, 403):
                why += " (check adapters.onebot.access_token against the implementation's)"
            log.error("onebot.connect_failed", url=url, status=exc.status, error=why)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            why = f"cannot connect to {url}: {exc or type(exc).__name__}"
            log.warning("onebot.connect_failed", url=url, error=why)
        except Exception as exc:  # never let the reconnect loop die
            why = f"cannot connect to {url}: {exc!r}"
            log.exception("onebot.connect_failed", url=url, error=why)
        else:
            conn = adapter._connection(ws, "", url)
            adapter._accounts.conns.add(conn)
            adapter._health.set("connected")
            adapter._accounts.count_connect("")
            log.info("onebot.connected", url=url)
            why = "closed"
            backoff.connected()
            try:
                why = await conn.run(adapter._on_event)
            finally:
                await conn.close(why)
                adapter._accounts.drop(conn, why)
            backoff.ended(conn.failure is None)  # a healthy session: short pauses again
            if conn.failure is not None:
                why = f"{why}; the implementation said: {conn.failure}"
        if adapter._stopping:
            break
        adapter._health.set("reconnecting", why)
        delay = backoff.next()
        log.warning(
            "onebot.reconnecting", url=url, reason=why, attempt=backoff.attempt,
            retry_in=round(delay, 2),
        )  # fmt: skip
        await asyncio.sleep(delay)
