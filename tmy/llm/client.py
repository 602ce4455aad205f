"""The OpenAI-compatible transport: ``POST {base_url}/chat/completions``, retries, fallback.

Why it looks like this:

* One pooled aiohttp session (the runtime's, :mod:`tmy.llm.transport`) serves
  every call, so 100 conversations share keep-alive connections instead of
  paying a TLS handshake each; a runtime on a client someone else made (an app
  given ``http=``, explain's recording dry run) sends through that one.
* Retries follow the official openai SDK (:mod:`tmy.llm.retry`), so a deployment
  behaves the same as a script using it: timeouts, connection errors, 408, 409, 429 and 5xx are
  retried (``retries``, default 2) after ``backoff_base``·2ⁿ seconds (capped at
  ``backoff_cap``) times a jitter in (0.75, 1]; ``Retry-After`` /
  ``retry-after-ms`` win when given, capped at ``retry_after_cap``. Anything
  else (400, 401, a body that is not JSON) is not retried: asking again would
  get the same answer. When a model gives up, its ``fallback`` models are tried
  in order.
* Every failure becomes an :class:`LLMError` (an ExecutorError, so it lands in
  ``STEP_ERROR``) whose message says what the server did; nothing else escapes.
* A stream must end with ``[DONE]`` or a ``finish_reason``: a stream cut
  mid-way is an error (and retried like a dropped connection), never a silent
  half answer.
* Bodies are read as they arrive and counted: a body, or a whole SSE stream,
  over ``llm.max_response_bytes`` stops the read with a "too large" error (not
  retried), so a provider that streams forever cannot fill the daemon's memory.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from tmy import bodies
from tmy.config.llm import LLMConfig, ModelConfig
from tmy.llm.deadline import attempt
from tmy.llm.mock import respond
from tmy.llm.retry import failure, retry_after_seconds, retry_delay, status_error, timed_out
from tmy.llm.streaming import Deltas, replay
from tmy.llm.transport import OTHER, TIMEOUT, AiohttpPost, HttpxPost, Post, PostFailed
from tmy.llm.wire import Completion, LLMError, Usage, parse_completion, parse_json
from tmy.llm.wire import Stream as _Stream

if TYPE_CHECKING:  # deferred: httpx is ~50 ms of every CLI start
    import httpx

    from tmy.llm.transport import Response

__all__ = ["Completion", "LLMError", "Request", "Usage", "complete", "retry_delay"]
__all__ += ["retry_after_seconds"]  # (tmy.llm.retry's, as they were here)

_LINE_END = re.compile(rb"\r\n|\r|\n")  # SSE allows all three


@dataclass(slots=True)
class Request:
    """What a step wants from a model; turned into a body per model (fallbacks differ)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    temperature: float | None = None  # the step's (or the scene's fixed) temperature
    default_temperature: float | None = None  # when neither step nor model sets one
    max_tokens: int | None = None
    json_schema: dict[str, Any] | None = None  # set: ask the provider for JSON
    stream: bool | None = None
    # streamed answers: each content delta as it arrives (never a tool-call turn's);
    # not part of the body
    on_delta: Callable[[str], Awaitable[None]] | None = None

    def wants_stream(self, model: ModelConfig) -> bool:
        """Whether the provider is asked to stream: the step's ``stream``, else the model's."""
        return self.stream if self.stream is not None else model.stream

    def body(self, model: ModelConfig) -> dict[str, Any]:
        """The JSON body for ``model``: its id, and its settings where the step set none."""
        body: dict[str, Any] = {"model": model.model, "messages": self.messages}
        if self.tools:
            body["tools"] = self.tools
        temp = self.temperature
        if temp is None:
            temp = model.temperature if model.temperature is not None else self.default_temperature
        if temp is not None:
            body["temperature"] = temp
        max_tokens = self.max_tokens or model.max_tokens
        if max_tokens:
            body["max_tokens"] = max_tokens
        if self.json_schema is not None and model.response_format != "none":
            if model.response_format == "json_schema":
                body["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "output", "schema": self.json_schema},
                }
            else:
                body["response_format"] = {"type": "json_object"}
        if self.wants_stream(model):
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body


