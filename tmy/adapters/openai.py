"""An OpenAI-compatible facade: any OpenAI client or chat UI talks to the bot's rules.

Routes on the daemon's one HTTP listener:

* ``POST /v1/chat/completions`` — the **last user message** is the chat text
  (a string, or an array of content parts whose ``text`` parts are joined by
  line breaks). Earlier messages, system prompts and sampling options are
  ignored: the bot keeps its own conversation history per user and chat, as
  on every other platform. The answer comes back as a ``chat.completion``, or
  with ``"stream": true`` as ``chat.completion.chunk`` server-sent events
  ending in ``data: [DONE]``.
* ``GET /v1/models`` (and ``/v1/models/tmy``) — the one model, ``tmy``.

Who is speaking (:meth:`OpenAIFacade.identify`), first match wins:

1. the ``adapters.openai.user_header`` (default ``X-OpenWebUI-User-Id``) when
   ``user_header_trusted`` is true — a proxy the operator runs sets it, so
   neither a body ``user`` nor ``X-Tmy-User`` can override it;
2. the ``X-Tmy-User`` header, then the body's ``user`` field;
3. the ``user_header`` when it is not marked trusted;
4. with API keys: the key itself — ``key:`` and 12 hex digits of its SHA-256,
   so each key is its own identity and the id shows nothing of the secret;
5. without keys: a fresh ``anonymous-ephemeral-…`` id for this one request, so
   clients that send no user (litellm for non-OpenAI model names, the ``llm``
   CLI) never share sessions, history or memory — nothing is recalled.

The response says which applied in ``X-Tmy-Identity`` (``trusted-header``,
``user``, ``header``, ``api-key``, ``anonymous-ephemeral``). ``X-Tmy-Chat``
names a shared chat; without it the message is in the user's private chat.
``PLATFORM`` is ``openai``, and every message counts as addressed to the bot
(``mentions_bot``), so ``mention: true`` rules answer here.

The request's ``model`` is echoed back whatever it names (a UI may insist on
its own model name); ``tools``, ``tool_choice``, ``functions`` and
``response_format`` are ignored (logged at debug once). A message that matches
no rule is a normal completion whose content is ``adapters.openai.unmatched_reply``
(never empty: agent frameworks retry an empty answer until they give up); a run
that failed inside a rule is a normal completion
with the rule's ``on_error`` text, exactly what a chat user would see — the
error itself stays in the log under ``tmy.trace_id``. Requests the bot cannot
take (bad JSON, no user message, too long, a bad id, a missing or wrong API
key) are OpenAI-shaped errors ``{"error": {"message", "type", "param",
"code"}}`` with a fitting status, so clients raise their usual exceptions.

With API keys configured (``adapters.http.api_keys`` / ``TMY_HTTP_API_KEYS``)
every route here needs ``Authorization: Bearer <key>``, checked by the
listener's own :func:`~tmy.adapters.http.api_key_problem`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from tmy.adapters.base import AdapterHealth, Handler
from tmy.adapters.http import _dumps, api_key_problem, bearer
from tmy.config import Settings
from tmy.errors import AdapterError
from tmy.logs import get_logger
from tmy.message import Message, Reply, Target, id_problem

log = get_logger("tmy.adapter.openai")

MODEL_ID = "tmy"  # the one model /v1/models lists; any requested name is accepted and echoed
DEFAULT_USER = "anonymous"  # USER_NAME of an anonymous-ephemeral request (its USER is unique)
STREAM_KEEPALIVE = 15.0  # seconds between SSE comments while a streamed run is still working
USAGE_KEYS = ("llm", "when_llm", "while_llm")  # StepRecord.extra entries that carry LLM tokens
DEFAULT_USER_HEADER = "X-OpenWebUI-User-Id"  # Open WebUI's forwarded user id
DEFAULT_UNMATCHED = "No rule matched this message."
IDENTITY_HEADER = "X-Tmy-Identity"  # how USER was chosen (see the module docstring)
IGNORED_FIELDS = ("tools", "tool_choice", "functions", "function_call", "response_format")


def key_identity(key: str) -> str:
    """A stable, non-secret user id for an API key: ``key:`` + 12 hex digits of its SHA-256."""
    digest = hashlib.sha256(key.encode(errors="surrogateescape")).hexdigest()
    return f"key:{digest[:12]}"


class OpenAIError(Exception):
    """A request the facade refuses, already in OpenAI's error vocabulary."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param

    def response(self) -> web.Response:
        body = {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return web.json_response(body, status=self.status, headers=headers, dumps=_dumps)


class OpenAIFacade:
    """``/v1/chat/completions`` and ``/v1/models`` in front of ``Engine.handle``."""

    name = "openai"

    def __init__(
        self,
        api_keys: Sequence[str] = (),
        max_message_chars: int = 20_000,
        max_id_chars: int = 256,
        *,
        user_header: str = DEFAULT_USER_HEADER,
        user_header_trusted: bool = False,
        unmatched_reply: str = DEFAULT_UNMATCHED,
    ) -> None:
        self.api_keys = tuple(api_keys)
        self.max_chars = max_message_chars
        self.max_id_chars = max_id_chars
        self.user_header = user_header
        self.user_header_trusted = user_header_trusted and bool(user_header)
        self.unmatched_reply = unmatched_reply
        self._ignored_logged: set[str] = set()
        self.created = int(time.time())  # the model's "created" stamp
        self._handle: Handler | None = None
        self._health = AdapterHealth("stopped")

    # -- the adapter contract -------------------------------------------------------------------

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/chat/completions", self._completions),
            web.get("/v1/models", self._models),
            web.get("/v1/models/{model}", self._model),
        ]

    async def start(self, handle: Handler) -> None:
        self._handle = handle
        self._health.set("connected")

    async def stop(self) -> None:
        self._handle = None
        self._health.set("stopped")

    async def send(self, target: Target, text: str) -> None:
        raise AdapterError(
            "openai: the OpenAI facade answers requests; it cannot send on its own initiative"
        )

    def health(self) -> dict[str, Any]:
        return self._health.as_dict()

    # -- routes ---------------------------------------------------------------------------------

    def _check_key(self, request: web.Request) -> None:
        problem = api_key_problem(request, self.api_keys)
        if problem is not None:
            log.debug("openai.refused", reason=problem, peer=request.remote)
            raise OpenAIError(401, problem, code="invalid_api_key")

    async def _models(self, request: web.Request) -> web.Response:
        try:
            self._check_key(request)
        except OpenAIError as exc:
            return exc.response()
        return web.json_response({"object": "list", "data": [self._model_card()]})

    async def _model(self, request: web.Request) -> web.Response:
        try:
            self._check_key(request)
            if request.match_info["model"] != MODEL_ID:
                raise OpenAIError(
                    404,
                    f"the model {request.match_info['model']!r} does not exist; "
                    f"this server has one model, {MODEL_ID!r}",
                    code="model_not_found",
                    param="model",
                )
        except OpenAIError as exc:
            return exc.response()
        return web.json_response(self._model_card())

    def _model_card(self) -> dict[str, Any]:
        return {"id": MODEL_ID, "object": "model", "created": self.created, "owned_by": "tmy"}

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        try:
            self._check_key(request)
            body = await _json_body(request)
            message, model, stream, include_usage, how = self._parse(request, body)
            handle = self._handle
            if handle is None:
                raise OpenAIError(
                    503, "the bot is not accepting messages (starting or stopping)",
                    type="server_error", code="service_unavailable",
                )  # fmt: skip
        except OpenAIError as exc:
            return exc.response()
        self._health.event()
        if stream:
            return await self._stream(request, handle, message, model, include_usage, how)
        reply = await handle(message)
        try:
            _refusal(reply)
        except OpenAIError as exc:
            return exc.response()
        content = self._content(reply)
        completion = {
            "id": f"chatcmpl-{reply.trace_id}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": usage(reply),
            "system_fingerprint": None,
            "tmy": _extension(reply),
        }
        headers = {"x-request-id": reply.trace_id, IDENTITY_HEADER: how}
        return web.json_response(completion, headers=headers, dumps=_dumps)

    def _content(self, reply: Reply) -> str:
        """The answer's text; ``unmatched_reply`` when no rule ran and nothing was said."""
        if reply.rule is None and reply.error is None and not reply.text:
            return self.unmatched_reply
        return reply.text

    async def _stream(
        self,
        request: web.Request,
        handle: Handler,
        message: Message,
        model: str,
        include_usage: bool,
        how: str,
    ) -> web.StreamResponse:
        """Server-sent events: headers at once, comments while the run works, then the answer.

        The engine answers a message whole, so the content arrives as one chunk
        after the role chunk; the keep-alive comments stop proxies and UIs from
        giving up on a long LLM run. A client that goes away does not cancel
        the run: it finishes (and saves what it saves) like any other.
        """
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",  # nginx: pass events through unbuffered
                IDENTITY_HEADER: how,
            }
        )
        await response.prepare(request)
        task = asyncio.ensure_future(handle(message))
        gone = False
        try:
            while not task.done():
                done, _ = await asyncio.wait({task}, timeout=STREAM_KEEPALIVE)
                if not done and not gone:
                    gone = not await _write(response, b": keep-alive\n\n")
        except asyncio.CancelledError:
            task.cancel()  # the listener is shutting down past its grace period
            raise
        reply = task.result()
        if gone:
            log.debug("openai.client_gone", trace_id=reply.trace_id)
            return response
        try:
            _refusal(reply)
        except OpenAIError as exc:
            error = {"message": exc.message, "type": exc.type, "param": exc.param, "code": exc.code}
            await _write(response, _event({"error": error}))
            return response
        base = {
            "id": f"chatcmpl-{reply.trace_id}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": None,
        }
        if include_usage:
            base["usage"] = None  # OpenAI's shape: null on every chunk but the last

        def chunk(delta: dict[str, Any], finish: str | None, **extra: Any) -> bytes:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return _event({**base, "choices": [choice], **extra})

        events = [chunk({"role": "assistant", "content": ""}, None)]
        content = self._content(reply)
        if content:
            events.append(chunk({"content": content}, None))
        events.append(chunk({}, "stop", tmy=_extension(reply)))
        if include_usage:
            events.append(_event({**base, "choices": [], "usage": usage(reply)}))
        events.append(b"data: [DONE]\n\n")
        if await _write(response, b"".join(events)):
            try:
                await response.write_eof()
            except (ConnectionError, RuntimeError):
                pass  # the client left after the last event: nothing more to say
        return response

    def identify(self, request: web.Request, body: dict[str, Any]) -> tuple[Any, str]:
        """(USER, how it was chosen) — the order is the module docstring's."""
        headers = request.headers
        if self.user_header_trusted:
            trusted = headers.get(self.user_header)
            if trusted:
                return trusted, "trusted-header"
        user: Any = headers.get("X-Tmy-User") or body.get("user")
        if isinstance(user, int) and not isinstance(user, bool):
            user = str(user)  # numeric ids, as several platforms send them
        if user is not None and user != "":
            return user, "user"
        if self.user_header and not self.user_header_trusted:
            forwarded = headers.get(self.user_header)
            if forwarded:
                return forwarded, "header"
        if self.api_keys:
            token = bearer(request)
            if token:  # already checked against api_keys by _check_key
                return key_identity(token), "api-key"
        return f"anonymous-ephemeral-{secrets.token_hex(8)}", "anonymous-ephemeral"

    def _log_ignored(self, body: dict[str, Any]) -> None:
        """Say once (at debug) that a request field the bot cannot honour was ignored."""
        for name in IGNORED_FIELDS:
            if body.get(name) is not None and name not in self._ignored_logged:
                self._ignored_logged.add(name)
                log.debug("openai.ignored", field=name, why="the rules decide the answer")

    def _parse(
        self, request: web.Request, body: dict[str, Any]
    ) -> tuple[Message, str, bool, bool, str]:
        """(message, model, stream, include_usage, identity source) from a request."""
        model = body.get("model")
        if model is None:
            model = MODEL_ID
        if not isinstance(model, str):
            raise OpenAIError(400, "'model' must be a string", param="model")
        stream = body.get("stream")
        if stream is not None and not isinstance(stream, bool):
            raise OpenAIError(400, "'stream' must be true or false", param="stream")
        options = body.get("stream_options")
        if options is not None and not isinstance(options, dict):
            raise OpenAIError(400, "'stream_options' must be an object", param="stream_options")
        include_usage = bool(stream and options and options.get("include_usage") is True)
        last = _last_user_message(body.get("messages"))
        text = _content_text(last.get("content"))
        if len(text) > self.max_chars:
            raise OpenAIError(
                400,
                f"message too long: {len(text)} characters (limit {self.max_chars})",
                code="context_length_exceeded",
                param="messages",
            )
        headers = request.headers
        self._log_ignored(body)
        user, how = self.identify(request, body)
        user_name = last.get("name") or unquote(headers.get("X-OpenWebUI-User-Name", ""))
        if not user_name:
            user_name = DEFAULT_USER if how == "anonymous-ephemeral" else user
        fields = {
            "user": user,
            "chat": headers.get("X-Tmy-Chat", ""),
            "user_name": user_name,
        }
        for key, value in fields.items():
            problem = id_problem(key, value, self.max_id_chars)
            if problem is not None:
                param = {"user": "user", "user_name": "messages"}.get(key)
                raise OpenAIError(400, problem, param=param, code="invalid_id")
        message = Message(
            text,
            platform=self.name,
            mentions_bot=True,  # a request to the API is always addressed to the bot
            raw=body,
            ephemeral=how == "anonymous-ephemeral",
            **fields,
        )
        return message, model, bool(stream), include_usage, how


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body: Any = await request.json()
    except RecursionError:
        raise OpenAIError(400, "the JSON body is nested too deeply") from None
    except web.HTTPRequestEntityTooLarge as exc:
        raise OpenAIError(413, exc.text or "the request body is too large") from None
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
        raise OpenAIError(
            400, "the body must be a JSON object (could not parse it as JSON)"
        ) from None
    if not isinstance(body, dict):
        raise OpenAIError(400, "the body must be a JSON object with a 'messages' array")
    return body


