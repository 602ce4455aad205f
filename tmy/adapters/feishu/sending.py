"""Sending to Feishu: a queued reply (or ``send``) and its send steps, with retries.

Each piece (:mod:`~tmy.adapters.feishu.compose`) is one request: the first piece
of a reply answers the triggering message (``POST
/open-apis/im/v1/messages/{id}/reply``; when it came from a thread every piece
does, with ``reply_in_thread``, so none leaves the thread), the others are sent to the chat (``POST
/open-apis/im/v1/messages?receive_id_type=chat_id``, or ``open_id`` for a
user's private chat). Pictures and files are uploaded first (``/im/v1/images``,
``/im/v1/files``). A rate limit (HTTP 429, code 99991400/11232/230020) waits
``x-ogw-ratelimit-reset`` seconds — only that chat waits: replies queue per
chat in a :class:`~tmy.adapters.fairness.ChatQueues`, whose ``interval`` paces
one chat's messages — at most ``max_retries`` (3) times and never longer
than ``longest_wait`` (120 s) per wait; network errors and 5xx are retried with
backoff; a refused reply (the message was recalled) is sent to the chat
instead; a picture or file that will not load or upload is named in a text
message instead (``feishu.media_failed``); anything else is logged with
Feishu's ``code`` and ``msg`` and raised as :class:`~tmy.errors.AdapterError`.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable

import aiohttp

from tmy.adapters.fairness import PiecewiseSend
from tmy.adapters.feishu.api import TOKEN_INVALID_CODES, Answer, Rest
from tmy.adapters.feishu.compose import Piece
from tmy.errors import AdapterError
from tmy.logs import get_logger
from tmy.media import Media

log = get_logger("tmy.adapter.feishu")


Loader = Callable[[str, str], Awaitable[Media]]  # (source, "image"|"file") -> bytes


class QueuedReply(PiecewiseSend):
    """One reply (or ``send``) waiting in its chat's queue, with its retry state."""

    __slots__ = ("id_type", "in_thread", "pieces", "receive_id", "reply_to")
    platform = "feishu"

    def __init__(
        self,
        receive_id: str,
        id_type: str,
        pieces: list[Piece],
        reply_to: str | None,
        in_thread: bool,
        done: asyncio.Future[None] | None,
    ) -> None:
        self.receive_id = receive_id  # a chat_id (oc_…), or an open_id for a private send
        self.id_type = id_type  # "chat_id" | "open_id"
        self.pieces = pieces
        self.reply_to = reply_to  # answered by the first piece
        self.in_thread = in_thread
        super().__init__(done)


async def send_piece(rest: Rest | None, out: QueuedReply, load: Loader) -> float | None:
    """One send of ``out``'s next piece (the adapter's ChatQueues work): the pause before
    the next call (another piece, or a retry after a rate limit), None when done."""
    if rest is None:
        out.finish(AdapterError("feishu: the adapter is stopped"))
        return None
    piece = out.pieces[out.index]
    try:
        if piece.upload and not piece.content:
            try:
                uploaded = await _upload(rest, piece, load)
            except AdapterError as exc:  # the source would not load: name it in the text
                return _unsent(out, piece, str(exc))
            if uploaded.retry_after is not None or uploaded.status >= 500:
                return _after_refusal(out, uploaded, "upload")
            if not uploaded.ok:
                return _unsent(out, piece, uploaded.describe())
        answer = await _post(rest, out, piece)
    except (aiohttp.ClientError, TimeoutError) as exc:
        return _retry(out, f"{type(exc).__name__}: {exc}")
    except AdapterError as exc:  # no token (refused credentials), a bad media source
        out.finish(exc)
        return None
    if not answer.ok:
        if out.reply_to is not None and out.index == 0 and _reply_refused(answer):
            log.info("feishu.reply_refused", message_id=out.reply_to, code=answer.code)
            out.reply_to = None  # the answered message is gone: say it in the chat
            return 0.0
        return _after_refusal(out, answer, "send")
    rest.remember(str(answer.data.get("message_id") or ""))
    return out.piece_sent(len(out.pieces))