async def complete(
    http: Post | httpx.AsyncClient,
    config: LLMConfig,
    model: ModelConfig,
    req: Request,
    deadline: float,
) -> Completion:
    """Ask ``model`` (then its fallbacks) for a completion before ``deadline`` (monotonic).

    ``http``: how requests go out (:mod:`tmy.llm.transport`); an httpx client is wrapped.
    ``deadline`` is enforced by a timer the caller holds (every
    :class:`~tmy.llm.exchange.Job`'s maker does): an attempt whose ``timeout`` reaches it
    sets none of its own, so the caller's ends it and its error says so.
    """
    if not isinstance(http, AiohttpPost) and hasattr(http, "stream"):  # an httpx client
        http = HttpxPost(lambda client=http: client)
    chain = [model, *(config.models[name] for name in model.fallback)]
    deltas = Deltas(req.on_delta) if req.on_delta is not None else None
    failures: list[str] = []
    waits: list[float] = []  # every backoff slept, across the models tried
    requests = 0
    last: LLMError | None = None
    for candidate in chain:
        try:
            done, sent = await _with_retries(http, config, candidate, req, deadline, waits, deltas)
        except _Failed as failed:
            requests += failed.sent
            last = failed.error
            failures.append(f"{candidate.name}: {failed.error}")
            if failed.error.final:
                break
            continue
        done.requests = requests + sent
        done.failures = failures
        done.waits = waits
        return done
    assert last is not None
    if len(failures) == 1:
        raise last
    raise LLMError(f"every model failed — {'; '.join(failures)}", final=last.final)


class _Failed(Exception):
    def __init__(self, error: LLMError, sent: int) -> None:
        self.error = error
        self.sent = sent


async def _with_retries(
    http: Post,
    config: LLMConfig,
    model: ModelConfig,
    req: Request,
    deadline: float,
    waits: list[float],
    deltas: Deltas | None = None,
) -> tuple[Completion, int]:
    stream = req.wants_stream(model)
    deltas = deltas if stream else None
    if model.is_mock:
        done = respond(req.body(model), model.name)
        if deltas is not None and not done.tool_calls:
            await replay(deltas, done.content)
        return done, 1
    body = orjson.dumps(req.body(model))
    attempts = config.retries + 1
    limit = config.max_response_bytes
    for n in range(attempts):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _Failed(
                LLMError("the step deadline passed before the model answered", final=True), n
            )
        timeout = min(model.timeout, remaining)
        started = time.perf_counter()
        try:
            if stream:
                done = await _stream_once(http, model, body, timeout, limit, deltas)
            else:
                done = await _once(http, model, body, timeout, limit, timeout >= remaining)
        except LLMError as exc:
            if deltas is not None:
                deltas.attempt_failed()
            if not exc.retryable or n == attempts - 1:
                if exc.retryable and attempts > 1:
                    exc = LLMError(f"{exc} (gave up after {attempts} attempts)")
                raise _Failed(exc, n + 1) from None
            delay = retry_delay(config, n, exc.retry_after)
            if time.monotonic() + delay >= deadline:
                # not final: a fallback model may still answer in the time left
                raise _Failed(
                    LLMError(f"{exc} (no time left to retry before the step deadline)"), n + 1
                ) from None
            waits.append(round(delay, 6))
            await asyncio.sleep(delay)
            continue
        done.latency_ms = round((time.perf_counter() - started) * 1000, 3)
        done.model = model.name
        done.retries = n
        return done, n + 1
    raise AssertionError("unreachable")  # pragma: no cover


def _headers(model: ModelConfig) -> dict[str, str]:
    """The request headers for ``model``: one dict per model config, never changed (a
    reload makes new configs; the old ones' entries go when there are too many)."""
    found = _HEADERS.get(id(model))
    if found is None or found[0] is not model:
        auth = {"Authorization": f"Bearer {model.api_key}"} if model.api_key else {}
        json = {"Content-Type": "application/json", "Accept": "application/json"}
        found = (model, {**json, **auth, **dict(model.headers)})
        if len(_HEADERS) > 64:
            _HEADERS.clear()
        _HEADERS[id(model)] = found
    return found[1]


_HEADERS: dict[int, tuple[ModelConfig, dict[str, str]]] = {}  # by id(model)