def _last_user_message(messages: Any) -> dict[str, Any]:
    if not isinstance(messages, list) or not messages:
        raise OpenAIError(
            400, "'messages' is required and must be a non-empty array", param="messages"
        )
    for index, item in enumerate(messages):
        if not isinstance(item, dict) or not isinstance(item.get("role"), str):
            raise OpenAIError(
                400,
                f"messages[{index}] must be an object with a string 'role'",
                param=f"messages[{index}]",
            )
    for item in reversed(messages):
        if item["role"] == "user":
            return item
    raise OpenAIError(400, "'messages' has no message with role 'user'", param="messages")


def _content_text(content: Any) -> str:
    """A string, or the ``text`` parts of a content-part array joined by line breaks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for index, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise OpenAIError(
                    400,
                    f"content part {index} of the last user message must be an object "
                    "with a 'type'",
                    param="messages",
                )
            if part["type"] == "text":
                if not isinstance(part.get("text"), str):
                    raise OpenAIError(
                        400, f"content part {index} has no string 'text'", param="messages"
                    )
                texts.append(part["text"])
        if texts:
            return "\n".join(texts)
        raise OpenAIError(
            400,
            "the last user message has no text part (the bot answers text only)",
            param="messages",
        )
    raise OpenAIError(
        400,
        "the last user message's 'content' must be a string or an array of content parts",
        param="messages",
    )


def _refusal(reply: Reply) -> None:
    """Raise for a message the engine would not run (no rule, an error, nothing to say).

    A rule's own failure is not one: it has a rule and its ``on_error`` text.
    The engine's last-resort reply (a bug in tmy, not in the request) is a 500
    that names only the trace id; other refusals name what was wrong.
    """
    if reply.rule is not None or reply.error is None:
        return
    if reply.text:
        raise OpenAIError(
            500,
            f"internal error (trace id {reply.trace_id}; the daemon's log has the detail)",
            type="server_error",
        )
    raise OpenAIError(400, reply.error)


def _extension(reply: Reply) -> dict[str, Any]:
    """tmy's own fields (clients ignore unknown keys): which rule answered, and the trace."""
    return {"rule": reply.rule, "trace_id": reply.trace_id, "failed": reply.error is not None}


