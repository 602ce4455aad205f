"""What a chat-completions server sends back, parsed: answers, SSE chunks, usage, errors.

Kept apart from the transport (:mod:`tmy.llm.client`) because the mock builds
the same :class:`Completion` objects without any network, and because the
parsing rules are where providers differ: cached tokens arrive as OpenAI's
``usage.prompt_tokens_details.cached_tokens`` or DeepSeek's
``usage.prompt_cache_hit_tokens``; content may be a string or a list of parts;
a stream's tool calls arrive as deltas by index; errors may come as a JSON
``error`` object, a plain text body, or an ``error`` chunk mid-stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from tmy.errors import ExecutorError
from tmy.redact import redact

RAW_PREVIEW = 500


class LLMError(ExecutorError):
    """A model call failed; the message is what ``STEP_ERROR`` shows."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        retry_after: float | None = None,
        final: bool = False,
    ) -> None:
        super().__init__(redact(message))  # a provider may echo the API key it was sent
        self.retryable = retryable
        self.retry_after = retry_after
        self.final = final  # no fallback either (the deadline passed, the budget is spent)


@dataclass(slots=True)
class Usage:
    """Token counts of one or more calls."""

    prompt: int = 0
    completion: int = 0
    cached: int = 0

    @property
    def total(self) -> int:
        """Tokens that count against budgets: prompt + completion (cached ones included)."""
        return self.prompt + self.completion

    def add(self, other: Usage) -> None:
        """Sum another call into this one (a tool loop's usage adds up)."""
        self.prompt += other.prompt
        self.completion += other.completion
        self.cached += other.cached

    @classmethod
    def from_api(cls, data: Any) -> Usage:
        """Counts from ``usage``; cached tokens from OpenAI's or DeepSeek's field."""
        if not isinstance(data, dict):
            return cls()
        details = data.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        if not cached:
            cached = data.get("prompt_cache_hit_tokens") or 0
        return cls(
            _int(data.get("prompt_tokens")), _int(data.get("completion_tokens")), _int(cached)
        )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(slots=True)
class Completion:
    """A model's answer plus what it took to get it."""

    content: str
    tool_calls: list[dict[str, Any]]  # [{"id", "name", "arguments": str}]
    usage: Usage
    finish_reason: str = ""
    model: str = ""  # the configured name of the model that answered
    requests: int = 1  # HTTP requests sent, retries and fallbacks included
    retries: int = 0
    latency_ms: float = 0.0
    failures: list[str] = field(default_factory=list)  # models that failed before this one
    waits: list[float] = field(default_factory=list)  # seconds slept before each retry


def truncate(text: str, limit: int = RAW_PREVIEW) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was (for error messages)."""
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


def parse_json(raw: bytes) -> Any:
    """The body as JSON, or the seed-002 error quoting the start of what came instead."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        text = raw.decode("utf-8", errors="replace")
        raise LLMError(
            f"Failed to parse API response as JSON. Raw response: {truncate(text)}"
        ) from None


def error_message(text: str) -> str:
    """The human part of an error body: ``error.message`` when JSON, else the text."""
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return truncate(text.strip(), 300) or "(empty body)"
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    if isinstance(error, str):
        return error
    return truncate(text.strip(), 300)


def parse_completion(data: Any) -> Completion:
    """A non-streamed chat-completions body → Completion (LLMError when it is not one)."""
    if not isinstance(data, dict):
        raise LLMError(f"unexpected API response (not an object): {truncate(repr(data))}")
    choices = data.get("choices")
    if not choices:
        if data.get("error"):
            raise LLMError(
                f"the provider returned an error: {error_message(orjson.dumps(data).decode())}"
            )
        raise LLMError(f"the API response has no choices: {truncate(orjson.dumps(data).decode())}")
    try:
        choice = choices[0] if isinstance(choices, list) and isinstance(choices[0], dict) else None
        message = choice.get("message") if choice is not None else None
        if not isinstance(message, dict):
            raise TypeError("choices[0].message is not an object")
        calls = [_call(call) for call in message.get("tool_calls") or []]
        return Completion(
            content=_text(message.get("content")),
            tool_calls=calls,
            usage=Usage.from_api(data.get("usage")),
            finish_reason=str(choice.get("finish_reason") or ""),
        )
    except (TypeError, AttributeError, KeyError, ValueError) as exc:
        raise _shape_error(exc, data) from None


def _shape_error(exc: Exception, data: Any) -> LLMError:
    """A body that is JSON but not a chat completion: say so, quoting it (not a TypeError)."""
    raw = orjson.dumps(data, default=str).decode()
    return LLMError(f"unexpected API response shape ({exc}): {truncate(raw)}")


def _call(call: Any) -> dict[str, Any]:
    """One ``tool_calls`` entry as {id, name, arguments: str}."""
    if not isinstance(call, dict) or not isinstance(call.get("function") or {}, dict):
        raise TypeError("a tool call is not an object with a function")
    fn = call.get("function") or {}
    arguments = fn.get("arguments") or "{}"
    return {
        "id": str(call.get("id") or ""),
        "name": str(fn.get("name") or ""),
        "arguments": arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode(),
    }


def _text(content: Any) -> str:
    """Message content as text (some servers send a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


class Stream:
    """Accumulates SSE chunks: content deltas, tool-call deltas by index, the usage chunk."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage = Usage()
        self.finish_reason = ""
        self.chunks = 0
        self.done = False

    def feed(self, line: str) -> bool:
        """Take one line; True once ``[DONE]`` arrived."""
        line = line.strip()
        if not line.startswith("data:"):
            return False  # blank keep-alives, comments, event: lines
        payload = line[5:].strip()
        if payload == "[DONE]":
            self.done = True
            return True
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise LLMError(
                f"Failed to parse API response as JSON. Raw response: {truncate(payload)}"
            ) from None
        self.chunks += 1
        if not isinstance(chunk, dict):
            return False
        if chunk.get("error"):
            raise LLMError(
                f"the provider sent an error mid-stream: "
                f"{error_message(orjson.dumps(chunk).decode())}"
            )
        try:
            self._take(chunk)
        except (TypeError, AttributeError, KeyError, ValueError) as exc:
            raise _shape_error(exc, chunk) from None
        return False

    def _take(self, chunk: dict[str, Any]) -> None:
        if chunk.get("usage"):
            self.usage = Usage.from_api(chunk["usage"])
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.parts.append(_text(delta["content"]))
            for tc in delta.get("tool_calls") or []:
                slot = self.calls.setdefault(
                    int(tc.get("index", len(self.calls))), {"id": "", "name": "", "arguments": ""}
                )
                slot["id"] = str(tc.get("id") or slot["id"])
                fn = tc.get("function") or {}
                slot["name"] += str(fn.get("name") or "")
                slot["arguments"] += str(fn.get("arguments") or "")
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])

    def completion(self) -> Completion:
        """The accumulated stream as one completion."""
        calls = [self.calls[i] for i in sorted(self.calls)]
        for call in calls:
            call["arguments"] = call["arguments"] or "{}"
        return Completion("".join(self.parts), calls, self.usage, self.finish_reason)
