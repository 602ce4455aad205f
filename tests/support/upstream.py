"""A loopback upstream (aiohttp) for the HTTP step and the LLM client: endless and big bodies,
endless SSE streams, a path-segment echo, credential echoes. The ``upstream`` fixture is
registered for every test by tests/conftest.py (``pytest_plugins``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

MB = 1024 * 1024


@dataclass
class Upstream:
    """What the loopback server saw."""

    url: str = ""
    limit: int | None = 64 * MB  # bytes an "endless" body stops at (None: truly endless)
    hits: list[dict[str, Any]] = field(default_factory=list)

    def paths(self) -> list[str]:
        return [h["path"] for h in self.hits]


def _sse(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


async def _endless(request: web.Request, up: Upstream, first: bytes, chunk: bytes, ctype: str):
    response = web.StreamResponse(headers={"Content-Type": ctype})
    await response.prepare(request)
    sent = 0
    try:
        await response.write(first)
        while up.limit is None or sent < up.limit:
            await response.write(chunk)
            sent += len(chunk)
        await response.write_eof()
    except (ConnectionError, RuntimeError):
        pass  # the client stopped reading and went away: what it should do
    return response


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    up = Upstream()

    def record(request: web.Request, **extra: Any) -> None:
        up.hits.append(
            {
                "path": request.path,
                "raw_path": request.raw_path,
                "query": list(request.query.items()),
                "headers": dict(request.headers),
                **extra,
            }
        )

    async def forever(request: web.Request) -> web.StreamResponse:
        record(request)
        return await _endless(request, up, b"", b"x" * 65536, "application/octet-stream")

    async def big(request: web.Request) -> web.Response:
        record(request)
        return web.Response(body=b"y" * (2 * MB), content_type="text/plain")

    async def weather(request: web.Request) -> web.Response:
        record(request, city=request.match_info["city"])
        return web.Response(text=f"weather in {request.match_info['city']}")

    async def stats(request: web.Request) -> web.Response:
        record(request)
        return web.Response(text="SECRET STATS")

    async def tagged(request: web.Request) -> web.Response:
        record(request)
        return web.json_response(list(request.query.items()))

    async def echo_auth(request: web.Request) -> web.Response:
        record(request)
        said = f"{request.headers.get('Authorization')} {request.headers.get('X-Api-Key')}"
        return web.Response(status=401, text=f"bad credentials: {said}")

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        record(request, model=body.get("model"))
        model = body.get("model")
        if model == "endless-json":
            head = b'{"id": "x", "choices": [{"index": 0, "message": {"content": "'
            return await _endless(request, up, head, b"a" * 65536, "application/json")
        if model == "endless-sse":
            delta = {"choices": [{"index": 0, "delta": {"content": "la " * 2000}}]}
            return await _endless(request, up, b"", _sse(delta) * 8, "text/event-stream")
        if model == "echo-key":
            said = request.headers.get("Authorization", "")
            return web.json_response(
                {"error": {"message": f"Incorrect API key provided: {said}", "type": "auth"}},
                status=400,
            )
        return web.json_response(
            {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}], "usage": {}}
        )

    app = web.Application()
    app.router.add_get("/forever", forever)
    app.router.add_get("/big", big)
    app.router.add_get("/weather/{city}", weather)
    app.router.add_get("/stats", stats)
    app.router.add_get("/tagged", tagged)
    app.router.add_route("*", "/echo-auth", echo_auth)
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    up.url = f"http://127.0.0.1:{port}"
    try:
        yield up
    finally:
        await runner.cleanup()