def usage(reply: Reply) -> dict[str, Any]:
    """OpenAI's ``usage`` from the LLM token counts the run's steps recorded (else zeros)."""
    prompt = completion = cached = 0
    for step in reply.steps:
        for key in USAGE_KEYS:
            stats = step.extra.get(key)
            for entry in stats if isinstance(stats, list) else [stats]:
                if isinstance(entry, dict):
                    prompt += _count(entry.get("prompt_tokens"))
                    completion += _count(entry.get("completion_tokens"))
                    cached += _count(entry.get("cached_tokens"))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _event(data: dict[str, Any]) -> bytes:
    return f"data: {_dumps(data)}\n\n".encode()


async def _write(response: web.StreamResponse, data: bytes) -> bool:
    """Write to a streamed response; False when the client has gone away."""
    try:
        await response.write(data)
    except (ConnectionError, RuntimeError):  # reset by peer; "transport is closing"
        return False
    return True


def from_settings(settings: Settings) -> OpenAIFacade | None:
    """The facade rides on the HTTP listener: enabled whenever that is."""
    if not settings.http_enabled:
        return None
    section = settings.adapters.get("openai") or {}
    return OpenAIFacade(
        api_keys=settings.http_api_keys,
        max_message_chars=settings.max_message_chars,
        max_id_chars=settings.max_id_chars,
        user_header=section.get("user_header", DEFAULT_USER_HEADER),
        user_header_trusted=bool(section.get("user_header_trusted", False)),
        unmatched_reply=section.get("unmatched_reply", DEFAULT_UNMATCHED),
    )
