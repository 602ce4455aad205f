"""One WebSocket to a OneBot implementation: events in, actions out, answers matched by echo.

The same class serves both directions: the socket the implementation opened
to tmy (reverse, an aiohttp ``WebSocketResponse``) and the one tmy opened to it
(forward, a ``ClientWebSocketResponse``); both speak the OneBot "Universal"
protocol: events and action responses arrive on one socket, actions leave on it.

**Silence is death.** Half-open sockets (the peer is gone but no FIN ever
arrived) are the most reported OneBot failure: the bot looks connected and
never answers again. Any frame from the peer (an event, a heartbeat meta event,
an action response, a WebSocket ping or pong) proves it alive. After half of
``heartbeat_timeout`` without one, tmy sends a WebSocket ping, which every live
peer's WebSocket library answers; a peer that stays silent for the whole
``heartbeat_timeout`` is closed. So an implementation with OneBot heartbeats
turned off stays connected in a quiet chat, and a dead one is noticed.

**Actions** carry a unique ``echo``; the response with that echo resolves the
call. No response within ``action_timeout``, a closed socket, or a ``retcode``
other than 0 (or 1, which the spec defines as "accepted for asynchronous
processing") raises :class:`~tmy.errors.AdapterError`, naming the retcode.
Actions ready in the same pass of the event loop are written together
(:mod:`tmy.adapters.onebot.batching`: one frame each, one write).

**Timers are per connection, not per frame.** One watchdog timer checks the
silence (it fires a few times per ``heartbeat_timeout``, not once per frame),
and one timer expires the actions waiting longest (they wait in the order
they were sent, all with the same ``action_timeout``): a frame read or an
action sent arms no timer of its own.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from tmy.adapters.onebot.batching import FrameBatch
from tmy.errors import AdapterError
from tmy.logs import get_logger, preview

if TYPE_CHECKING:  # deferred: aiohttp is ~120 ms of every CLI start
    import aiohttp
    from aiohttp import web

log = get_logger("tmy.adapter.onebot")

# The largest frame accepted from an implementation (a message with a long
# forwarded record or base64 image can be big; aiohttp's own default).
MAX_FRAME_BYTES = 4 * 1024 * 1024
# Seconds a close waits for the peer's close frame; a dead peer never sends one.
CLOSE_TIMEOUT = 2.0

EventSink = Callable[["Connection", dict[str, Any]], None]
# takes an action's response frame, or the AdapterError saying why none will come
Answer = Callable[[dict[str, Any] | AdapterError], None]


class ActionFailed(AdapterError):
    """The implementation answered an action with a failure ``retcode``."""

    def __init__(self, action: str, retcode: Any, detail: str = "") -> None:
        self.action = action
        self.retcode = retcode
        super().__init__(
            f"onebot: {action} failed with retcode {retcode}" + (f": {detail}" if detail else "")
        )


class Connection:
    """A live socket to one OneBot implementation (one bot account once ``self_id`` is known)."""

    def __init__(
        self,
        ws: aiohttp.ClientWebSocketResponse | web.WebSocketResponse,
        *,
        self_id: str,
        peer: str,
        heartbeat_timeout: float,
        action_timeout: float,
    ) -> None:
        self.ws = ws
        self.self_id = self_id  # "" on a forward socket until the first event names it
        self.peer = peer  # for logs: the implementation's address or our URL
        self.heartbeat_timeout = heartbeat_timeout
        self.action_timeout = action_timeout
        self.frames = 0  # frames received so far
        self.failure: str | None = None  # a failure the implementation reported unasked
        self.connected_at = time.time()
        self._last_frame = time.monotonic()
        self._probed = False  # a ping went out since the last frame
        # echo -> (who takes its answer, when it expires, the action): in the order sent
        self._pending: dict[str, tuple[Answer, float, str]] = {}
        self._out = FrameBatch(ws, self._unsent)
        self._watchdog: asyncio.TimerHandle | None = None
        self._expiry: asyncio.TimerHandle | None = None  # the oldest pending action's deadline
        self._tasks: set[asyncio.Task[Any]] = set()  # the watchdog's pings and closes
        self._echo_prefix = f"tmy-{secrets.token_hex(4)}-"
        self._echo_ids = itertools.count(1)
        self._close_reason: str | None = None

    @property
    def closed(self) -> bool:
        return self.ws.closed

    async def run(self, on_event: EventSink) -> str:
        """Read frames until the socket closes or falls silent; return why it ended.

        Every JSON object that is not an action response goes to ``on_event``,
        which must not block (it schedules work); an exception from it is logged
        and reading goes on.
        """
        from aiohttp import WSMsgType  # deferred: aiohttp is ~120 ms of every CLI start

        ended = (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR)
        text = (WSMsgType.TEXT, WSMsgType.BINARY)
        ping = WSMsgType.PING
        loop = asyncio.get_running_loop()
        self._watchdog = loop.call_later(self.heartbeat_timeout / 2, self._watch)
        try:
            while True:
                msg = await self.ws.receive()
                kind = msg.type
                if kind in ended:
                    return self._close_reason or _ended(msg)
                self._last_frame = time.monotonic()
                self._probed = False
                self.frames += 1
                if kind in text:
                    self._frame(msg.data, on_event)
                elif kind == ping:
                    await self._pong(msg.data)
        finally:
            self._watchdog.cancel()
            if self._expiry is not None:
                self._expiry.cancel()
            self._fail_pending()
            if self._tasks:  # a close the watchdog began: ended as the caller expects
                await asyncio.gather(*self._tasks, return_exceptions=True)

    def _watch(self) -> None:
        """The silence watchdog: a ping after half of ``heartbeat_timeout`` without a frame,
        the close after all of it; then it sleeps until the next of those could be due."""
        now = time.monotonic()
        idle = now - self._last_frame
        half = self.heartbeat_timeout / 2
        if idle >= self.heartbeat_timeout:
            why = f"no frame for {self.heartbeat_timeout:g} s (the peer is gone)"
            if self._close_reason is None:
                self._close_reason = why
            self._spawn(self.close(why))
            return
        if idle >= half and not self._probed:
            self._probed = True
            self._spawn(self._ping())
        due = self._last_frame + (self.heartbeat_timeout if self._probed else half)
        loop = asyncio.get_running_loop()
        self._watchdog = loop.call_later(max(due - now, 0.001), self._watch)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def call(self, action: str, params: dict[str, Any]) -> Any:
        """Run ``action`` on the implementation and return the response's ``data``."""
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

        def take(response: dict[str, Any] | AdapterError) -> None:
            if answer.done():
                return
            if isinstance(response, AdapterError):
                answer.set_exception(response)
            else:
                answer.set_result(response)

        echo = self.request(action, params, take)
        try:
            response = await answer
        finally:
            self._pending.pop(echo, None)  # cancelled: a late answer goes nowhere
        return action_result(action, response)

    def request(self, action: str, params: dict[str, Any], take: Answer) -> str:
        """Send ``action`` now; ``take`` gets its response (or the AdapterError saying why
        there is none: unsent, timed out, closed) once, later, from the socket's reader.
        Returns the action's echo. Raises AdapterError when the socket is closed."""
        if self.ws.closed:
            raise AdapterError(f"onebot: the connection for {self.self_id or self.peer} is closed")
        echo = f"{self._echo_prefix}{next(self._echo_ids)}"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.action_timeout
        self._pending[echo] = (take, deadline, action)
        if self._expiry is None:
            self._expiry = loop.call_at(deadline, self._expire)
        frame = {"action": action, "params": params, "echo": echo}
        try:
            payload = orjson.dumps(frame)
        except TypeError:
            payload = _dumps(frame)
        self._out.push(payload, echo)
        return echo

    def _unsent(self, echo: str, why: str) -> None:
        """The frame of the action ``echo`` could not be written: whoever takes its answer is
        told why."""
        pending = self._pending.pop(echo, None)
        if pending is not None:
            _answer(pending[0], AdapterError(f"onebot: cannot send {pending[2]}: {why}"))

    def _expire(self) -> None:
        """Fail the actions whose ``action_timeout`` has passed (the oldest come first)."""
        self._expiry = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        pending = self._pending
        for echo, (take, deadline, action) in list(pending.items()):
            if deadline > now:
                self._expiry = loop.call_at(deadline, self._expire)
                return
            del pending[echo]
            _answer(
                take,
                AdapterError(f"onebot: {action} got no answer within {self.action_timeout:g} s"),
            )

    async def close(self, why: str, code: int | None = None) -> None:
        """Close the socket (idempotent); ``why`` is what ``run`` reports; ``code`` defaults
        to 1000 (``WSCloseCode.OK``)."""
        import aiohttp  # deferred: aiohttp is ~120 ms of every CLI start

        if self._close_reason is None:
            self._close_reason = why
        try:
            code = aiohttp.WSCloseCode.OK if code is None else code
            await self.ws.close(code=code, message=why.encode()[:120])
        except (ConnectionError, RuntimeError, aiohttp.ClientError):
            pass

    def _frame(self, data: str | bytes, on_event: EventSink) -> None:
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            log.warning("onebot.bad_frame", peer=self.peer, frame=preview(data))
            return
        if not isinstance(obj, dict):
            log.warning("onebot.bad_frame", peer=self.peer, frame=preview(data))
            return
        if "post_type" not in obj and "echo" in obj:
            echo = obj["echo"]
            pending = self._pending.pop(echo if type(echo) is str else str(echo), None)
            if pending is not None:
                try:  # _answer inline: an action's answer, once per reply
                    pending[0](obj)
                except Exception:
                    log.exception("onebot.answer_failed", answer=preview(obj))
            return
        try:
            on_event(self, obj)
        except Exception:
            log.exception("onebot.event_failed", peer=self.peer, frame=preview(obj))

    async def _ping(self) -> None:
        import aiohttp  # deferred: aiohttp is ~120 ms of every CLI start

        try:
            await self.ws.ping()
        except (ConnectionError, RuntimeError, aiohttp.ClientError):
            pass

    async def _pong(self, data: bytes) -> None:
        import aiohttp  # deferred: aiohttp is ~120 ms of every CLI start

        try:
            await self.ws.pong(data)
        except (ConnectionError, RuntimeError, aiohttp.ClientError):
            pass

    def _fail_pending(self) -> None:
        why = self._close_reason or "the connection closed"
        pending, self._pending = self._pending, {}
        for take, _, _ in pending.values():
            _answer(take, AdapterError(f"onebot: {why} before the action was answered"))


