"""A real chat-completions server on loopback, for the LLM tests.

It speaks enough of the OpenAI API for tmy: ``POST /v1/chat/completions``,
plain JSON or SSE (``"stream": true``, with the usage chunk when
``stream_options.include_usage`` is set), ``tool_calls``, and usage with cached
tokens in OpenAI's (``prompt_tokens_details.cached_tokens``) or DeepSeek's
(``prompt_cache_hit_tokens``) shape. Every request is logged (headers and JSON
body) so tests can assert how many the server saw and what they held.

Behaviour is scripted per model id: ``provider.script("m", [Fault.status(429,
retry_after=1), Reply("hi")])`` answers the next requests for model ``m`` in
order, then falls back to ``provider.default`` (a callable body -> Reply) —
which by default echoes the last line of the last user message after
``provider.delay`` seconds (a question with pictures: ``echo: <line> [N images]``).
A streamed ``Reply(…, hold=event)`` waits after its first content delta until
the test sets ``event``.

:class:`ImageServer` is a loopback image host (public pictures, pictures behind
a bearer token, a big body, a gzip bomb) for the media and vision tests.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from multidict import CIMultiDict


@dataclass
class Reply:
    """A successful completion."""

    content: str | None = "ok"
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # [{"name", "arguments"}]
    prompt_tokens: int = 10
    completion_tokens: int = 5
    cached_tokens: int = 0
    cache_style: str = "openai"  # "openai" | "deepseek"
    delay: float = 0.0
    # streamed: after the first content delta, wait for this event before the rest
    # (a test proves the first piece reached the client while the answer was unfinished)
    hold: asyncio.Event | None = None

    def usage(self) -> dict[str, Any]:
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }
        if self.cache_style == "deepseek":
            usage["prompt_cache_hit_tokens"] = self.cached_tokens
            usage["prompt_cache_miss_tokens"] = self.prompt_tokens - self.cached_tokens
        else:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return usage

    def calls(self) -> list[dict[str, Any]]:
        return [
            {
                "id": f"prov_{i}",
                "type": "function",
                "function": {
                    "name": c["name"],
                    "arguments": c["arguments"]
                    if isinstance(c["arguments"], str)
                    else json.dumps(c["arguments"]),
                },
            }
            for i, c in enumerate(self.tool_calls)
        ]


@dataclass
class Fault:
    """Something going wrong: a status, a slow answer, a non-JSON body, a cut stream."""

    kind: str
    status: int = 500
    body: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0

    @classmethod
    def http(cls, status: int, message: str = "boom", **headers: str) -> Fault:
        body = json.dumps({"error": {"message": message, "type": "server_error"}})
        return cls("status", status, body, {k.replace("_", "-"): v for k, v in headers.items()})

    @classmethod
    def slow(cls, seconds: float) -> Fault:
        return cls("slow", delay=seconds)

    @classmethod
    def not_json(cls, body: str = "<html><body>upstream exploded</body></html>") -> Fault:
        return cls("raw", 200, body)

    @classmethod
    def trickle(cls, every: float = 0.05) -> Fault:
        """A stream that never ends: one small chunk every ``every`` seconds, no finish."""
        return cls("trickle", delay=every)

    @classmethod
    def cut(cls) -> Fault:
        """A stream (or body) that stops mid-way: the connection is dropped."""
        return cls("cut")


Action = Reply | Fault


class FakeProvider:
    """The server. ``async with FakeProvider() as p:`` then point a model at ``p.base_url``."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.requests: list[dict[str, Any]] = []
        self.scripts: dict[str, deque[Action]] = defaultdict(deque)
        self.default: Callable[[dict[str, Any]], Action] = self.echo
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, model: str, actions: list[Action]) -> None:
        self.scripts[model].extend(actions)

    def seen(self, model: str | None = None) -> list[dict[str, Any]]:
        """Request bodies received (for one model id, or all)."""
        return [
            r["body"] for r in self.requests if model is None or r["body"].get("model") == model
        ]

    def echo(self, body: dict[str, Any]) -> Action:
        users = [m for m in body.get("messages", []) if m.get("role") == "user"]
        last = users[-1]["content"] if users else ""
        pictures = ""
        if isinstance(last, list):  # content parts: the text ones, and how many pictures
            count = sum(1 for p in last if p.get("type") == "image_url")
            pictures = f" [{count} images]" if count else ""
            last = "\n".join(p.get("text", "") for p in last if p.get("type") == "text")
        return Reply(f"echo: {last.split(chr(10))[-1]}{pictures}", delay=self.delay)

    async def __aenter__(self) -> FakeProvider:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return web.json_response({"error": {"message": "bad JSON"}}, status=400)
        # header names are case-insensitive; record them as CIMultiDict keeps them
        self.requests.append({"headers": CIMultiDict(request.headers), "body": body})
        queue = self.scripts.get(body.get("model", ""))
        action = queue.popleft() if queue else self.default(body)
        if isinstance(action, Fault):
            return await self._fault(request, body, action)
        if action.delay:
            await asyncio.sleep(action.delay)
        if body.get("stream"):
            return await self._stream(request, body, action)
        message: dict[str, Any] = {"role": "assistant", "content": action.content}
        if action.tool_calls:
            message["tool_calls"] = action.calls()
        return web.json_response(
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "model": body.get("model"),
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if action.tool_calls else "stop",
                    }
                ],
                "usage": action.usage(),
            }
        )

    async def _fault(
        self, request: web.Request, body: dict[str, Any], fault: Fault
    ) -> web.StreamResponse:
        if fault.kind == "status":
            return web.Response(
                status=fault.status,
                text=fault.body,
                headers=fault.headers,
                content_type="application/json",
            )
        if fault.kind == "slow":
            await asyncio.sleep(fault.delay)
            return web.json_response({"choices": [{"message": {"content": "too late"}}]})
        if fault.kind == "raw":
            return web.Response(status=fault.status, text=fault.body, content_type="text/html")
        if fault.kind == "trickle":
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            try:
                while True:  # each chunk well within any read timeout; the whole: never done
                    await response.write(_sse(_chunk(body, {"content": "."})))
                    await asyncio.sleep(fault.delay)
            except (ConnectionError, asyncio.CancelledError):
                return response
        # cut: start the answer, then drop the connection
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream" if body.get("stream") else "application/json"
            }
        )
        await response.prepare(request)
        if body.get("stream"):
            await response.write(_sse(_chunk(body, {"role": "assistant", "content": "Half an"})))
            await response.write(_sse(_chunk(body, {"content": " answ"})))
        else:
            await response.write(b'{"id": "chatcmpl-fake", "choices": [{"mess')
        await asyncio.sleep(0.01)
        assert request.transport is not None
        request.transport.close()
        return response

    async def _stream(
        self, request: web.Request, body: dict[str, Any], action: Reply
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(_sse(_chunk(body, {"role": "assistant", "content": ""})))
        text = action.content or ""
        for i in range(0, len(text), 4):
            await response.write(_sse(_chunk(body, {"content": text[i : i + 4]})))
            if i == 0 and action.hold is not None:
                await action.hold.wait()
        for i, call in enumerate(action.calls()):
            fn = call["function"]
            half = len(fn["arguments"]) // 2
            await response.write(
                _sse(
                    _chunk(
                        body,
                        {
                            "tool_calls": [
                                {
                                    "index": i,
                                    "id": call["id"],
                                    "type": "function",
                                    "function": {
                                        "name": fn["name"],
                                        "arguments": fn["arguments"][:half],
                                    },
                                }
                            ]
                        },
                    )
                )
            )
            await response.write(
                _sse(
                    _chunk(
                        body,
                        {
                            "tool_calls": [
                                {"index": i, "function": {"arguments": fn["arguments"][half:]}}
                            ]
                        },
                    )
                )
            )
        finish = "tool_calls" if action.tool_calls else "stop"
        await response.write(_sse(_chunk(body, {}, finish)))
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "choices": [],
                "usage": action.usage(),
            }
            await response.write(_sse(usage))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _chunk(
    body: dict[str, Any], delta: dict[str, Any], finish: str | None = None
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "model": body.get("model"),
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _sse(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


# a 1x1 PNG: what the image server hands out
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c63f8cfc0f01f0005000201c8a6e6ba0000000049454e44ae426082"
)


class ImageServer:
    """A loopback image host, like a platform's file server.

    ``/public/<name>`` answers anyone; ``/private/<name>`` only a request carrying
    ``Authorization: Bearer <token>`` (401 otherwise); ``/big`` is ``size`` bytes;
    ``/gzip`` a small gzip body inflating to ``size`` bytes. Every request's path
    and headers are kept in ``hits``.
    """

    def __init__(self, token: str = "img-secret", size: int = 4096) -> None:
        self.token = token
        self.size = size
        self.hits: list[dict[str, Any]] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def __aenter__(self) -> ImageServer:
        app = web.Application()
        app.router.add_get("/{kind}/{name}", self._image)
        app.router.add_get("/big", self._big)
        app.router.add_get("/gzip", self._gzip)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _image(self, request: web.Request) -> web.Response:
        self.hits.append({"path": request.path, "headers": CIMultiDict(request.headers)})
        given = request.headers.get("Authorization")
        if request.match_info["kind"] == "private" and given != f"Bearer {self.token}":
            return web.Response(status=401, text="who are you?")
        return web.Response(body=PNG, content_type="image/png")

    async def _big(self, request: web.Request) -> web.Response:
        self.hits.append({"path": request.path, "headers": CIMultiDict(request.headers)})
        return web.Response(
            body=b"\xff\xd8\xff" + b"x" * (self.size - 3), content_type="image/jpeg"
        )

    async def _gzip(self, request: web.Request) -> web.Response:
        import gzip

        self.hits.append({"path": request.path, "headers": CIMultiDict(request.headers)})
        body = gzip.compress(b"\0" * self.size)
        return web.Response(body=body, headers={"Content-Encoding": "gzip"})
