"""A fake Telegram Bot API server on loopback, for tests.

It answers ``/bot<token>/<method>`` the way api.telegram.org does — ``{"ok":
true, "result": …}`` or ``{"ok": false, "error_code": …, "description": …}``
with the same HTTP status — for the methods tmy uses: ``getMe``,
``getUpdates`` (a real long poll: it returns the queued updates from
``offset`` on, forgets those before ``offset`` as Telegram does, and waits up
to ``timeout`` seconds for one to arrive), ``sendMessage`` (recorded, answered
with a Message), ``deleteWebhook`` and ``setWebhook`` (recorded); for the
whole chat also ``sendPhoto``/``sendDocument`` (an uploaded file is read from
the multipart body), ``editMessageText``, ``editMessageReplyMarkup``,
``sendChatAction``, ``answerCallbackQuery``, ``approveChatJoinRequest``/
``declineChatJoinRequest``, ``getChatAdministrators`` (from :attr:`admins`) and
``getFile`` with the file download route ``/file/bot<token>/<file_path>``
(from :attr:`files`).

Tests queue updates with :meth:`FakeTelegram.message` (or the event helpers
:meth:`~FakeTelegram.member_join`, :meth:`~FakeTelegram.callback`,
:meth:`~FakeTelegram.reaction`, :meth:`~FakeTelegram.join_request`) and read what the bot
sent with :meth:`FakeTelegram.next_sent`; ``flood`` makes the next
``sendMessage`` calls fail with 429 ``retry_after``, ``flood_chats`` every
``sendMessage`` to the chats it names.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Any

from aiohttp import web

TOKEN = "123456:TEST-token-for-the-fake-api"
BOT_ID = 123456
BOT_USERNAME = "tmy_test_bot"
USER = {"id": 777, "is_bot": False, "first_name": "Ann", "last_name": "Lee", "username": "ann"}
GROUP = {"id": -100500, "type": "supergroup", "title": "Test group"}


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def entity(text: str, part: str, type: str, **extra: Any) -> dict[str, Any]:
    """The entity Telegram would attach for ``part`` (its first occurrence) inside ``text``."""
    start = text.index(part)
    return {"type": type, "offset": utf16(text[:start]), "length": utf16(part), **extra}


class FakeTelegram:
    """One fake Bot API server; ``base`` is what ``api_base`` should be set to."""

    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.me = {
            "id": BOT_ID,
            "is_bot": True,
            "first_name": "Tmy",
            "username": BOT_USERNAME,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }
        self.updates: list[dict[str, Any]] = []
        self.calls: list[tuple[float, str, dict[str, Any]]] = []  # (arrival, method, params)
        self.sent: list[tuple[float, dict[str, Any]]] = []  # successful sendMessage params
        self.flood: list[int] = []  # retry_after for the next sendMessage calls, in order
        # chat id -> retry_after: every sendMessage to that chat is refused with 429 (one chat
        # under Telegram's flood control)
        self.flood_chats: dict[int, int] = {}
        # (error_code, description[, parameters]) for the next sendMessage calls, in order
        self.fail_send: list[tuple[Any, ...]] = []
        self.get_updates_offsets: list[int | None] = []
        # chat id -> [(user, "creator" | "administrator")]: what getChatAdministrators answers
        self.admins: dict[int, list[tuple[dict[str, Any], str]]] = {}
        self.files: dict[str, bytes] = {}  # file_id -> content, for getFile and the download route
        self._taken = 0
        self._update_ids = itertools.count(1000)
        self._message_ids = itertools.count(5000)
        self._changed = asyncio.Condition()
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, port: int = 0) -> FakeTelegram:
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._call)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        self._runner = web.AppRunner(app, shutdown_timeout=0.05)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        self._closing.clear()
        return self

    async def stop(self) -> None:
        self._closing.set()
        async with self._changed:
            self._changed.notify_all()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeTelegram:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- what tests do -------------------------------------------------------------------------

    async def push(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue a raw update (``update_id`` filled in when missing)."""
        update.setdefault("update_id", next(self._update_ids))
        async with self._changed:
            self.updates.append(update)
            self._changed.notify_all()
        return update

    def make_message(
        self,
        text: str | None = "hi",
        *,
        chat: dict[str, Any] | None = None,
        sender: dict[str, Any] | None = None,
        entities: list[dict[str, Any]] | None = None,
        reply_to: dict[str, Any] | None = None,
        message_id: int | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """A ``message`` object; the chat defaults to the sender's private chat."""
        sender = sender or USER
        chat = chat or {"id": sender["id"], "type": "private", "first_name": sender["first_name"]}
        msg: dict[str, Any] = {
            "message_id": message_id if message_id is not None else next(self._message_ids),
            "date": int(time.time()),
            "chat": chat,
            "from": sender,
            **extra,
        }
        if text is not None:
            msg["text"] = text
        if entities:
            msg["entities"] = entities
        if reply_to is not None:
            msg["reply_to_message"] = reply_to
        return msg

    async def message(self, text: str | None = "hi", **kw: Any) -> dict[str, Any]:
        """Queue a ``message`` update; returns the message object."""
        msg = self.make_message(text, **kw)
        await self.push({"message": msg})
        return msg

    def bot_message(self, text: str, chat: dict[str, Any] = GROUP) -> dict[str, Any]:
        """A message the bot itself sent earlier (for replies to it)."""
        return self.make_message(text, chat=chat, sender=self.me)

    async def member_join(
        self,
        *members: dict[str, Any],
        chat: dict[str, Any] = GROUP,
        by: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A service message: ``members`` joined (``by`` added them; themselves when None)."""
        sender = by or members[0]
        msg = self.make_message(None, chat=chat, sender=sender, new_chat_members=list(members))
        await self.push({"message": msg})
        return msg

    async def member_leave(
        self, member: dict[str, Any], chat: dict[str, Any] = GROUP, by: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        msg = self.make_message(None, chat=chat, sender=by or member, left_chat_member=member)
        await self.push({"message": msg})
        return msg

    async def callback(
        self, data: str, message: dict[str, Any], sender: dict[str, Any] = USER
    ) -> dict[str, Any]:
        """A ``callback_query``: ``sender`` pressed the inline button carrying ``data``."""
        query = {
            "id": str(next(self._update_ids)),
            "from": sender,
            "message": message,
            "chat_instance": "-42",
            "data": data,
        }
        await self.push({"callback_query": query})
        return query

    async def reaction(
        self,
        message_id: int,
        new: list[str],
        old: list[str] = (),  # type: ignore[assignment]
        *,
        chat: dict[str, Any] = GROUP,
        user: dict[str, Any] = USER,
    ) -> None:
        """A ``message_reaction``: ``user`` now has the emoji ``new`` (had ``old``)."""

        def kinds(emojis: Any) -> list[dict[str, Any]]:
            return [{"type": "emoji", "emoji": e} for e in emojis]

        update = {"chat": chat, "message_id": message_id, "user": user, "date": int(time.time()),
                  "old_reaction": kinds(old), "new_reaction": kinds(new)}  # fmt: skip
        await self.push({"message_reaction": update})

    async def join_request(
        self, user: dict[str, Any] = USER, chat: dict[str, Any] = GROUP, bio: str = ""
    ) -> None:
        """A ``chat_join_request``: ``user`` asks to join ``chat``."""
        request: dict[str, Any] = {
            "chat": chat,
            "from": user,
            "user_chat_id": user["id"],
            "date": int(time.time()),
        }
        if bio:
            request["bio"] = bio
        await self.push({"chat_join_request": request})

    def calls_of(self, method: str) -> list[dict[str, Any]]:
        return [p for _, m, p in self.calls if m == method]

    async def wait_calls(self, method: str, n: int = 1, timeout: float = 10.0) -> list[Any]:
        """The params of the calls of ``method`` once there are at least ``n`` (waits)."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: len(self.calls_of(method)) >= n)
        return self.calls_of(method)

    async def next_sent(self, timeout: float = 10.0) -> dict[str, Any]:
        """The next successful sendMessage not yet taken (waits for it)."""
        taken = self._taken
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: len(self.sent) > taken)
        self._taken = taken + 1
        return self.sent[taken][1]

    async def nothing_sent(self, wait: float = 0.3) -> None:
        """Fail if a sendMessage not yet taken arrives within ``wait`` seconds."""
        await asyncio.sleep(wait)
        assert len(self.sent) == self._taken, f"unexpected send: {self.sent[self._taken][1]}"

    async def wait_for_call(self, method: str, timeout: float = 10.0) -> dict[str, Any]:
        """The params of the first call of ``method`` (waits for it)."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: any(m == method for _, m, _ in self.calls))
        return next(p for _, m, p in self.calls if m == method)

    def count(self, method: str) -> int:
        return sum(1 for _, m, _ in self.calls if m == method)

    # -- the Bot API ---------------------------------------------------------------------------

    async def _call(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        method = request.match_info["method"]
        params = await _params(request)
        async with self._changed:
            self.calls.append((time.monotonic(), method, params))
            self._changed.notify_all()
        handler = getattr(self, "_" + method, None)
        if handler is None:
            return _error(404, "Not Found: method not found")
        return await handler(params)

    async def _getMe(self, params: dict[str, Any]) -> web.Response:
        return _ok(self.me)

    async def _deleteWebhook(self, params: dict[str, Any]) -> web.Response:
        return _ok(True)

    async def _setWebhook(self, params: dict[str, Any]) -> web.Response:
        if not str(params.get("url", "")).startswith(("https://", "http://")):
            return _error(400, "Bad Request: bad webhook: HTTPS url must be provided for webhook")
        return _ok(True)

    async def _getUpdates(self, params: dict[str, Any]) -> web.Response:
        offset = int(params["offset"]) if "offset" in params else None
        self.get_updates_offsets.append(offset)
        timeout = float(params.get("timeout", 0))
        limit = int(params.get("limit", 100))
        async with self._changed:
            if offset is not None:  # confirmed: Telegram forgets them
                self.updates = [u for u in self.updates if u["update_id"] >= offset]
            try:
                async with asyncio.timeout(timeout):
                    await self._changed.wait_for(
                        lambda: bool(self.updates) or self._closing.is_set()
                    )
            except TimeoutError:
                pass
            return _ok(self.updates[:limit])

    async def _sendMessage(self, params: dict[str, Any]) -> web.Response:
        flooded = self.flood_chats.get(int(params["chat_id"]))
        if self.flood or flooded is not None:
            retry_after = self.flood.pop(0) if flooded is None else flooded
            return _error(
                429,
                f"Too Many Requests: retry after {retry_after}",
                parameters={"retry_after": retry_after},
            )
        if self.fail_send:
            code, description, *parameters = self.fail_send.pop(0)
            extra = {"parameters": parameters[0]} if parameters else {}
            return _error(code, description, **extra)
        text = params.get("text", "")
        if not text.strip():
            return _error(400, "Bad Request: message text is empty")
        if utf16(text) > 4096:
            return _error(400, "Bad Request: message is too long")
        chat_id = params["chat_id"]
        chat = (
            {"id": int(chat_id), "type": "private", "first_name": "x"}
            if not str(chat_id).startswith("-")
            else {"id": int(chat_id), "type": "supergroup", "title": "g"}
        )
        result = {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": chat,
            "from": self.me,
            "text": text,
        }
        async with self._changed:
            self.sent.append((time.monotonic(), params))
            self._changed.notify_all()
        return _ok(result)

    # -- the whole chat ------------------------------------------------------------------------

    def _sent_message(self, params: dict[str, Any], **content: Any) -> dict[str, Any]:
        chat_id = params["chat_id"]
        chat = (
            {"id": int(chat_id), "type": "private", "first_name": "x"}
            if not str(chat_id).startswith("-")
            else {"id": int(chat_id), "type": "supergroup", "title": "g"}
        )
        return {"message_id": next(self._message_ids), "date": int(time.time()), "chat": chat,
                "from": self.me, **content}  # fmt: skip

    async def _sendPhoto(self, params: dict[str, Any]) -> web.Response:
        if not params.get("photo"):
            return _error(400, "Bad Request: there is no photo in the request")
        size = {"file_id": "sent-photo", "file_unique_id": "sp", "width": 1, "height": 1}
        return _ok(self._sent_message(params, photo=[size]))

    async def _sendDocument(self, params: dict[str, Any]) -> web.Response:
        if not params.get("document"):
            return _error(400, "Bad Request: there is no document in the request")
        return _ok(self._sent_message(params, document={"file_id": "d", "file_unique_id": "d"}))

    async def _editMessageText(self, params: dict[str, Any]) -> web.Response:
        if not str(params.get("text", "")).strip():
            return _error(400, "Bad Request: message text is empty")
        if utf16(params["text"]) > 4096:
            return _error(400, "Bad Request: MESSAGE_TOO_LONG")
        return _ok(self._sent_message(params, text=params["text"]))

    async def _editMessageReplyMarkup(self, params: dict[str, Any]) -> web.Response:
        return _ok(self._sent_message(params, text="x"))

    async def _sendChatAction(self, params: dict[str, Any]) -> web.Response:
        return _ok(True)

    async def _answerCallbackQuery(self, params: dict[str, Any]) -> web.Response:
        return _ok(True)

    async def _approveChatJoinRequest(self, params: dict[str, Any]) -> web.Response:
        return _ok(True)

    async def _declineChatJoinRequest(self, params: dict[str, Any]) -> web.Response:
        return _ok(True)

    async def _getChatAdministrators(self, params: dict[str, Any]) -> web.Response:
        chat_id = int(params["chat_id"])
        if chat_id > 0:
            return _error(400, "Bad Request: there are no administrators in the private chat")
        return _ok([_member(user, status) for user, status in self.admins.get(chat_id, [])])

    async def _getFile(self, params: dict[str, Any]) -> web.Response:
        file_id = params.get("file_id", "")
        if file_id not in self.files:
            return _error(400, "Bad Request: invalid file_id")
        return _ok({"file_id": file_id, "file_unique_id": "u" + file_id,
                    "file_size": len(self.files[file_id]),
                    "file_path": f"photos/{file_id}.jpg"})  # fmt: skip

    async def _download(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return web.Response(status=401, text="Unauthorized")
        path = request.match_info["path"]
        file_id = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        if file_id not in self.files:
            return web.Response(status=404, text="Not Found")
        data = self.files[file_id]
        mime = "image/png" if data.startswith(b"\x89PNG") else "image/jpeg"
        return web.Response(body=data, content_type=mime)


def _member(user: dict[str, Any], status: str) -> dict[str, Any]:
    """A ChatMember as getChatAdministrators gives it (owner or administrator)."""
    if status == "creator":
        return {"status": "creator", "user": user, "is_anonymous": False}
    rights = ["can_manage_chat", "can_delete_messages", "can_manage_video_chats",
              "can_restrict_members", "can_promote_members", "can_change_info",
              "can_invite_users", "can_post_stories", "can_edit_stories", "can_delete_stories",
              "can_send_welcome_messages"]  # fmt: skip
    return {"status": "administrator", "user": user, "can_be_edited": False,
            "is_anonymous": False, **dict.fromkeys(rights, True)}  # fmt: skip


async def _params(request: web.Request) -> dict[str, Any]:
    """The call's parameters: form fields (JSON-encoded objects decoded) or a JSON body."""
    if request.content_type == "application/json":
        return dict(await request.json())
    form = await request.post()
    params: dict[str, Any] = {}
    for key, value in form.items():
        if isinstance(value, web.FileField):  # an uploaded file (multipart)
            params[key] = {"filename": value.filename, "content_type": value.content_type,
                           "data": value.file.read()}  # fmt: skip
            continue
        if isinstance(value, str) and value[:1] in "[{":
            try:
                params[key] = json.loads(value)
                continue
            except ValueError:
                pass
        params[key] = value
    for key, value in list(params.items()):  # aiogram names an upload "attach://<field>"
        if isinstance(value, str) and value.startswith("attach://"):
            params[key] = params.pop(value.removeprefix("attach://"), value)
    return params


def _ok(result: Any) -> web.Response:
    return web.json_response({"ok": True, "result": result})


def _error(code: int, description: str, **extra: Any) -> web.Response:
    body = {"ok": False, "error_code": code, "description": description, **extra}
    return web.json_response(body, status=code)
