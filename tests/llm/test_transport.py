"""How LLM requests go out (tmy.llm.transport): aiohttp directly, or a client the app was given.

Real loopback servers: a provider answering gzip-encoded JSON (decoded by tmy, with
its cap), the hostile doubly gzipped bomb (stopped as "too large"), a stalled
answer (a timeout, retried). An app given an httpx client sends through it.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from tests.support.llm_helpers import RULES
from tmy.app import App
from tmy.builtins import BUILTINS
from tmy.llm import runtime_of
from tmy.llm.transport import AiohttpPost, HttpxPost
from tmy.message import Message
from tmy.testing import Bot
from tmy.testing.bot import settings_for

ANSWER = {
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "zipped"}}],
    "usage": {"prompt_tokens": 4, "completion_tokens": 1},
}


@pytest.fixture
async def gzipping() -> AsyncIterator[dict[str, Any]]:
    """A provider whose answers are gzip-encoded; it counts the requests and their headers."""
    state: dict[str, Any] = {"seen": []}

    async def completions(request: web.Request) -> web.Response:
        state["seen"].append(dict(request.headers))
        await request.read()
        body = gzip.compress(json.dumps(ANSWER).encode())
        headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
        return web.Response(body=body, headers=headers)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    state["url"] = f"http://127.0.0.1:{port}/v1"
    try:
        yield state
    finally:
        await runner.cleanup()


def _llm(base_url: str) -> dict[str, Any]:
    return {"models": {"m": {"base_url": base_url, "model": "m"}}, "default": "m", "retries": 0}


async def test_the_app_sends_through_its_own_aiohttp_session_and_closes_it(
    gzipping: dict[str, Any],
) -> None:
    async with Bot({"r.yaml": RULES}, llm=_llm(gzipping["url"])) as bot:
        post = runtime_of(bot.engine.services).post
        assert isinstance(post, AiohttpPost)
        assert await bot.say("ask hi") == "zipped"  # gzip decoded by tmy, not by the client
        session = post._session
        assert session is not None and not session.closed
    assert session.closed and post._session is None
    headers = gzipping["seen"][0]
    assert headers["Accept-Encoding"] == "gzip, deflate"
    assert headers["Content-Type"] == "application/json"


async def test_a_doubly_gzipped_bomb_is_stopped_at_the_cap(
    hostile: dict[str, Any], bomb: bytes
) -> None:
    hostile["bomb"] = bomb
    async with Bot({"r.yaml": RULES}, llm=_llm(f"{hostile['url']}/v1")) as bot:
        reply = await bot.ask("ask hi")
    assert reply.error is not None and "too large" in reply.error, reply.error


async def test_an_app_given_an_http_client_sends_the_llm_through_it(
    gzipping: dict[str, Any], tmp_path: Path
) -> None:
    sent: list[str] = []

    class Recording(httpx.AsyncHTTPTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            sent.append(str(request.url))
            return await super().handle_async_request(request)

    async with httpx.AsyncClient(transport=Recording()) as client:
        settings, texts = settings_for({"r.yaml": RULES}, tmp_path, llm=_llm(gzipping["url"]))
        async with App(settings, extensions=BUILTINS, rule_texts=texts, http=client) as app:
            assert app.engine is not None
            assert isinstance(runtime_of(app.engine.services).post, HttpxPost)
            reply = await app.engine.handle(Message("ask hi", user="ann", platform="test"))
            assert reply.text == "zipped"
        assert not client.is_closed  # closed by whoever made it
    assert sent == [f"{gzipping['url']}/chat/completions"]
