"""Sending to Slack: a queued reply (or ``send``) and its calls, with Slack's rate limits.

Each piece of a reply (:mod:`~tmy.adapters.slack.compose`) is one call:
``chat.postMessage`` into the reply's channel and thread, or ``files.uploadV2``
(the SDK's three-step upload) there. Replies queue per channel
(:class:`~tmy.adapters.fairness.ChatQueues`) and a channel's calls are paced
about one a second, Slack's own limit for posting into one channel; a 429
answer waits Slack's ``Retry-After`` (only that channel waits, holding no send
slot) and tries again, at most ``max_retries`` (3) times and never for
longer than ``longest_wait`` (120 s) per wait. Network errors and 5xx are
retried with backoff; a message refused for an image block Slack could not
fetch goes again with the picture as a link; any other refusal is logged with
Slack's ``error`` (``channel_not_found``, ``not_in_channel`` …) and raised as
:class:`~tmy.errors.AdapterError` to whoever waits for the send.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.web.async_client import AsyncWebClient

from tmy.adapters.fairness import PiecewiseSend
from tmy.adapters.slack.compose import POST, Piece, without_images
from tmy.backoff import retry_after as parse_retry_after
from tmy.errors import AdapterError
from tmy.logs import get_logger

log = get_logger("tmy.adapter.slack")

# Slack's answers that no retry mends: the token is wrong, revoked or of the wrong kind
FATAL = frozenset({"invalid_auth", "not_authed", "token_revoked", "token_expired",
                   "account_inactive", "not_allowed_token_type", "invalid_token"})  # fmt: skip


class QueuedReply(PiecewiseSend):
    """One reply (or ``send``) waiting in its channel's queue, with its retry state."""

    __slots__ = ("channel", "pieces", "thread")
    platform = "slack"
    place = "channel"

    def __init__(
        self,
        channel: str,
        pieces: list[Piece],
        thread: str | None,
        done: asyncio.Future[None] | None,
    ) -> None:
        self.channel = channel
        self.pieces = pieces
        self.thread = thread  # the thread every piece goes into (None: the channel)
        super().__init__(done)


def error_of(exc: BaseException) -> str:
    """Slack's ``error`` code of a refused call, else the exception's own words."""
    if isinstance(exc, SlackApiError):
        response = exc.response
        data = getattr(response, "data", None)
        code = data.get("error") if isinstance(data, dict) else None
        return str(code or f"HTTP {getattr(response, 'status_code', '?')}")
    return f"{type(exc).__name__}: {exc}"


def _detail(exc: SlackApiError) -> str:
    """Slack's ``errors`` list of a refused call (which block, why), else its ``error``."""
    data = getattr(exc.response, "data", None)
    errors = data.get("errors") if isinstance(data, dict) else None
    return "; ".join(map(str, errors)) if isinstance(errors, list) and errors else error_of(exc)


def retry_after(exc: BaseException) -> float | None:
    """Seconds a 429 asks to wait (None: not a rate limit)."""
    if not isinstance(exc, SlackApiError) or getattr(exc.response, "status_code", 0) != 429:
        return None
    headers = getattr(exc.response, "headers", None) or {}
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    wait = parse_retry_after(value)
    return 1.0 if wait is None else wait  # none said (or unreadable): a second


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, aiohttp.ClientError | TimeoutError | OSError):
        return True
    return isinstance(exc, SlackApiError) and getattr(exc.response, "status_code", 0) >= 500


async def send_piece(
    client: AsyncWebClient | None,
    out: QueuedReply,
    posted: Callable[[str, str], None],
    refused: Callable[[str, str], None],
) -> float | None:
    """One call of ``out``'s next piece (the adapter's ChatQueues work).

    Returns the pause before calling again (the next piece, or a retry after a
    429), None when done. ``posted(channel, ts)`` learns each message the bot
    posted (replies in a thread it started address the bot); ``refused(method,
    code)`` learns that Slack refused the bot token itself (:data:`FATAL`: it was
    revoked while running), which no retry and no other message mends.
    """
    if client is None:
        out.finish(AdapterError("slack: the adapter is stopped"))
        return None
    piece = out.pieces[out.index]
    try:
        ts = await _call(client, out.channel, out.thread, piece)
    except asyncio.CancelledError:
        out.finish(AdapterError(f"slack: stopped before the message to {out.channel} went out"))
        raise
    except (SlackApiError, SlackRequestError, aiohttp.ClientError, TimeoutError, OSError) as exc:
        if isinstance(exc, SlackApiError) and error_of(exc) in FATAL:
            refused(piece.method, error_of(exc))
            return _give_up(out, piece, exc)
        refused_blocks = isinstance(exc, SlackApiError) and error_of(exc) == "invalid_blocks"
        if refused_blocks and without_images(piece):  # an image Slack could not fetch: a link
            log.warning("slack.image_refused", channel=out.channel, error=_detail(exc))
            return 0.0
        return _retry(out, piece, exc)
    if ts:
        posted(out.channel, ts)
    return out.piece_sent(len(out.pieces))


def _retry(out: QueuedReply, piece: Piece, exc: BaseException) -> float | None:
    wait = retry_after(exc)
    if wait is not None:
        if not out.may_retry(wait):
            return _give_up(out, piece, exc)
        log.warning("slack.rate_limited", channel=out.channel, method=piece.method,
                    retry_after=wait)  # fmt: skip
        out.retries += 1
        return wait
    if _transient(exc) and out.may_retry():
        delay = out.backoff.next()
        log.warning("slack.send_retry", channel=out.channel, method=piece.method,
                    error=error_of(exc), retry_in=round(delay, 2))  # fmt: skip
        out.retries += 1
        return delay
    return _give_up(out, piece, exc)


async def _call(client: AsyncWebClient, channel: str, thread: str | None, piece: Piece) -> str:
    """Make the call; the posted message's ``ts`` ("" for an upload)."""
    if piece.method == POST:
        extra: dict[str, Any] = {"blocks": piece.blocks} if piece.blocks else {}
        response = await client.chat_postMessage(
            channel=channel, text=piece.text, thread_ts=thread, **extra
        )
        return str(response.get("ts") or "")
    await client.files_upload_v2(
        channel=channel, thread_ts=thread, content=piece.data, filename=piece.filename,
        title=piece.filename,
    )  # fmt: skip
    return ""


def _give_up(out: QueuedReply, piece: Piece, exc: BaseException) -> None:
    why = error_of(exc)
    log.warning("slack.send_failed", channel=out.channel, method=piece.method, error=why,
                retries=out.retries)  # fmt: skip
    out.finish(AdapterError(f"slack: {piece.method} to {out.channel} failed: {why}"))
    return None