async def _post(rest: Rest, out: QueuedReply, piece: Piece) -> Answer:
    content = json.dumps(piece.content, ensure_ascii=False)
    body = {"msg_type": piece.msg_type, "content": content, "uuid": str(uuid.uuid4())}
    if out.reply_to is not None and (out.index == 0 or out.in_thread):
        body["reply_in_thread"] = out.in_thread
        return await rest.call(
            "POST", f"/open-apis/im/v1/messages/{out.reply_to}/reply", json_body=body
        )
    body["receive_id"] = out.receive_id
    return await rest.call(
        "POST", "/open-apis/im/v1/messages", json_body=body, params={"receive_id_type": out.id_type}
    )


async def _upload(rest: Rest, piece: Piece, load: Loader) -> Answer:
    """Upload ``piece.upload``; on success its ``content`` names the key. A token Feishu
    calls invalid is replaced and the upload made once more with a new multipart body
    (Rest.call cannot resend a spent one)."""
    media = await load(piece.upload, piece.msg_type)
    answer = await _upload_once(rest, piece, media)
    if answer.code in TOKEN_INVALID_CODES:
        answer = await _upload_once(rest, piece, media)
    return answer


async def _upload_once(rest: Rest, piece: Piece, media: Media) -> Answer:
    form = aiohttp.FormData()
    if piece.msg_type == "image":
        form.add_field("image_type", "message")
        form.add_field("image", media.data, filename="image", content_type=media.mime)
        answer = await rest.call("POST", "/open-apis/im/v1/images", form=form)
        key = answer.data.get("image_key")
        field = "image_key"
    else:
        name = piece.upload.rsplit("/", 1)[-1][:100] or "file"
        form.add_field("file_type", "stream")
        form.add_field("file_name", name)
        form.add_field("file", media.data, filename=name, content_type=media.mime)
        answer = await rest.call("POST", "/open-apis/im/v1/files", form=form)
        key = answer.data.get("file_key")
        field = "file_key"
    if answer.ok and isinstance(key, str) and key:
        piece.content = {field: key}
    return answer


def _unsent(out: QueuedReply, piece: Piece, why: str) -> float:
    """A picture or file that cannot be sent is named in a text message instead."""
    log.warning("feishu.media_failed", chat=out.receive_id, source=piece.upload[:80], error=why)
    if piece.upload.startswith(("http://", "https://")):
        name = piece.upload
    elif piece.upload.startswith("data:"):
        name = ""  # a data: URL is no name
    else:
        name = piece.upload.rsplit("/", 1)[-1]
    out.pieces[out.index] = Piece("text", {"text": f"[{piece.msg_type}] {name or 'not sent'}"})
    return 0.0


def _reply_refused(answer: Answer) -> bool:
    """A reply the platform refused for the answered message's sake (recalled, deleted,
    not found): not a rate limit, not a server error, not an auth problem."""
    return answer.retry_after is None and answer.status < 500 and answer.code >= 230000


def _after_refusal(out: QueuedReply, answer: Answer, what: str) -> float | None:
    if answer.retry_after is not None:
        if not out.may_retry(answer.retry_after):
            return _give_up(out, answer, what)
        log.warning(
            "feishu.rate_limited",
            chat=out.receive_id,
            code=answer.code,
            retry_after=answer.retry_after,
        )
        out.retries += 1
        return answer.retry_after
    if answer.status >= 500:
        return _retry(out, answer.describe())
    return _give_up(out, answer, what)


def _retry(out: QueuedReply, why: str) -> float | None:
    if not out.may_retry():
        out.finish(AdapterError(f"feishu: sending to {out.receive_id} failed: {why}"))
        return None
    delay = out.backoff.next()
    log.warning("feishu.send_retry", chat=out.receive_id, error=why, retry_in=round(delay, 2))
    out.retries += 1
    return delay


def _give_up(out: QueuedReply, answer: Answer, what: str) -> None:
    log.warning(
        "feishu.send_failed",
        chat=out.receive_id,
        code=answer.code,
        msg=answer.msg,
        status=answer.status,
        retries=out.retries,
    )
    out.finish(AdapterError(f"feishu: {what} to {out.receive_id} failed ({answer.describe()})"))
    return None
