"""Sending to a Satori server: a queued reply (or ``send``) and its ``message.create`` steps.

Each piece of a reply is one ``message.create {channel_id, content}`` through the
account that received the message. A 429 waits the server's ``Retry-After`` (or
a backoff when it gives none) and tries again — only that chat waits: replies
queue per chat (:class:`~tmy.adapters.fairness.ChatQueues`, paced
``send_interval`` apart), and a chat waiting holds no send slot. Network errors and
5xx are retried with backoff; at most ``max_retries`` (3) retries and no wait
longer than ``longest_wait`` (120 s). Anything else (401/403 a refused token or an
account the server does not serve, 404 an API the platform lacks, 400) fails the
send with the status and the server's words.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp

from tmy.adapters.fairness import PiecewiseSend
from tmy.adapters.satori.api import Answer, SatoriHttp
from tmy.errors import AdapterError
from tmy.logs import get_logger

log = get_logger("tmy.adapter.satori")


class QueuedReply(PiecewiseSend):
    """One reply (or ``send``) waiting in its chat's queue, with its retry state."""

    __slots__ = ("channel", "contents", "platform_name", "self_id", "sent")
    platform = "satori"
    place = "channel"

    def __init__(
        self,
        platform: str,
        self_id: str,
        channel: str,
        contents: list[str],
        done: asyncio.Future[None] | None,
        sent: Callable[[str, str, list[str]], None] | None = None,
    ) -> None:
        self.platform_name = platform  # the login's platform (qq, discord …)
        self.self_id = self_id
        self.channel = channel
        self.contents = contents
        self.sent = sent  # told the ids of what went out (reply-to-bot detection)
        super().__init__(done)


async def send_piece(http: SatoriHttp | None, out: QueuedReply) -> float | None:
    """Send ``out``'s next piece (the adapter's ChatQueues work): the pause before the
    next call (another piece, a retry), or None when done."""
    if http is None:
        out.finish(AdapterError("satori: the adapter is stopped"))
        return None
    body = {"channel_id": out.channel, "content": out.contents[out.index]}
    try:
        answer = await http.post("message.create", body, platform=out.platform_name,
                                 user_id=out.self_id)  # fmt: skip
    except asyncio.CancelledError:
        out.finish(AdapterError(f"satori: stopped before the message to {out.channel} went out"))
        raise
    except (aiohttp.ClientError, TimeoutError) as exc:
        return _retry(out, f"{type(exc).__name__}: {exc}", None)
    if answer.status == 429 or answer.status >= 500:
        return _retry(out, answer.describe(), answer)
    if not answer.ok:
        return _give_up(out, answer.describe())
    if out.sent is not None:
        out.sent(out.platform_name, out.self_id, _ids(answer))
    return out.piece_sent(len(out.contents))


def _retry(out: QueuedReply, why: str, answer: Answer | None) -> float | None:
    wait = answer.retry_after if answer is not None else None
    if wait is None:
        wait = out.backoff.next()
    if not out.may_retry(wait):
        return _give_up(out, why)
    out.retries += 1
    limited = answer is not None and answer.status == 429
    event = "satori.rate_limited" if limited else "satori.send_retry"
    log.warning(event, channel=out.channel, error=why, retry_in=round(wait, 2))
    return wait


def _give_up(out: QueuedReply, why: str) -> None:
    log.warning("satori.send_failed", platform=out.platform_name, channel=out.channel,
                error=why, retries=out.retries)  # fmt: skip
    out.finish(AdapterError(f"satori: message.create to {out.channel} on "
                            f"satori:{out.platform_name} failed ({why})"))  # fmt: skip
    return None


def _ids(answer: Answer) -> list[str]:
    """The ids of the messages ``message.create`` made (it answers a list of Message)."""
    data = answer.data
    items = data if isinstance(data, list) else [data]
    return [str(m["id"]) for m in items if isinstance(m, dict) and m.get("id")]
