"""A fake OneBot v11 implementation (what NapCat does on its side of the socket), for tests.

:class:`FakeImpl` is one socket seen from the implementation: it pushes
events (``group``/``private`` messages in array or CQ-string format, meta
events) and answers every action like NapCat does,
``{"status": "ok", "retcode": 0, "data": {"message_id": …}, "echo": …}`` —
or with a failure retcode when told to. Each action is recorded with the
monotonic time it arrived. ``answers`` sets the ``data`` of an action's answer
by action name (a value, or a function of the action's params), as NapCat's
``get_msg``/``get_image`` would answer. Notices and requests
(:meth:`FakeImpl.notice`, :meth:`FakeImpl.request` and the named helpers) are
shaped as NapCat posts them.

:func:`connect_reverse` plays an implementation configured for reverse
WebSocket (it connects to tmy); :class:`FakeServer` plays one configured for
forward WebSocket (tmy connects to it).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from aiohttp import web

SELF_ID = 10001
ANONYMOUS_USER = 80000000  # the user_id QQ gives every anonymous group sender


class FakeImpl:
    """The implementation's end of one socket."""

    def __init__(self, ws: Any, self_id: int = SELF_ID) -> None:
        self.ws = ws
        self.self_id = self_id
        self.actions: list[tuple[float, dict[str, Any]]] = []  # (arrival, frame)
        self.fail_with: list[int] = []  # retcodes for the next actions, in order
        self.answers: dict[str, Any] = {}  # action -> data (or a function of params)
        self.refuse: set[str] = set()  # actions answered with retcode 1404 (unsupported)
        self.closed = asyncio.Event()
        self._taken = 0  # actions already handed out by next_action
        self._arrived = asyncio.Condition()
        self._message_ids = itertools.count(9001)
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for msg in self.ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue
                frame = json.loads(msg.data)
                async with self._arrived:
                    self.actions.append((time.monotonic(), frame))
                    self._arrived.notify_all()
                await self._answer(frame)
        except (ConnectionError, aiohttp.ClientError):
            pass
        finally:
            self.closed.set()

    async def _answer(self, frame: dict[str, Any]) -> None:
        action = frame.get("action")
        if self.fail_with or action in self.refuse:
            retcode = self.fail_with.pop(0) if self.fail_with else 1404
            answer = {"status": "failed", "retcode": retcode, "data": None, "message": "bad"}
        elif action in self.answers:
            data = self.answers[action]
            data = data(frame.get("params") or {}) if callable(data) else data
            answer = {"status": "ok", "retcode": 0, "data": data}
        else:
            data = {"message_id": next(self._message_ids)}
            answer = {"status": "ok", "retcode": 0, "data": data}
        answer["echo"] = frame.get("echo")
        await self.ws.send_str(json.dumps(answer))

    async def next_action(self, timeout: float = 10.0) -> dict[str, Any]:
        """The next action not yet taken by a previous call (waits for it)."""
        taken = self._taken
        async with asyncio.timeout(timeout), self._arrived:
            await self._arrived.wait_for(lambda: len(self.actions) > taken)
        self._taken = taken + 1
        return self.actions[taken][1]

    async def action_where(self, predicate: Any, timeout: float = 10.0) -> dict[str, Any]:
        """The first action (taken or not) for which ``predicate(frame)`` holds (waits for it)."""
        async with asyncio.timeout(timeout), self._arrived:
            await self._arrived.wait_for(lambda: any(predicate(f) for _, f in self.actions))
        return next(f for _, f in self.actions if predicate(f))

    async def no_action(self, wait: float = 0.3) -> None:
        """Fail if an action not yet taken arrives within ``wait`` seconds."""
        await asyncio.sleep(wait)
        taken = self._taken
        assert len(self.actions) == taken, f"unexpected action: {self.actions[taken][1]}"

    async def send(self, event: dict[str, Any]) -> None:
        await self.ws.send_str(json.dumps(event))

    async def lifecycle(self) -> None:
        await self.send(meta(self.self_id, "lifecycle", sub_type="connect"))

    async def group(
        self,
        message: str | list[dict[str, Any]],
        *,
        group: int = 30003,
        user: int = 20002,
        message_id: int = 555,
        card: str = "Ann",
        nickname: str = "ann_nick",
        anonymous: dict[str, Any] | None = None,
        role: str = "member",
    ) -> None:
        """A group message from ``user`` (a CQ string or a segment array).

        ``anonymous`` (``{"id", "name", "flag"}``) makes it an anonymous message,
        as QQ reports one: ``user_id`` 80000000 and ``sub_type`` anonymous;
        ``role`` is the sender's group role (owner, admin, member).
        """
        if anonymous is not None:
            user = ANONYMOUS_USER
        await self.send(
            {
                "time": int(time.time()),
                "self_id": self.self_id,
                "post_type": "message",
                "message_type": "group",
                "sub_type": "normal" if anonymous is None else "anonymous",
                "message_id": message_id,
                "group_id": group,
                "user_id": user,
                "anonymous": anonymous,
                "message": message,
                "raw_message": message if isinstance(message, str) else "",
                "font": 0,
                "sender": {"user_id": user, "nickname": nickname, "card": card, "role": role},
            }
        )

    async def private(
        self,
        message: str | list[dict[str, Any]],
        *,
        user: int = 20002,
        message_id: int = 556,
        nickname: str = "ann_nick",
    ) -> None:
        await self.send(
            {
                "time": int(time.time()),
                "self_id": self.self_id,
                "post_type": "message",
                "message_type": "private",
                "sub_type": "friend",
                "message_id": message_id,
                "user_id": user,
                "message": message,
                "raw_message": message if isinstance(message, str) else "",
                "font": 0,
                "sender": {"user_id": user, "nickname": nickname, "sex": "unknown", "age": 0},
            }
        )

    async def notice(self, notice_type: str, **fields: Any) -> None:
        """A ``notice`` event (``group_increase``, ``notify`` …) with its fields."""
        await self.send(
            {"time": int(time.time()), "self_id": self.self_id, "post_type": "notice",
             "notice_type": notice_type, **fields}
        )  # fmt: skip

    async def request(self, request_type: str, **fields: Any) -> None:
        """A ``request`` event (``friend``, ``group``) with its fields."""
        await self.send(
            {"time": int(time.time()), "self_id": self.self_id, "post_type": "request",
             "request_type": request_type, **fields}
        )  # fmt: skip

    async def member_join(self, user: int, *, group: int = 30003, operator: int = 0) -> None:
        sub_type = "invite" if operator else "approve"
        await self.notice("group_increase", sub_type=sub_type, group_id=group, user_id=user,
                          operator_id=operator)  # fmt: skip

    async def friend_request(self, user: int, comment: str, flag: str) -> None:
        await self.request("friend", user_id=user, comment=comment, flag=flag)

    async def poke(self, user: int, target: int, *, group: int | None = None) -> None:
        """A poke as NapCat posts it: in a group (group_id) or a friend's (sender_id)."""
        fields: dict[str, Any] = {"sub_type": "poke", "user_id": user, "target_id": target}
        if group is None:
            fields["sender_id"] = user
        else:
            fields["group_id"] = group
        await self.notice("notify", **fields)

    async def close(self) -> None:
        await self.ws.close()
        await self._reader


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "data": {"text": value}}


