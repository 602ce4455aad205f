"""How a chat-completions POST goes out: aiohttp directly, or the app's httpx client.

The LLM runtime's own requests go through an aiohttp ``ClientSession`` it
opens on first use and closes with the app (:class:`AiohttpPost`): the shared
httpx client (``services.http``) is httpx on top of aiohttp's pool, and that
layer cost 15–17% of a call's CPU (``bench/llm_fanout.py``). A runtime whose
services carry a client someone else made — an app given ``http=``, explain's
dry run that records requests through an httpx transport — sends through that
client instead (:class:`HttpxPost`), so canned or recorded responses still
answer it.

Both give :mod:`tmy.llm.client` the same small response (``status``,
``headers.get``, ``aiter_raw``: the raw, still encoded bytes, which
:mod:`tmy.bodies` inflates with a cap) and the same failures
(:class:`PostFailed`), named as httpx names them (``ConnectError``,
``ReadError`` …) so error messages read the same on either path.
Timeouts: ``timeout`` bounds connecting, and with ``each_read`` each wait for data
(httpx's semantics: a stalled stream), not the whole answer; the step's deadline bounds
that. Without ``each_read`` (a non-streaming attempt, which its caller bounds whole on
a shared timer: :func:`tmy.llm.deadline.attempt`) no read timer is set: aiohttp's
re-arms one in the loop's heap at every chunk (61,000 instructions of a call with 300
in flight, ``bench/llm_callgrind.py``).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol

from tmy.bodies import ACCEPT_ENCODING
from tmy.http_client import HTTP_MAX_CONNECTIONS

if TYPE_CHECKING:  # deferred: aiohttp and httpx are ~170 ms of every CLI start
    import aiohttp
    import httpx

TIMEOUT, CONNECT, NETWORK, OTHER = "timeout", "connect", "network", "other"


class PostFailed(Exception):
    """The request failed below HTTP: ``kind`` is timeout, connect, network or other;
    ``name`` the httpx-style class name shown in the error message."""

    def __init__(self, kind: str, name: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.name = name


class Response(Protocol):
    """What :mod:`tmy.llm.client` reads of a response (and :mod:`tmy.bodies` decodes)."""

    status: int
    headers: Mapping[str, str]

    def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive, still content-encoded."""
        ...

    async def read_plain(self, limit: int) -> bytes | None:
        """The whole body in one read when it comes unencoded with a Content-Length of at
        most ``limit`` bytes (the usual answer); None: read it with :mod:`tmy.bodies`."""
        ...


class Post(Protocol):
    """Sends one POST; the response is read inside the ``async with`` block."""

    def __call__(
        self, url: str, body: bytes, headers: dict[str, str], timeout: float, each_read: bool
    ) -> AbstractAsyncContextManager[Response]: ...


class _AiohttpResponse:
    __slots__ = ("_resp", "headers", "status")

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self.status = resp.status
        self.headers = resp.headers

    def aiter_raw(self) -> AsyncIterator[bytes]:
        return self._resp.content.iter_any()

    async def read_plain(self, limit: int) -> bytes | None:
        length = self._resp.content_length
        if length is None or length > limit:
            return None
        if self.headers.get("Content-Encoding", "identity").strip().lower() != "identity":
            return None
        return await self._resp.read()  # aiohttp reads no more than Content-Length


def _aiohttp_failure(exc: BaseException) -> PostFailed:
    import aiohttp  # deferred: see the module docstring

    if isinstance(exc, TimeoutError):  # aiohttp's timeouts are TimeoutErrors too
        return PostFailed(TIMEOUT, "ReadTimeout", str(exc))
    if isinstance(exc, aiohttp.ClientConnectorError):
        return PostFailed(CONNECT, "ConnectError", str(exc))
    if isinstance(exc, aiohttp.ClientPayloadError):
        return PostFailed(NETWORK, "ReadError", str(exc))
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return PostFailed(NETWORK, "RemoteProtocolError", str(exc) or "Server disconnected")
    if isinstance(exc, aiohttp.ClientConnectionError | aiohttp.ClientResponseError):
        return PostFailed(NETWORK, "NetworkError", str(exc))
    return PostFailed(OTHER, type(exc).__name__, str(exc))


