"""OpenAI's wire shapes: reading a chat-completions request, writing its answer and errors.

A request the facade refuses is an :class:`OpenAIError`, already in OpenAI's
vocabulary (``{"error": {"message", "type", "param", "code"}}`` with a fitting
status), so clients raise their usual exceptions.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from tmy.adapters.http import dumps, picture
from tmy.adapters.http.api import json_of
from tmy.adapters.http.api import key_identity as key_identity  # its old home: re-exported
from tmy.errors import TmyError
from tmy.message import Reply

if TYPE_CHECKING:  # deferred: aiohttp is ~120 ms of every CLI start
    from aiohttp import web

USAGE_KEYS = ("llm", "when_llm", "while_llm")  # StepRecord.extra entries that carry LLM tokens


class OpenAIError(TmyError):
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
        from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

        body = {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return web.json_response(body, status=self.status, headers=headers, dumps=dumps)


async def json_body(request: web.Request) -> dict[str, Any]:
    from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

    try:
        body: Any = await json_of(request)
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


def last_user_message(messages: Any) -> dict[str, Any]:
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


def read_content(content: Any) -> tuple[str, list[str]]:
    """(text, picture URLs) of the last user message: a string, or content parts whose
    ``text`` parts are joined by line breaks and whose ``image_url`` parts (http(s) or
    ``data:`` URLs) are the pictures. Pictures without text read as ``[image]`` each
    (what the rules match, as on the chat platforms)."""
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        raise OpenAIError(
            400,
            "the last user message's 'content' must be a string or an array of content parts",
            param="messages",
        )
    texts: list[str] = []
    pictures: list[str] = []
    for index, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise OpenAIError(
                400,
                f"content part {index} of the last user message must be an object with a 'type'",
                param="messages",
            )
        if part["type"] == "text":
            if not isinstance(part.get("text"), str):
                raise OpenAIError(
                    400, f"content part {index} has no string 'text'", param="messages"
                )
            texts.append(part["text"])
        elif part["type"] == "image_url":
            pictures.append(_image_url(index, part.get("image_url")))
    if texts:
        return "\n".join(texts), pictures
    if pictures:
        return " ".join("[image]" for _ in pictures), pictures
    raise OpenAIError(
        400,
        "the last user message has no text or image part (the bot answers text and pictures)",
        param="messages",
    )


def _image_url(index: int, value: Any) -> str:
    """The URL of an ``image_url`` part (``{"url": …}``, or the URL itself as some send it)."""
    url = value.get("url") if isinstance(value, dict) else value
    if picture(url) is None:
        raise OpenAIError(
            400,
            f"content part {index}: 'image_url.url' must be an http(s) or data: URL",
            param="messages",
        )
    return url


def refusal(reply: Reply) -> None:
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


def extension(reply: Reply) -> dict[str, Any]:
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


def content(reply: Reply, unmatched_reply: str) -> str:
    """The answer's text; ``unmatched_reply`` when no rule ran and nothing was said."""
    if reply.rule is None and reply.error is None and not reply.text:
        return unmatched_reply
    return reply.text


def completion(reply: Reply, model: str, text: str) -> dict[str, Any]:
    """The ``chat.completion`` object answering a request whole (not streamed)."""
    return {
        "id": f"chatcmpl-{reply.trace_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": usage(reply),
        "system_fingerprint": None,
        "tmy": extension(reply),
    }
