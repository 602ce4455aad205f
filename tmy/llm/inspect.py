"""The ``ctx`` inspector: what exactly a message would send to the model, without sending it.

The message goes through the real engine — trigger match, the steps before the
first model request, prompt building, history, tools — and the first request
is captured instead of sent (seed 003's offline inspector). The run stops
there, so nothing is appended to the history and no tokens are counted. Steps
before the first LLM request do run (they produce its input); a rule whose
earlier steps have side effects has them here too.

The stable prefix signature (sha256 of the system and few-shot messages plus
the tools) must stay the same across turns and users: if it changes, something
dynamic leaked into the system prompt and the provider's prompt cache misses.
The history follows it and only grows at its end.

:func:`inspect` runs the message on the app it is given (the ``ctx`` command's
``Invocation.app``); :func:`render` is the text ``python run.py ctx`` prints.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tmy.llm.exchange import CAPTURE
from tmy.llm.runtime import runtime_of
from tmy.llm.usage import today, usage_of
from tmy.message import Message, Reply
from tmy.redact import safe_url

if TYPE_CHECKING:
    from tmy.types import AppLike


def prefix_signature(body: dict[str, Any], prefix_len: int) -> str:
    """sha256 over the stable prefix: the first ``prefix_len`` messages and the tools."""
    stable = {"messages": body.get("messages", [])[:prefix_len], "tools": body.get("tools")}
    raw = json.dumps(stable, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


@dataclass
class Inspection:
    """What one message would send: the run's reply, its first request (or None), the usage."""

    message: Message
    reply: Reply
    request: dict[str, Any] | None
    used: dict[str, Any] = field(default_factory=dict)
    memory_lines: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (``Result.data``)."""
        out: dict[str, Any] = {
            "rule": self.reply.rule,
            "error": self.reply.error,
            "user": self.message.user,
            "request": None,
        }
        if self.request is not None:
            request, model = self.request, self.request["model"]
            body = request["body"]
            out["request"] = {
                "uri": request["uri"],
                "scene": request["scene"],
                "model": model.name,
                "model_id": model.model,
                "url": _url(model),
                "prefix_len": request["prefix_len"],
                "history_len": request["history_len"],
                "prefix_sha256": prefix_signature(body, request["prefix_len"]),
                "body": body,
            }
            out["tokens_today"] = self.used.get("user") or {}
            out["memory"] = self._memory_details()
        return out

    def _memory_details(self) -> Any:
        assert self.request is not None
        for record in self.reply.steps:
            if record.uri == self.request["uri"] and "memory" in record.extra:
                return record.extra["memory"]
        return None


def _url(model: Any) -> str:
    return model.base_url if model.is_mock else f"{safe_url(model.base_url)}/chat/completions"


async def inspect(app: AppLike, message: Message) -> Inspection:
    """Run ``message`` on ``app``'s engine up to its first LLM request and capture that request."""
    engine = app.engine
    captured: list[dict[str, Any]] = []
    token = CAPTURE.set(captured)
    try:
        reply = await engine.handle(message)
    finally:
        CAPTURE.reset(token)
    if not captured:
        return Inspection(message, reply, None)
    request = captured[0]
    used = await usage_of(app.store, message, today(engine.tz))
    seen = Inspection(message, reply, request, used)
    recall = runtime_of(engine.services).recall
    if recall is not None:  # long-term memory: what the step recalled, and why
        for record in reply.steps:
            if record.uri == request["uri"] and "memory" in record.extra:
                seen.memory_lines += recall.ctx_lines(record.extra["memory"])
    return seen


def render(seen: Inspection, *, as_json: bool = False) -> str:
    """The text ``ctx`` prints: a ``#`` header and the request body (``as_json``: the body only)."""
    reply, request = seen.reply, seen.request
    if request is None:
        if reply.rule is None:
            return "(no rule matched: nothing would be sent)"
        why = f" (the run stopped: {reply.error})" if reply.error else ""
        return f"(rule {reply.rule!r} sends no LLM request for this message{why})"
    body, model = request["body"], request["model"]
    dumped = json.dumps(body, ensure_ascii=False, indent=2)
    if as_json:
        return dumped
    mine = seen.used.get("user") or {}
    lines = [
        f"# rule {reply.rule} · step {request['uri']} · scene {request['scene']}",
        f"# POST {_url(model)} · model {model.name} ({model.model})",
        f"# stable prefix: {request['prefix_len']} messages"
        f"{' + tools' if body.get('tools') else ''} (sha256 "
        f"{prefix_signature(body, request['prefix_len'])}), then "
        f"{request['history_len']} history messages, then the dynamic tail",
        f"# tokens today for {seen.message.user}: {mine.get('prompt', 0)} prompt + "
        f"{mine.get('completion', 0)} completion ({mine.get('cached', 0)} cached)",
        *seen.memory_lines,
        dumped,
    ]
    return "\n".join(lines)
