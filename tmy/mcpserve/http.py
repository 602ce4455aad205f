"""``/mcp`` on the daemon's listener: the MCP server over streamable HTTP, behind the API keys.

Every request (``POST``, the ``GET`` event stream, ``DELETE`` of a session) passes
the listener's middleware (Host, cross-site, body limits) and then the API-key check
``/v1/*`` uses (:func:`~tmy.adapters.http.api_key_problem`): a missing or wrong key
is a 401 and reaches nothing. With no keys configured the route is open, as
``/v1/*`` is (the listener's host policy still applies).

Who calls (:func:`caller_of_request`), as on ``/v1/chat/completions``: the
``X-Tmy-User`` header, else the API key's own identity (``key:`` and 12 hex digits
of its SHA-256), else a fresh ``anonymous-ephemeral-…`` id for that one request;
``X-Tmy-Chat`` names a shared chat (default: the caller's private chat);
``PLATFORM`` is ``mcp``. A session is bound to the key that opened it: another key gets 404.

The trust model: an API key is the credential, and every key may name the user it speaks
for (``X-Tmy-User``, as on ``/v1/*``: a front end that serves many people holds one key) —
so a rule's ``users:``/``chats:`` filters admit whoever a key names. Admin rights are not a
name's but a credential's: a caller is an admin only when ``admins:`` names its *key*
(``mcp:key:`` + the 12 hex digits), whatever user it names; without keys configured no
``/mcp`` caller is an admin (the route is open to whoever reaches the listener).

The SDK's session manager (``StreamableHTTPSessionManager``)
lives as long as the daemon serves (:func:`running`); its ASGI side is bridged to
aiohttp by :mod:`tmy.mcpserve.bridge`. An event stream (``GET``) gives its in-flight
slot back (:func:`~tmy.adapters.http.gate.long_lived`): it is bounded instead by the
caps of :mod:`tmy.mcpserve.limits` (streams in all and per key, sessions per key), far
below the listener's ``max_connections``.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tmy.adapters.http import api_key_problem
from tmy.adapters.http.adapter import MAX_BODY
from tmy.adapters.http.api import admin_as
from tmy.adapters.http.gate import long_lived
from tmy.logs import get_logger
from tmy.mcpserve.bridge import answer, scope_of
from tmy.mcpserve.limits import ClientLimits, Refused
from tmy.mcpserve.server import Calls, build_server, package_version
from tmy.mcpserve.tools import Caller
from tmy.message import id_problem
from tmy.types import Services

if TYPE_CHECKING:  # deferred: aiohttp is ~120 ms, the SDK ~0.5 s of every CLI start
    from aiohttp import web
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

log = get_logger("tmy.mcpserve")

PATH = "/mcp"
CALLER_KEY = "tmy.caller"  # where the route leaves the caller in the ASGI scope
MAX_SESSIONS = 1000
SESSION_IDLE = 30 * 60.0  # seconds without a request before a session is closed
MCP_SESSION_ID = "Mcp-Session-Id"  # the header naming a session (none: an opening request)
RETRY_AFTER = "5"  # seconds, in the 503 past a client's share (tmy.mcpserve.limits)


@dataclass(slots=True)
class HttpState:
    """The extension's state in one app: the session manager while the daemon serves."""

    manager: StreamableHTTPSessionManager | None = None
    limits: ClientLimits = field(default_factory=ClientLimits)


@contextlib.asynccontextmanager
async def running(services: Services, state: HttpState) -> AsyncIterator[None]:
    """Run the session manager while the block lasts (the daemon's serving lifetime).

    It runs in a task of its own: the SDK's task group must be left by the task that
    entered it, and the app may be closed from another task than opened it. On leaving,
    new requests get 503 and the calls in flight have ``limits.shutdown_grace`` to end
    before the sessions are closed.
    """
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager  # deferred

    calls = Calls()
    server = build_server(lambda: services.engine, _caller_of_ctx, package_version(), calls)
    manager = StreamableHTTPSessionManager(
        server,
        security_settings=None,  # Host and Origin: the listener's own policy, already passed
        max_request_body_size=MAX_BODY,
        session_idle_timeout=SESSION_IDLE,
        max_sessions=MAX_SESSIONS,
    )
    ready, stop = asyncio.Event(), asyncio.Event()

    async def run() -> None:
        async with manager.run():
            ready.set()
            await stop.wait()

    task = asyncio.create_task(run())
    waiter = asyncio.create_task(ready.wait())
    await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if task.done():  # it failed to start: say why
        task.result()
    state.manager = manager
    try:
        yield
    finally:
        state.manager = None
        if not await calls.drain(services.settings.shutdown_grace):
            log.warning("mcpserve.calls_cut", calls=calls.inflight, why="shutdown_grace passed")
        stop.set()
        await asyncio.gather(task, return_exceptions=True)