async def _once(
    post: Post, model: ModelConfig, body: bytes, timeout: float, limit: int, last: bool = False
) -> Completion:
    """One non-streaming attempt, bounded whole (no read timer re-armed per chunk:
    :func:`tmy.llm.deadline.attempt`) — by the caller's deadline when ``last`` (see
    :func:`complete`)."""
    url = f"{model.base_url}/chat/completions"
    try:
        async with (
            attempt(None if last else timeout),
            post(url, body, _headers(model), timeout, False) as resp,
        ):
            raw = await _read(resp, model, limit)
    except PostFailed as exc:
        raise failure(model, url, timeout, exc) from None
    except TimeoutError:  # attempt()'s
        raise timed_out(model, timeout) from None
    if resp.status >= 400:
        raise status_error(model, resp.status, resp.headers, _decode(raw))
    return parse_completion(parse_json(raw))


async def _stream_once(
    post: Post,
    model: ModelConfig,
    body: bytes,
    timeout: float,
    limit: int,
    deltas: Deltas | None = None,
) -> Completion:
    url = f"{model.base_url}/chat/completions"
    acc = _Stream()
    headers = {**_headers(model), "Accept": "text/event-stream"}
    try:
        async with post(url, body, headers, timeout, True) as resp:
            if resp.status >= 400:
                raw = await _read(resp, model, limit)
                raise status_error(model, resp.status, resp.headers, _decode(raw))
            if "text/event-stream" not in resp.headers.get("content-type", ""):
                # the server ignored stream
                return parse_completion(parse_json(await _read(resp, model, limit)))
            await _read_events(resp, model, limit, acc, deltas)
    except PostFailed as exc:
        if exc.kind == TIMEOUT:
            what = f"the stream stalled after {acc.chunks} chunks" if acc.chunks else "timed out"
            raise LLMError(f"{model.describe()} {what} ({timeout:g} s)", retryable=True) from None
        if exc.kind != OTHER and acc.chunks:
            raise LLMError(
                f"the stream from {model.describe()} was cut mid-way after "
                f"{acc.chunks} chunks: {exc}",
                retryable=True,
            ) from None
        raise failure(model, url, timeout, exc) from None
    if not acc.done and not acc.finish_reason:
        raise LLMError(
            f"the stream from {model.describe()} was cut mid-way after {acc.chunks} "
            "chunks (no finish_reason, no [DONE])",
            retryable=True,
        )
    return acc.completion()


async def _read(resp: Response, model: ModelConfig, limit: int) -> bytes:
    """A whole decoded body, but never more than ``limit`` bytes of it."""
    plain = await resp.read_plain(limit)
    if plain is not None:
        return plain
    try:
        return await bodies.read_capped(resp, limit, lambda: _too_large(model, limit))
    except bodies.BadEncoding as exc:
        raise LLMError(f"{model.describe()} sent a response tmy cannot read: {exc}") from None


async def _read_events(
    resp: Response,
    model: ModelConfig,
    limit: int,
    acc: _Stream,
    deltas: Deltas | None = None,
) -> None:
    """Feed SSE lines to ``acc`` until ``[DONE]``, counting every decoded byte against ``limit``;
    each content delta goes to ``deltas`` as it comes (none once the turn calls a tool).

    Split here rather than with httpx's ``aiter_lines``: that one would buffer a
    line that never ends without bound.
    """
    pending = bytearray()
    shown = 0  # content parts handed to deltas so far
    try:
        async for chunk in bodies.decoded_chunks(resp, limit):
            pending += chunk
            if b"\n" not in chunk and b"\r" not in chunk:
                continue
            *lines, rest = _LINE_END.split(pending)
            pending = bytearray(rest)
            for line in lines:
                done = acc.feed(line.decode("utf-8", errors="replace"))
                if deltas is not None and len(acc.parts) > shown:
                    new, shown = acc.parts[shown:], len(acc.parts)
                    for piece in new if not acc.calls else ():
                        await deltas(piece)
                if done:
                    return
    except bodies.BodyTooLarge:
        raise _too_large(model, limit) from None
    except bodies.BadEncoding as exc:
        raise LLMError(f"{model.describe()} sent a response tmy cannot read: {exc}") from None
    if pending:
        acc.feed(pending.decode("utf-8", errors="replace"))


def _too_large(model: ModelConfig, limit: int) -> LLMError:
    return LLMError(
        f"{model.describe()} sent a response that is too large: more than {limit} bytes; "
        "stopped reading (llm.max_response_bytes)"
    )


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")
