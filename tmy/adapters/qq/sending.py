"""Sending to QQ: a reply (or ``send``) as message pieces, one POST per send step.

**Where.** ``group`` → ``/v2/groups/{group_openid}/messages``, ``c2c`` →
``/v2/users/{openid}/messages``, ``channel`` → ``/channels/{channel_id}/messages``,
``dm`` → ``/dms/{guild_id}/messages``; ``guild`` (an event in a guild, which has
no channel of its own) goes to the guild's first text channel
(``GET /guilds/{guild_id}/channels``).

**Passive and active.** A reply to a message carries its ``msg_id`` (a reply to a
guild event its ``event_id``): QQ's passive reply, allowed within its window (5
minutes in groups and channels, 60 in C2C). Group and C2C replies also carry
``msg_seq``, one more for each message sent for the same ``msg_id`` (each piece of
a split reply has its own). A ``send`` (cron, admin) has neither: an active
message, which QQ limits (and since April 2025 refuses for groups and C2C).

**Content.** Text is split by :mod:`~tmy.adapters.qq.text`. Images must be
http(s) URLs: in a guild channel or DM the first rides on the first piece's
``image`` field, the rest follow alone; in a group or C2C each is uploaded first
(``POST …/files {file_type: 1, url, srv_send_msg: false}``) and sent as
``msg_type 7`` with the ``file_info``. Mentions are ``<@id>`` in guilds (groups and
C2C have none); ``reply_to`` quotes with ``message_reference`` in guilds. Buttons
and files QQ cannot take from a bot become text (:func:`with_fallbacks`). A passive
group/C2C reply keeps its text first within QQ's 5 messages, then its images.

**Limits.** HTTP 429 and QQ's rate-limit codes (20028 channel write limit, 22009
"msg limit exceed") wait :attr:`QueuedReply.rate_limit_wait` seconds and try
again — only that chat waits (ChatQueues' retry-after); network errors and 5xx
retry with backoff; at most ``max_retries`` (3) times per piece. A retry
keeps the piece's ``msg_seq``, so when QQ had taken the first attempt (its
answer lost) it answers :data:`DUPLICATE_SEQ`, which counts as sent; the same
code on a first attempt means another send took that ``msg_seq`` (counters live
in one process), and the next is tried. Anything else fails the reply with
QQ's code and message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from tmy.adapters.fairness import PiecewiseSend
from tmy.adapters.qq.api import Answer, QQApi
from tmy.adapters.qq.text import MAX_PASSIVE_REPLIES, at_most, split_text
from tmy.errors import AdapterError
from tmy.logs import get_logger
from tmy.message import Outgoing

log = get_logger("tmy.adapter.qq")

PATHS = {
    "group": "/v2/groups/{}/messages",
    "c2c": "/v2/users/{}/messages",
    "channel": "/channels/{}/messages",
    "dm": "/dms/{}/messages",
}
# "消息被去重，请检查请求msgseq": this msg_id + msg_seq pair was sent already
DUPLICATE_SEQ = 40054005
UPLOADS = {"group": "/v2/groups/{}/files", "c2c": "/v2/users/{}/files"}
TEXT_CHANNEL = 0  # a guild channel's ``type`` for text


@dataclass(slots=True)
class Piece:
    """One message: its JSON body (``msg_seq`` added when sent), an image URL to upload first."""

    body: dict[str, Any]
    upload: str = ""
    seq: int = 0  # the msg_seq it was first sent with (kept for its retries)
    posting: bool = False  # its message POST is under way (not its image's upload)
    unsure: bool = False  # a POST's answer was lost (QQ may hold it already)


class QueuedReply(PiecewiseSend):
    """One reply (or ``send``) waiting in its chat's queue, with its retry state."""

    __slots__ = ("kind", "msg_id", "pieces", "rate_limit_wait", "sent_ids", "target")
    platform = "qq"

    def __init__(
        self,
        kind: str,
        target: str,
        pieces: list[Piece],
        msg_id: str,
        done: asyncio.Future[None] | None,
    ) -> None:
        super().__init__(done)
        self.kind = kind  # group, c2c, channel, dm (guild: resolved to a channel when sent)
        self.target = target
        self.pieces = pieces
        self.msg_id = msg_id
        self.rate_limit_wait = 1.0
        self.sent_ids: list[str] = []  # ids QQ gave the guild messages sent (adapter drains)


def compose(
    kind: str,
    text: str,
    parts: Outgoing | None,
    *,
    msg_id: str = "",
    event_id: str = "",
) -> list[Piece]:
    """The messages a reply becomes for a chat of ``kind``; see the module docstring."""
    images = [u for u in (parts.images if parts else []) if u.startswith(("http://", "https://"))]
    if parts and len(images) < len(parts.images):
        log.warning("qq.image_skipped", hint="QQ takes images as http(s) URLs only",
                    skipped=len(parts.images) - len(images))  # fmt: skip
    text = with_fallbacks(text, parts)
    common: dict[str, Any] = {}
    if msg_id:
        common["msg_id"] = msg_id
    elif event_id:
        common["event_id"] = event_id
    if kind in ("group", "c2c"):
        texts = split_text(text)
        if msg_id:  # QQ takes at most 5 replies to one message: the text first
            room = MAX_PASSIVE_REPLIES - min(len(images), MAX_PASSIVE_REPLIES - 1)
            texts = at_most(texts, room)
            images = images[: MAX_PASSIVE_REPLIES - len(texts)]
        pieces = [Piece({"msg_type": 0, "content": t, **common}) for t in texts]
        pieces += [Piece({"msg_type": 7, "content": " ", **common}, upload=u) for u in images]
        return pieces
    if parts and parts.mentions:
        text = " ".join(f"<@{m}>" for m in parts.mentions) + " " + text
    pieces = [Piece({"content": t, **common}) for t in split_text(text)]
    if pieces and images:  # the first image rides on the first piece
        pieces[0].body["image"], images = images[0], images[1:]
    pieces += [Piece({"image": url, **common}) for url in images]
    if pieces and parts is not None and parts.reply_to is not None:
        quoted = parts.reply_to or msg_id
        if quoted:
            pieces[0].body["message_reference"] = {
                "message_id": quoted, "ignore_get_message_error": True}  # fmt: skip
    return pieces