def routes(services: Services, state: HttpState) -> list[web.RouteDef]:
    """``GET``/``POST``/``DELETE /mcp``."""
    from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

    async def handle(request: web.Request) -> web.StreamResponse:
        return await _handle(services, state, request)

    return [
        web.post(PATH, handle),
        web.get(PATH, handle, allow_head=False),
        web.delete(PATH, handle),
    ]


async def _handle(services: Services, state: HttpState, request: web.Request) -> Any:
    settings = services.settings
    keys = settings.http_api_keys
    problem = api_key_problem(request, keys)
    if problem is not None:
        log.debug("mcpserve.refused", reason=problem, peer=request.remote)
        return _error(401, problem, {"WWW-Authenticate": 'Bearer realm="tmy"'})
    manager = state.manager
    if manager is None:
        return _error(503, "the MCP server is not running (the daemon is starting or stopping)")
    caller = caller_of_request(request, keys)
    for name, value in (("user", caller.user), ("chat", caller.chat)):
        problem = id_problem(name, value, settings.max_id_chars)
        if problem is not None:
            return _error(400, problem)
    extra: dict[str, Any] = {CALLER_KEY: caller}
    key = caller.admin_as or ""  # the key's identity ("" without keys)
    if key:  # the session belongs to the key that opened it
        extra["user"] = _key_user(key)
    scope = scope_of(request, extra)
    try:
        if request.method == "GET":  # the event stream: long-lived, capped (tmy.mcpserve.limits)
            with state.limits.stream(key):
                long_lived(request)
                return await answer(manager.handle_request, request, scope)
        if request.method == "POST" and MCP_SESSION_ID not in request.headers:
            with state.limits.opening(manager, key):
                return await answer(manager.handle_request, request, scope)
    except Refused as exc:
        log.debug("mcpserve.refused", reason=str(exc), peer=request.remote)
        return _error(503, str(exc), {"Retry-After": RETRY_AFTER})
    return await answer(manager.handle_request, request, scope)


def caller_of_request(request: web.Request, keys: Any) -> Caller:
    """Who a request speaks as (the module docstring's order); an admin only by its key."""
    headers = request.headers
    chat = headers.get("X-Tmy-Chat", "")
    user = headers.get("X-Tmy-User", "")
    key = admin_as(request, keys)  # the key's identity ("" without keys): checked already
    if user:
        return Caller(user=user, chat=chat, admin_as=key)
    if key:
        return Caller(user=key, chat=chat, admin_as=key)
    anonymous = f"anonymous-ephemeral-{secrets.token_hex(8)}"
    return Caller(user=anonymous, chat=chat, user_name="anonymous", ephemeral=True, admin_as="")


def _caller_of_ctx(ctx: Any) -> Caller:
    """The caller the route put in the scope of the HTTP request this message came in."""
    request = getattr(ctx, "request", None)
    caller = request.scope.get(CALLER_KEY) if request is not None else None
    if not isinstance(caller, Caller):  # not through the route: no one may be assumed
        raise PermissionError("no caller: MCP requests reach tmy only through /mcp")
    return caller


def _key_user(identity: str) -> Any:
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser  # deferred: the SDK
    from mcp.server.auth.provider import AccessToken

    return AuthenticatedUser(AccessToken(token=identity, client_id=identity, scopes=[]))


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    """A JSON-RPC error body (no id), as the SDK's own refusals on this route are."""
    from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

    body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}
    return web.json_response(body, status=status, headers=headers)