def _answer(take: Answer, response: dict[str, Any] | AdapterError) -> None:
    """Hand an action's answer over; a taker that fails is logged, the reader goes on."""
    try:
        take(response)
    except Exception:
        log.exception("onebot.answer_failed", answer=preview(response))


def action_result(action: str, response: dict[str, Any]) -> Any:
    """``data`` of a successful response; ActionFailed naming the retcode otherwise."""
    retcode = response.get("retcode")
    status = response.get("status")
    if retcode in (0, 1) or (retcode is None and status in ("ok", "async")):
        return response.get("data")
    detail = next((str(response[k]) for k in ("wording", "message", "msg") if response.get(k)), "")
    if status and status != "failed":
        detail = f"status {status}" + (f", {detail}" if detail else "")
    raise ActionFailed(action, retcode, detail)


def _ended(msg: aiohttp.WSMessage) -> str:
    from aiohttp import WSMsgType  # deferred: aiohttp is ~120 ms of every CLI start

    if msg.type == WSMsgType.ERROR:
        return f"socket error: {msg.data}"
    code = msg.data if isinstance(msg.data, int) else None
    extra = f": {msg.extra}" if msg.extra else ""
    return f"closed by the peer (code {code}{extra})" if code else "closed"


def _dumps(obj: Any) -> bytes:
    """UTF-8 JSON; ASCII escapes if a lone surrogate slipped into the text."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj).encode()
