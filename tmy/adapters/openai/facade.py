"""An OpenAI-compatible facade: any OpenAI client or chat UI talks to the bot's rules.

Routes on the daemon's one HTTP listener:

* ``POST /v1/chat/completions`` — the **last user message** is the chat text
  (a string, or an array of content parts whose ``text`` parts are joined by
  line breaks; its ``image_url`` parts, http(s) or ``data:`` URLs, become the
  message's image attachments — ``IMAGES``, ``vision: true`` — and a message of
  pictures only reads ``[image]`` per picture). Earlier messages, system
  prompts and sampling options are ignored: the bot keeps its own conversation
  history per user and chat, as on every other platform. The answer comes back
  as a ``chat.completion``, or with ``"stream": true`` as ``chat.completion.chunk``
  server-sent events ending in ``data: [DONE]`` — the tokens of an LLM step with
  ``stream:`` as they come, the rest of the reply at the end.
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
``user``, ``header``, ``api-key``, ``anonymous-ephemeral``).

Admin rights come from a credential only. ``admins:`` judge the user of 1 (the
operator's proxy vouches for it) and of 4 (the key is the user); for 2 and 3, users a
key holder merely names, they judge the key's own identity instead
(:attr:`Message.admin_as`): only a key ``admins:`` lists (``openai:key:…``) is an
admin, whoever it speaks for. Without keys no one is (5 included).

``X-Tmy-Chat`` names a shared chat; without it the message is in the user's private chat.
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

The request and answer shapes are :mod:`tmy.adapters.openai.payload`, the
streamed answer :mod:`tmy.adapters.openai.stream`.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from tmy.adapters.base import AdapterHealth, Handler
from tmy.adapters.http import api_key_problem, bearer, dumps, picture
from tmy.adapters.http.api import admin_as, key_identity
from tmy.adapters.openai import payload
from tmy.adapters.openai.payload import OpenAIError
from tmy.adapters.openai.stream import IDENTITY_HEADER, stream
from tmy.config.adapters import OpenAIConfig
from tmy.errors import AdapterError
from tmy.logs import get_logger
from tmy.message import Message, Target, id_problem

if TYPE_CHECKING:  # deferred: aiohttp is ~120 ms of every CLI start
    from aiohttp import web

log = get_logger("tmy.adapter.openai")

MODEL_ID = "tmy"  # the one model /v1/models lists; any requested name is accepted and echoed
DEFAULT_USER = "anonymous"  # USER_NAME of an anonymous-ephemeral request (its USER is unique)
DEFAULT_USER_HEADER = OpenAIConfig().user_header  # Open WebUI's forwarded user id
DEFAULT_UNMATCHED = OpenAIConfig().unmatched_reply
VOUCHED = frozenset({"trusted-header", "api-key"})  # identities a credential proves (admins:)
IGNORED_FIELDS = ("tools", "tool_choice", "functions", "function_call", "response_format")


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
        from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

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
        from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

        try:
            self._check_key(request)
        except OpenAIError as exc:
            return exc.response()
        return web.json_response({"object": "list", "data": [self._model_card()]})

    async def _model(self, request: web.Request) -> web.Response:
        from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

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
        from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

        try:
            self._check_key(request)
            body = await payload.json_body(request)
            message, model, streamed, include_usage, how = self._parse(request, body)
            handle = self._handle
            if handle is None:
                raise OpenAIError(
                    503, "the bot is not accepting messages (starting or stopping)",
                    type="server_error", code="service_unavailable",
                )  # fmt: skip
        except OpenAIError as exc:
            return exc.response()
        self._health.event()
        if streamed:
            return await stream(
                request, handle, message, model=model, include_usage=include_usage, how=how,
                unmatched_reply=self.unmatched_reply,
            )  # fmt: skip
        reply = await handle(message)
        try:
            payload.refusal(reply)
        except OpenAIError as exc:
            return exc.response()
        answer = payload.completion(reply, model, payload.content(reply, self.unmatched_reply))
        headers = {"x-request-id": reply.trace_id, IDENTITY_HEADER: how}
        return web.json_response(answer, headers=headers, dumps=dumps)

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
        last = payload.last_user_message(body.get("messages"))
        text, pictures = payload.read_content(last.get("content"))
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
        message = Message.new(
            text,
            platform=self.name,
            mentions_bot=True,  # a request to the API is always addressed to the bot
            raw=body,
            ephemeral=how == "anonymous-ephemeral",
            # a named user is judged by its key (None: by itself — the proxy's or the key's own)
            admin_as=None if how in VOUCHED else admin_as(request, self.api_keys),
            attachments=tuple(a for a in map(picture, pictures) if a is not None),
            **fields,
        )
        return message, model, bool(stream), include_usage, how