def with_fallbacks(text: str, parts: Outgoing | None) -> str:
    """``text`` with what QQ cannot send as such: buttons as a numbered list (a keyboard
    needs QQ's markdown rights), http(s) files as their links (QQ's file upload is not
    open to bots); other files are logged and left out."""
    if parts is None:
        return text
    lines = [f"{i}. {b.text}: {b.url}" if b.url else f"{i}. {b.text}"
             for i, b in enumerate((b for row in parts.buttons for b in row), 1)]  # fmt: skip
    links = [f for f in parts.files if f.startswith(("http://", "https://"))]
    lines += [f"[file] {url}" for url in links]
    if len(links) < len(parts.files):
        log.warning("qq.file_skipped", hint="QQ takes files as http(s) links in the text only",
                    skipped=len(parts.files) - len(links))  # fmt: skip
    if not lines:
        return text
    return (text.rstrip() + "\n" if text.strip() else "") + "\n".join(lines)


async def send_piece(
    api: QQApi | None, out: QueuedReply, next_seq: Callable[[str], int]
) -> float | None:
    """One send of ``out``'s next piece (the adapter's ChatQueues work).

    Returns the pause before calling again (the next piece, or a retry), None when done.
    """
    if api is None:
        out.finish(AdapterError("qq: the adapter is stopped"))
        return None
    piece = out.pieces[out.index]
    piece.posting = False
    try:
        answer = await _post(api, out, piece, next_seq)
    except AdapterError as exc:  # the token was refused meanwhile
        out.finish(exc)
        return None
    except (aiohttp.ClientError, TimeoutError) as exc:
        piece.unsure |= piece.posting  # QQ may have taken it
        return _retry(out, f"{type(exc).__name__}: {exc}", out.backoff.next())
    except asyncio.CancelledError:
        out.finish(AdapterError(f"qq: stopped before the message to {out.target} went out"))
        raise
    if answer.code == DUPLICATE_SEQ and out.kind in ("group", "c2c"):
        if not piece.unsure:  # a msg_seq another send took: the next one, at once
            piece.seq = 0
            return _retry(out, answer.describe(), 0.0)
        # a retry after an answer that was lost: QQ kept the first attempt
        log.info("qq.send_already_delivered", chat=out.target, msg_seq=piece.seq)
        answer = Answer(200, {})
    if answer.rate_limited:
        log.warning("qq.rate_limited", chat=out.target, code=answer.code, status=answer.status,
                    retry_after=out.rate_limit_wait)  # fmt: skip
        return _retry(out, answer.describe(), out.rate_limit_wait)
    if answer.status >= 500:
        piece.unsure |= piece.posting
        return _retry(out, answer.describe(), out.backoff.next())
    if not answer.ok:
        return _give_up(out, answer.describe())
    if out.kind in ("channel", "dm") and isinstance(answer.data, dict) and answer.data.get("id"):
        out.sent_ids.append(str(answer.data["id"]))
    return out.piece_sent(len(out.pieces))


async def _post(
    api: QQApi, out: QueuedReply, piece: Piece, next_seq: Callable[[str], int]
) -> Answer:
    """Resolve a guild to its channel, upload the piece's image, then POST the piece."""
    if out.kind == "guild":
        channel = await _first_text_channel(api, out.target)
        out.kind, out.target = "channel", channel
    if piece.upload:
        upload = {"file_type": 1, "url": piece.upload, "srv_send_msg": False}
        answer = await api.call("POST", UPLOADS[out.kind].format(out.target), upload)
        if not answer.ok or not isinstance(answer.data, dict):
            return answer
        piece.body["media"] = {"file_info": answer.data.get("file_info", "")}
        piece.upload = ""
    body = dict(piece.body)
    if out.kind in ("group", "c2c") and out.msg_id:
        if not piece.seq:
            piece.seq = next_seq(out.msg_id)
        body["msg_seq"] = piece.seq
    piece.posting = True
    return await api.call("POST", PATHS[out.kind].format(out.target), body)


async def _first_text_channel(api: QQApi, guild: str) -> str:
    answer = await api.call("GET", f"/guilds/{guild}/channels")
    channels = answer.data if answer.ok and isinstance(answer.data, list) else []
    for channel in channels:
        if isinstance(channel, dict) and channel.get("type") == TEXT_CHANNEL:
            return str(channel.get("id"))
    raise AdapterError(f"qq: guild {guild} has no text channel to post in ({answer.describe()})")


def _retry(out: QueuedReply, why: str, pause: float) -> float | None:
    if not out.may_retry():
        return _give_up(out, why)
    out.retries += 1
    log.warning("qq.send_retry", chat=out.target, error=why, retry_in=round(pause, 2))
    return pause


def _give_up(out: QueuedReply, why: str) -> None:
    log.warning("qq.send_failed", chat=out.target, kind=out.kind, error=why, retries=out.retries)
    out.finish(AdapterError(f"qq: sending to {out.kind} {out.target} failed ({why})"))
    return None
