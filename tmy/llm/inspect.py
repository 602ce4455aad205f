"""The ``ctx`` inspector: what the next LLM request would send, without sending it.

``ctx [QUERY]`` (seed 003's ``.ai ctx``) shows, for the sender in this chat, the
request the next message would make: system prompt, memory recalled for the
question, the knowledge base's passages (and their scores), the history, the
tools offered — exactly as they would be sent.

* ``QUERY`` is that next message. When it reaches no LLM request of its own
  (no trigger matches it, or its rule asks no model) it is taken as a message
  to the rule of the user's last LLM message in this chat, as a follow-up would
  be — so ``.tmy ctx what is my cat called`` shows the memory recalled for
  those words in the conversation the user is in.
* Without ``QUERY`` the user's last message that reached an LLM step in this
  chat (:func:`tmy.llm.history.last_message`) is inspected again.

The message goes through a second engine on the real rules over an overlay of
the store (:class:`tmy.store.overlay.OverlayStore`): trigger match, the steps
before the first model request, prompt building, history, memory recall, tools.
The first request is captured instead of sent, and the run stops there. So
**nothing changes**: no history turn, no usage counted, no memory use counts, no
cooldown, and whatever the steps before the request write stays in the overlay,
which is dropped. A history that is full is shown as it stands, with a note that
the next real request folds it first (:mod:`tmy.llm.fold`).

The stable prefix signature (sha256 of the system and few-shot messages plus
the tools) must stay the same across turns and users: if it changes, something
dynamic leaked into the system prompt and the provider's prompt cache misses.

:func:`inspect` runs on the app it is given (the ``ctx`` command's
``Invocation.app``); :func:`render` is the text the command prints.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tmy.engine.core import Engine
from tmy.llm import history, knowledge
from tmy.llm.exchange import CAPTURE
from tmy.llm.runtime import STATE_KEY, runtime_of
from tmy.llm.usage import today, usage_of
from tmy.message import Message, Reply
from tmy.redact import safe_url
from tmy.rulebook.triggers import Match
from tmy.store.overlay import OverlayStore

if TYPE_CHECKING:
    from tmy.types import AppLike

NO_LAST = "(no earlier message of yours in this chat reached an LLM step: give a QUERY)"
PREVIEW = 300  # characters of one message in the chat rendering


def prefix_signature(body: dict[str, Any], prefix_len: int) -> str:
    """sha256 over the stable prefix: the first ``prefix_len`` messages and the tools."""
    stable = {"messages": body.get("messages", [])[:prefix_len], "tools": body.get("tools")}
    raw = json.dumps(stable, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


@dataclass
class Inspection:
    """What one message would send: the run's reply, its first request (or None), the usage.

    ``via``: how the message was chosen — ``query`` (routed as sent), ``last`` (the
    user's last LLM message, routed again) or ``follow-up`` (given to the rule of the
    last LLM message, as a follow-up); ``fold_pending``: the history is full and the
    next real request folds it first.
    """

    message: Message
    reply: Reply
    request: dict[str, Any] | None
    used: dict[str, Any] = field(default_factory=dict)
    memory_lines: list[str] = field(default_factory=list)
    knowledge_lines: list[str] = field(default_factory=list)
    via: str = "query"
    fold_pending: bool = False
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (``Result.data``)."""
        out: dict[str, Any] = {
            "rule": self.reply.rule,
            "error": self.reply.error,
            "user": self.message.user,
            "text": self.message.text,
            "via": self.via,
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
                "fold_pending": self.fold_pending,
                "tools": tool_names(body),
                "body": body,
            }
            out["tokens_today"] = self.used.get("user") or {}
            out["memory"] = self._step_extra("memory")
            out["knowledge"] = self._step_extra("knowledge")
        return out

    def _step_extra(self, key: str) -> Any:
        assert self.request is not None
        for record in self.reply.steps:
            if record.uri == self.request["uri"] and key in record.extra:
                return record.extra[key]
        return None


def tool_names(body: dict[str, Any]) -> list[str]:
    """The names of the tools a request offers (native ``tools``)."""
    return [t.get("function", {}).get("name", "?") for t in body.get("tools") or []]


def _url(model: Any) -> str:
    return model.base_url if model.is_mock else f"{safe_url(model.base_url)}/chat/completions"


@asynccontextmanager
async def dry_engine(engine: Engine) -> AsyncIterator[Engine]:
    """A second engine on ``engine``'s rules whose writes go to an overlay, then vanish."""
    real = engine.services
    overlay = OverlayStore(real.store)
    rt = runtime_of(real)
    services = real.derive(overlay, state={STATE_KEY: rt.derive})
    try:
        # the chat switch too: in a chat switched off nothing would be sent, so ctx says so
        yield Engine(
            engine.rulebook,
            services,
            fixed_now=engine.fixed_now,
            dry_run=True,
            switch=engine.switch,
        )
    finally:
        await overlay.close()


async def _captured(run: Callable[[], Awaitable[Reply]]) -> tuple[Reply, dict[str, Any] | None]:
    captured: list[dict[str, Any]] = []
    token = CAPTURE.set(captured)
    try:
        reply = await run()
    finally:
        CAPTURE.reset(token)
    return reply, (captured[0] if captured else None)