class _AiohttpCall:
    """One POST as an ``async with``: aiohttp's own request context, its failures turned
    into :class:`PostFailed` — whether sending, reading inside the block or releasing.

    A class, not an ``asynccontextmanager``: no async generator, its ``asend`` and the
    wrapper per call (a few µs and four tracked objects of every call in flight)."""

    __slots__ = ("_cm",)

    def __init__(self, cm: Any) -> None:
        self._cm = cm  # aiohttp's _RequestContextManager, not entered yet

    async def __aenter__(self) -> Response:
        import aiohttp  # deferred: see the module docstring

        try:
            resp = await self._cm.__aenter__()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _aiohttp_failure(exc) from None
        return _AiohttpResponse(resp)

    async def __aexit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        import aiohttp  # deferred: see the module docstring

        try:
            await self._cm.__aexit__(kind, exc, tb)
        except (aiohttp.ClientError, TimeoutError) as failed:
            raise _aiohttp_failure(failed) from None
        if isinstance(exc, aiohttp.ClientError | TimeoutError):  # reading inside the block
            raise _aiohttp_failure(exc) from None


class AiohttpPost:
    """POSTs through one aiohttp session, opened on first use (one-shot CLI commands that
    never call a model do not import aiohttp) and closed by :meth:`aclose`."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[tuple[int, bool], aiohttp.ClientTimeout] = {}

    def _open(self) -> aiohttp.ClientSession:
        import aiohttp  # deferred: see the module docstring

        connector = aiohttp.TCPConnector(limit=HTTP_MAX_CONNECTIONS, limit_per_host=0)
        self._session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,  # tmy.bodies inflates, with a cap
            headers={"Accept-Encoding": ACCEPT_ENCODING},
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30.0, sock_read=30.0),
        )
        return self._session

    def _timeout(self, seconds: float, each_read: bool) -> aiohttp.ClientTimeout:
        """httpx's semantics (connect, and with ``each_read`` each wait for data); one
        object per tenth of a second, as what is left of a step's deadline differs at
        every call. Rounded up: the step's own deadline (a timer of its own) ends a
        request that outlives it."""
        tenths = math.ceil(seconds * 10 - 1e-9)  # 0.3 s is 3 tenths, not 3.0000000000000004
        found = self._timeouts.get((tenths, each_read))
        if found is None:
            import aiohttp  # deferred: see the module docstring

            if len(self._timeouts) > 64:  # per-step deadlines make many values: keep a few
                self._timeouts.clear()
            wait = tenths / 10
            found = self._timeouts[tenths, each_read] = aiohttp.ClientTimeout(
                total=None, connect=wait, sock_connect=wait, sock_read=wait if each_read else None
            )
        return found

    def __call__(
        self, url: str, body: bytes, headers: dict[str, str], timeout: float, each_read: bool
    ) -> _AiohttpCall:
        session = self._session or self._open()
        return _AiohttpCall(
            session.post(url, data=body, headers=headers, timeout=self._timeout(timeout, each_read))
        )

    async def aclose(self) -> None:
        """Close the session, if one was opened."""
        if self._session is not None:
            await self._session.close()
            self._session = None


class _HttpxResponse:
    __slots__ = ("_resp", "headers", "status")

    def __init__(self, resp: httpx.Response) -> None:
        self._resp = resp
        self.status = resp.status_code
        self.headers = resp.headers

    def aiter_raw(self) -> AsyncIterator[bytes]:
        return self._resp.aiter_raw()

    async def read_plain(self, limit: int) -> bytes | None:
        return None  # always through tmy.bodies (rare path: a given client, a dry run)


class HttpxPost:
    """POSTs through an httpx client someone else owns (it stays open); ``client_of``
    gives it at each request (the services' client is made on first use)."""

    def __init__(self, client_of: Callable[[], Any]) -> None:
        self.client_of = client_of

    @asynccontextmanager
    async def __call__(
        self, url: str, body: bytes, headers: dict[str, str], timeout: float, each_read: bool
    ) -> AsyncIterator[Response]:
        """httpx's timeout stays per operation whatever ``each_read`` says (this rare
        path — a given client, a dry run — keeps its semantics; the caller's own bound
        of the attempt holds as well)."""
        import httpx  # deferred: see the module docstring

        try:
            async with self.client_of().stream(
                "POST", url, content=body, headers=headers, timeout=timeout
            ) as resp:
                yield _HttpxResponse(resp)
        except httpx.TimeoutException as exc:
            raise PostFailed(TIMEOUT, type(exc).__name__, str(exc)) from None
        except httpx.TransportError as exc:
            kind = CONNECT if isinstance(exc, httpx.ConnectError) else NETWORK
            raise PostFailed(kind, type(exc).__name__, str(exc)) from None
        except httpx.HTTPError as exc:  # e.g. a body that does not decompress
            raise PostFailed(OTHER, type(exc).__name__, str(exc)) from None