def at(qq: int | str) -> dict[str, Any]:
    return {"type": "at", "data": {"qq": str(qq)}}


def image(url: str, file: str = "ABCDEF0123.jpg", size: int = 2048) -> dict[str, Any]:
    """An image segment as NapCat posts one (a QQ multimedia URL with an expiring rkey)."""
    return {"type": "image", "data": {"summary": "", "file": file, "sub_type": 0, "url": url,
                                      "file_size": str(size)}}  # fmt: skip


def meta(self_id: int, kind: str, **fields: Any) -> dict[str, Any]:
    return {
        "time": int(time.time()),
        "self_id": self_id,
        "post_type": "meta_event",
        "meta_event_type": kind,
        **fields,
    }


async def connect_reverse(
    session: aiohttp.ClientSession,
    url: str,
    self_id: int = SELF_ID,
    *,
    token: str | None = None,
    query_token: str | None = None,
    role: str | None = "Universal",
    **ws_options: Any,
) -> FakeImpl:
    """Connect to tmy's reverse endpoint the way NapCat does (raises on a refused handshake)."""
    headers = {"X-Self-ID": str(self_id)}
    if role is not None:
        headers["X-Client-Role"] = role
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if query_token is not None:
        url += f"?access_token={query_token}"
    ws = await session.ws_connect(url, headers=headers, **ws_options)
    return FakeImpl(ws, self_id)