async def inspect(app: AppLike, message: Message) -> Inspection:
    """The request the sender's next message (``message.text``; empty: their last one)
    would send, captured on a dry engine (see the module docstring)."""
    engine = app.engine
    last = await history.last_message(app.store, message, runtime_of(engine.services).tally)
    query = message.text.strip() if isinstance(message.text, str) else ""
    text = query or (last["text"] if last else "")
    if not text:
        return Inspection(message, Reply("", None, ""), None, via="last", note=NO_LAST)
    asked = dataclasses.replace(message, text=text)
    via = "query" if query else "last"
    async with dry_engine(engine) as dry:
        reply, request = await _captured(lambda: dry.handle(asked))
        rule = dry.rulebook.by_id.get(last["rule"]) if last else None
        follow = request is None and last and rule is not None and reply.rule != rule.id
        if follow and rule.filters.admits(asked):  # a follow-up to the last LLM conversation
            match = Match(rule, None, "", query or last["question"])
            trace_id = f"ctx-{secrets.token_hex(6)}"
            reply, request = await _captured(lambda: dry.run_rule(match, asked, trace_id, text))
            via = "follow-up"
    if request is None:
        return Inspection(asked, reply, None, via=via)
    used = await usage_of(app.store, message, today(engine.tz), runtime_of(engine.services).tally)
    seen = Inspection(asked, reply, request, used, via=via)
    seen.fold_pending = bool((seen._step_extra("llm") or {}).get("fold_pending"))
    recall = runtime_of(engine.services).recall
    details = seen._step_extra("memory")
    if recall is not None and details is not None:  # long-term memory: recalled, and why
        seen.memory_lines += recall.ctx_lines(details)
    found = seen._step_extra("knowledge")
    if found is not None:  # the knowledge base: the passages chosen, and why (scores)
        seen.knowledge_lines += knowledge.ctx_lines(found)
    return seen


def render(seen: Inspection, *, as_json: bool = False, compact: bool = False) -> str:
    """The text ``ctx`` prints: a ``#`` header and the request body (``as_json``: the body
    only; ``compact``: the chat rendering, each part in short)."""
    reply, request = seen.reply, seen.request
    if request is None:
        if seen.note:
            return seen.note
        if reply.rule is None:  # why, when it is more than no trigger (a filter, the switch)
            why = reply.reason if reply.reason and "no trigger" not in reply.reason else None
            return f"({why or 'no rule matched'}: nothing would be sent)"
        why = f" (the run stopped: {reply.error})" if reply.error else ""
        return f"(rule {reply.rule!r} sends no LLM request for this message{why})"
    body = request["body"]
    if as_json:
        return json.dumps(body, ensure_ascii=False, indent=2)
    lines = _header(seen)
    if compact:
        return "\n".join([*lines, *_parts(body)])
    return "\n".join([*lines, json.dumps(body, ensure_ascii=False, indent=2)])


def _header(seen: Inspection) -> list[str]:
    assert seen.request is not None
    request = seen.request
    body, model = request["body"], request["model"]
    mine = seen.used.get("user") or {}
    lines = [
        f"# rule {seen.reply.rule} · step {request['uri']} · scene {request['scene']}",
        f"# POST {_url(model)} · model {model.name} ({model.model})",
    ]
    if seen.via == "last":
        lines.append(f"# your last LLM message in this chat: {seen.message.text!r}")
    elif seen.via == "follow-up":
        lines.append(
            f"# {seen.message.text!r} as a follow-up to your last LLM conversation "
            f"(rule {seen.reply.rule})"
        )
    lines.append(
        f"# stable prefix: {request['prefix_len']} messages"
        f"{' + tools' if body.get('tools') else ''} (sha256 "
        f"{prefix_signature(body, request['prefix_len'])}), then "
        f"{request['history_len']} history messages, then the dynamic tail"
    )
    if seen.fold_pending:
        lines.append("# the history is full: the next request folds it into one summary pair first")
    names = tool_names(body)
    if names:
        lines.append(f"# tools offered: {', '.join(names)}")
    lines.append(
        f"# tokens today for {seen.message.user}: {mine.get('prompt', 0)} prompt + "
        f"{mine.get('completion', 0)} completion ({mine.get('cached', 0)} cached)"
    )
    return [*lines, *seen.knowledge_lines, *seen.memory_lines]


def _parts(body: dict[str, Any]) -> list[str]:
    """Each message in short, by role (the chat rendering)."""
    out = []
    for m in body.get("messages", []):
        raw = m.get("content")
        pictures = ""
        if isinstance(raw, list):  # content parts: the text, and how many pictures follow
            count = sum(1 for p in raw if isinstance(p, dict) and p.get("type") == "image_url")
            pictures = f" [+ {count} picture{'s' if count != 1 else ''}]" if count else ""
            raw = "\n".join(
                str(p.get("text") or "")
                for p in raw
                if isinstance(p, dict) and p.get("type") == "text"
            )
        content = str(raw or "")
        if len(content) > PREVIEW:
            content = content[:PREVIEW] + f"… ({len(content)} characters)"
        out.append(f"[{m.get('role')}] {content}{pictures}")
    return out