class FakeServer:
    """A forward-mode implementation: a WebSocket server tmy connects to.

    Each accepted socket sends the lifecycle ``connect`` event first and is
    put on ``connections``; ``silent=True`` makes later sockets neither read
    nor answer (a half-open peer).
    """

    def __init__(self, self_id: int = SELF_ID, token: str = "") -> None:
        self.self_id = self_id
        self.token = token
        self.connections: asyncio.Queue[FakeImpl] = asyncio.Queue()
        self.auth_headers: list[str | None] = []
        self.silent = False
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._silent_sockets: list[web.WebSocketResponse] = []
        self._closing = asyncio.Event()  # ends the silent sockets' handlers at exit

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    async def __aenter__(self) -> FakeServer:
        app = web.Application()
        app.router.add_get("/", self._accept)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, shutdown_timeout=1)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closing.set()  # or cleanup waits its whole shutdown_timeout on their handlers
        for ws in self._silent_sockets:
            await ws.close()
        assert self._runner is not None
        await self._runner.cleanup()

    async def _accept(self, request: web.Request) -> web.StreamResponse:
        self.auth_headers.append(request.headers.get("Authorization"))
        if self.token and request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.Response(status=403, text="wrong token")
        ws = web.WebSocketResponse(autoping=not self.silent)
        await ws.prepare(request)
        await ws.send_str(json.dumps(meta(self.self_id, "lifecycle", sub_type="connect")))
        if self.silent:
            self._silent_sockets.append(ws)
            await self._closing.wait()  # never read until the server closes: pings go unanswered
            return ws
        impl = FakeImpl(ws, self.self_id)
        await self.connections.put(impl)
        await impl.closed.wait()
        return ws


class FailingServer:
    """A forward-mode implementation that refuses in-band: it accepts the WebSocket, sends one
    failure frame (``frame``) and closes, as some do for a wrong access token."""

    def __init__(self, frame: dict[str, Any]) -> None:
        self.frame = frame
        self.accepted = 0
        self.port = 0
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    async def __aenter__(self) -> FailingServer:
        app = web.Application()
        app.router.add_get("/", self._accept)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, shutdown_timeout=1)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _accept(self, request: web.Request) -> web.StreamResponse:
        self.accepted += 1
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str(json.dumps(self.frame))
        await ws.close(code=aiohttp.WSCloseCode.POLICY_VIOLATION, message=b"bye")
        return ws


@asynccontextmanager
async def loopback(
    handle: Any, store: Any = None, self_id: int = SELF_ID, **config: Any
) -> AsyncIterator[tuple[Any, FakeImpl]]:
    """A OneBot adapter (``config``) on a real HTTP listener answering with ``handle``, and a
    fake NapCat connected to it: ``(adapter, impl)``."""
    from tmy.adapters.http import HttpAdapter
    from tmy.adapters.onebot import OneBotAdapter, OneBotConfig

    config.setdefault("send_interval", 0)
    adapter = OneBotAdapter(OneBotConfig(**config), store=store, shutdown_grace=5)
    http = HttpAdapter("127.0.0.1:0")
    http.mount(adapter.routes())
    await adapter.start(handle)
    await http.start(handle)
    session = aiohttp.ClientSession()
    try:
        url = f"ws://127.0.0.1:{http.port}{adapter.config.path}"
        impl = await connect_reverse(session, url, self_id)
        deadline = time.monotonic() + 5
        while str(self_id) not in adapter.health()["self_ids"]:
            assert time.monotonic() < deadline, "the fake never connected"
            await asyncio.sleep(0.01)
        yield adapter, impl
    finally:
        await adapter.stop()
        await http.stop()
        await session.close()
