"""``explain``: why the bot answers (or does not answer) one message, step by step.

``python run.py explain TEXT [--user U --chat C --platform P --private/--group
--mention --admin] [--run] [--json]`` and the admin command ``.tmy explain
TEXT`` show, for one message:

* the first line: ``matched rule X …`` or ``no reply: <why, in one line>``;
* the text as sent and as the triggers see it (normalised, case-folded);
* every trigger that matched, filters ignored, best first — the order the
  engine walks — with why the winner won (priority, trigger kind, literal
  length, file order) and which filters refused the others;
* near misses: triggers whose literal is in the message but not where their
  kind needs it, case differences under ``case_sensitive``, rules refused by
  their filters, an open session, a chat switched off, a cooldown;
* each step: input, result, error, time, whether ``when:`` skipped it, and
  for HTTP and LLM steps what they would send; then the reply.

By default nothing changes: the message is run by a second engine that shares
the rules but reads the store through an :class:`~tmy.store.overlay.OverlayStore`
(writes stay in memory and are listed), and whose shared HTTP client sends
nothing: each request is recorded (credentials masked) and answered with a
placeholder; an LLM request is answered by the TESTONLY mock. ``--run`` sends
the message through the real engine instead and explains what it did.

The engine is reused, not re-implemented: matching is the trigger index's
(:meth:`~tmy.rulebook.index.TriggerIndex.explain_matches` walks the same order
as ``match``), refusals are the filters' own (``Filters.refusal``) and the
run is ``Engine.run_rule``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import unquote_plus

import httpx

from tmy import logs, redact
from tmy.bodies import ACCEPT_ENCODING
from tmy.cli import COMMANDS, jsonable
from tmy.engine.core import Engine, Services
from tmy.engine.variables import conversation_key
from tmy.errors import TmyError
from tmy.logs import preview
from tmy.message import Message, Reply, StepRecord, id_problem
from tmy.rulebook.triggers import KIND_RANK, Match, fold, normalise, strip_invisible
from tmy.store.base import MISSING
from tmy.store.overlay import OverlayStore
from tmy.values.compiled import Constant, Expression, to_text

__all__ = ["Explanation", "configure", "explain", "explain_text", "run"]

KINDS = {rank: kind for kind, rank in KIND_RANK.items()}
DRY_HOST = "tmy-dry-run.invalid"  # where the dry run points LLM models (never resolved)
PLACEHOLDER = {
    "dry_run": True,
    "note": "not sent: explain runs HTTP steps dry (use --run to send it)",
}
_NOISY_HEADERS = frozenset(
    {"host", "connection", "content-length", "accept-encoding", "user-agent"}
)
_SHOW = 300  # characters of a value in the text view
_SHOW_CHAT = 120  # … in the admin command's answer
_SHOW_LLM = 4000  # … of an LLM request body (the prompt is what one wants to read)


@dataclass
class Explanation:
    """Everything ``explain`` found out about one message (``as_dict`` is the --json form)."""

    text: str
    normalised: str = ""
    folded: str = ""
    message: dict[str, Any] = field(default_factory=dict)
    matched: str | None = None
    via: str | None = None  # "trigger" | "session"
    trigger: str | None = None
    reason: str | None = None
    candidates: list[dict[str, Any]] = field(default_factory=list)
    near_misses: list[dict[str, Any]] = field(default_factory=list)
    session: dict[str, Any] | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    writes: dict[str, Any] | None = None
    reply: dict[str, Any] = field(default_factory=lambda: {"text": "", "error": None})
    dry_run: bool = True
    trace_id: str = ""
    notes: list[str] = field(default_factory=list)
    # not part of the JSON: what the run needs
    _match: Any = None
    _rule: Any = None
    _blocked: bool = False
    _answers_anyway: bool = False  # blocked, but a reply goes out (a cooldown's reply)
    _looked_up: bool = False  # the triggers were consulted (not refused before matching)

    def as_dict(self) -> dict[str, Any]:
        out = {
            "text": self.text,
            "normalised": self.normalised,
            "folded": self.folded,
            "message": self.message,
            "matched": self.matched,
            "ran": self.ran,
            "via": self.via,
            "trigger": self.trigger,
            "reason": self.reason,
            "candidates": self.candidates,
            "near_misses": self.near_misses,
            "session": self.session,
            "steps": self.steps,
            "requests": self.requests,
            "writes": self.writes,
            "reply": self.reply,
            "dry_run": self.dry_run,
            "trace_id": self.trace_id,
            "notes": self.notes,
        }
        return jsonable(out)

    @property
    def ran(self) -> bool:
        """Did (or, in a dry run, would) a rule run for this message?"""
        return self.matched is not None and not self._blocked

    @property
    def headline(self) -> str:
        """The one line that says what happens."""
        if self.matched is not None and not self._blocked:
            how = (
                "through its open session (no trigger matched)"
                if self.via == "session"
                else f"by trigger {self.trigger!r}"
            )
            error = self.reply.get("error")
            tail = f"; the run failed: {error}" if error else ""
            return f"matched rule {self.matched!r} {how}{tail}"
        verb = "no run" if self._answers_anyway else "no reply"
        return f"{verb}: {self.reason or 'no rule matched'}"

    def render(self, *, compact: bool = False) -> str:
        """The text view (``compact``: shorter, for an answer in chat)."""
        return _render(self, compact)


# -- building the message ---------------------------------------------------------------------


def message_for(
    text: str,
    *,
    user: str = "console",
    chat: str = "",
    platform: str = "console",
    user_name: str = "",
    private: bool | None = None,
    mention: bool = False,
    admin: bool = False,
) -> Message:
    """The message ``explain`` looks at (``private=False`` without a chat: chat ``group``)."""
    if private is False and not chat:
        chat = "group"
    return Message(
        text,
        user=user,
        chat=chat,
        platform=platform,
        user_name=user_name,
        private=private,
        mentions_bot=mention,
        is_admin=admin,
    )


def _copy(message: Message, text: str) -> Message:
    return Message(
        text,
        user=message.user,
        chat=message.chat,
        platform=message.platform,
        user_name=message.user_name,
        private=message.private,
        is_admin=message.is_admin,
        mentions_bot=message.mentions_bot,
        reply_to=message.reply_to,
        self_id=message.self_id,
    )


# -- the analysis -----------------------------------------------------------------------------


async def explain(engine: Engine, message: Message, *, run: bool = False) -> Explanation:
    """Explain ``message``: a dry run by default (nothing changes), the real run with ``run``."""
    rulebook = engine.rulebook  # one rulebook for the whole explanation, like a run
    ex = await _analyse(engine, rulebook, message)
    ex.dry_run = not run
    if run:
        reply = await engine.handle(_copy(message, ex.text))
        _take_reply(ex, rulebook, reply)
        return ex
    if ex._answers_anyway and ex._match is not None:  # a cooldown: what it answers instead
        left = float(await engine.cooldown_left(ex._match.rule, message))
        cooled = await engine.cooldown_reply(ex._match, message, ex.text, max(left, 1.0))
        ex.reply = {"text": cooled.text, "error": cooled.error}
        return ex
    if ex._match is None or ex._blocked:
        return ex
    ex.trace_id = f"explain-{os.urandom(6).hex()}"
    reply, captured, writes = await _dry_run(engine, rulebook, ex._match, message, ex)
    ex.requests = captured
    ex.writes = writes
    _take_reply(ex, rulebook, reply)
    return ex


async def _analyse(engine: Engine, rulebook: Any, message: Message) -> Explanation:
    """What the engine would decide for ``message``, and why; reads the store, writes nothing."""
    text = message.text if isinstance(message.text, str) else to_text(message.text)
    if not text.isascii():
        text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    settings = engine.settings
    ex = Explanation(text=text)
    ex.normalised = normalise(text)
    ex.folded = fold(ex.normalised)
    if not message.is_admin and engine.admins:
        message.is_admin = engine.admins.admits(message.platform, message.user)
    ex.message = {
        "user": message.user,
        "user_name": message.user_name,
        "chat": message.chat,
        "platform": message.platform,
        "private": bool(message.private),
        "admin": bool(message.is_admin),
        "mention": bool(message.mentions_bot),
    }
    if len(text) > settings.max_message_chars:
        ex.reason = (
            f"message too long: {len(text)} characters (the limit is {settings.max_message_chars})"
        )
        return ex
    for name in ("user", "chat", "platform"):
        problem = id_problem(name, getattr(message, name), settings.max_id_chars)
        if problem is not None:
            ex.reason = f"bad message: {problem}"
            return ex
    commands = engine.commands
    if commands is not None and text.startswith(commands.prefix) and commands.is_command(text):
        ex.reason = f"an admin command ({commands.prefix} …): it never reaches the rules" + (
            "" if message.is_admin else "; you are not an admin, so it gets no reply at all"
        )
        return ex

    index = rulebook.index
    found = index.explain_matches(text)
    ex._looked_up = True
    winner = None
    for cand in found:
        if cand.rule.filters.admits(message):
            winner = cand
            break
    ex.candidates = [_candidate(c, winner, message) for c in found]
    seen_rules: set[str] = set()
    for c, row in zip(found, ex.candidates, strict=True):
        if row["refused"] and c.rule.id not in seen_rules:
            seen_rules.add(c.rule.id)
            ex.near_misses.append(
                _near(c.rule, c.trigger.source, f"its filters refuse the message: {row['refused']}")
            )
    refused_too = []
    for miss in index.near_misses(text, skip=[c.trigger for c in found]):
        if winner is not None and miss.rule is winner.rule:  # the winner's other triggers: noise
            continue
        refusal = _refusal(miss.rule, message)
        if refusal is None:
            ex.near_misses.append(_near(miss.rule, miss.trigger.source, miss.why))
        else:  # listed after the others: it would not answer this sender anyway
            why = f"{miss.why}; its filters would refuse this message anyway ({refusal})"
            refused_too.append(_near(miss.rule, miss.trigger.source, why))
    ex.near_misses.extend(refused_too)

    session_rule = await _session(engine, rulebook, message, ex)
    match: Match | None = None
    if winner is not None:
        match = winner.match
        ex.via, ex.trigger = "trigger", winner.trigger.source
        if session_rule is not None and session_rule is not winner.rule:
            ex.near_misses.append(
                _near(
                    session_rule,
                    "<session>",
                    "its session is open, but a message that hits a trigger goes to that "
                    "trigger's rule",
                )
            )
    elif session_rule is not None:
        refusal = _refusal(session_rule, message)
        if refusal is None:
            match = Match(session_rule, None, "", strip_invisible(text).strip())
            ex.via, ex.trigger = "session", None
        else:
            ex.near_misses.append(
                _near(session_rule, "<session>", f"its session is open, but {refusal}")
            )
    if match is None:
        ex.reason = _unmatched_reason(found, message, ex)
        return ex
    rule = match.rule
    ex.matched = rule.id
    ex._match, ex._rule = match, rule

    switch = engine.switch
    if switch is not None:
        try:
            off = await switch.is_off(message)
        except TmyError:
            off = False
        if off:
            prefix = engine.commands.prefix if engine.commands is not None else ".tmy"
            ex.reason = (
                f"the bot is switched off in this chat (an admin can say '{prefix} on'); "
                f"rule {rule.id!r} would answer otherwise"
            )
            ex._blocked = True
            ex.near_misses.insert(0, _near(rule, ex.trigger or "<session>", ex.reason))
            return ex
    if rule.cooldown is not None:
        try:
            left = await engine.cooldown_left(rule, message)
        except TmyError:
            left = 0.0
        if left > 0:
            answers = (
                "it answers its cooldown reply instead"
                if rule.cooldown.reply is not None
                else "it stays silent"
            )
            ex.reason = f"rule {rule.id!r} is cooling down ({left:.0f} s left): {answers}"
            ex._blocked = True
            ex._answers_anyway = rule.cooldown.reply is not None
            ex.near_misses.insert(0, _near(rule, ex.trigger or "<session>", ex.reason))
    return ex


def _refusal(rule: Any, message: Message) -> str | None:
    return rule.filters.refusal(message)


def _candidate(cand: Any, winner: Any, message: Message) -> dict[str, Any]:
    rule, trig = cand.rule, cand.trigger
    refused = _refusal(rule, message)
    won = cand is winner
    if won:
        why = "the best-ranked trigger whose rule's filters admit the message"
    elif refused is not None and (winner is None or cand.key < winner.key):
        why = f"refused: {refused}"
    elif winner is not None:
        why = _lost(cand, winner)
        if refused is not None:
            why += f" (and refused: {refused})"
    else:
        why = f"refused: {refused}"
    return {
        "rule": rule.id,
        "trigger": trig.source,
        "kind": trig.kind,
        "priority": rule.priority,
        "literal_length": len(trig.literal),
        "file": rule.file,
        "line": trig.line or rule.line,
        "order": cand.key[3],
        "MAGIC": cand.match.magic,
        "QUESTION": cand.match.question,
        "won": won,
        "refused": refused,
        "why": why,
    }


def _lost(cand: Any, winner: Any) -> str:
    """Why ``cand`` ranks below ``winner`` (the first part of the rank key that differs)."""
    if cand.rule is winner.rule:
        return f"another trigger of the same rule; {winner.trigger.source!r} ranks first"
    key, best = cand.key, winner.key
    if key[0] != best[0]:
        return f"lower priority ({-key[0]} < {-best[0]})"
    if key[1] != best[1]:
        kind = KINDS[key[1]]
        article = "an" if kind[0] in "aeiou" else "a"
        return f"{article} {kind} trigger ranks below {KINDS[best[1]]}"
    if key[2] != best[2]:
        return f"shorter literal ({-key[2]} < {-best[2]} characters)"
    w = winner.rule
    return f"later in file order ({cand.rule.file}:{cand.rule.line} comes after {w.file}:{w.line})"


def _near(rule: Any, trigger: str, why: str) -> dict[str, Any]:
    return {"rule": rule.id, "trigger": trigger, "why": why, "file": rule.file, "line": rule.line}


async def _session(engine: Engine, rulebook: Any, message: Message, ex: Explanation) -> Any:
    """The rule whose session is open for this conversation (or None), noted in ``ex``."""
    if not rulebook.has_sessions:
        return None
    try:
        rule_id = await engine.services.store.get(conversation_key("session", message))
    except TmyError as exc:
        ex.notes.append(f"the session could not be read: {exc}")
        return None
    if rule_id is MISSING or not isinstance(rule_id, str):
        return None
    rule = rulebook.by_id.get(rule_id)
    ex.session = {"rule": rule_id, "exists": rule is not None}
    if rule is None:
        ex.notes.append(f"a session is open for rule {rule_id!r}, which no longer exists")
    return rule


def _unmatched_reason(found: list[Any], message: Message, ex: Explanation) -> str:
    if found:
        first = found[0]
        why = _refusal(first.rule, message) or "its filters refused it"
        more = len({c.rule.id for c in found}) - 1
        tail = f" (and {more} more rules matched and were refused)" if more else ""
        return f"rule {first.rule.id!r} matched but {why}{tail}"
    reason = f"no trigger matched {preview(ex.normalised, 60)!r}"
    for miss in ex.near_misses:
        if miss["trigger"] != "<session>":
            return f"{reason}; nearest: rule {miss['rule']!r}: {miss['why']}"
    return reason


# -- the dry run ------------------------------------------------------------------------------


class _DryEngine(Engine):
    """An engine on the overlay store that knows which step is running (for the recorder)."""

    def __init__(self, rulebook: Any, services: Services) -> None:
        super().__init__(rulebook, services)
        self.frames: list[dict[str, Any] | None] = []

    def locals_for(self, match: Match, message: Message, text: str) -> dict[str, Any]:
        loc = super().locals_for(match, message, text)
        if self.frames and self.frames[-1] is None:
            self.frames[-1] = loc
        return loc

    async def run_rule(self, match: Match, *args: Any, **kwargs: Any) -> Reply:
        self.frames.append(None)
        try:
            return await super().run_rule(match, *args, **kwargs)
        finally:
            self.frames.pop()

    def current_uri(self) -> str:
        for loc in reversed(self.frames):
            if loc is not None:
                return to_text(loc.get("STEP_URI", ""))
        return ""


class _Recorder(httpx.AsyncBaseTransport):
    """The dry run's network: records each request, sends none, answers a stand-in.

    Requests to :data:`DRY_HOST` are LLM requests (the dry run points every
    model there): the TESTONLY mock answers them. Anything else (HTTP steps,
    plugins using the shared client) gets :data:`PLACEHOLDER` as JSON.
    """

    def __init__(self, engine: _DryEngine, models: list[Any]) -> None:
        self.engine = engine
        self.models = models  # the real ModelConfigs, by their index in the dry URL
        self.captured: list[dict[str, Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raw = await request.aread()
        headers = _shown_headers(request.headers)
        body = _shown_body(raw, request.headers.get("content-type", ""))
        entry: dict[str, Any] = {"uri": self.engine.current_uri(), "method": request.method}
        if request.url.host == DRY_HOST:
            model = self._model(request.url.path)
            if model is not None:
                entry.update(kind="llm", model=model.name)
                entry["url"] = (
                    "TESTONLY"
                    if model.is_mock
                    else f"{redact.safe_url(model.base_url)}/chat/completions"
                )
                entry.update(headers=headers, body=body)
                self.captured.append(entry)
                return _mock_answer(raw, model.name)
        entry.update(kind="http", url=_shown_url(request.url), headers=headers, body=body)
        self.captured.append(entry)
        return _json_response(200, PLACEHOLDER)

    def _model(self, path: str) -> Any:
        parts = path.strip("/").split("/")
        if len(parts) >= 2 and parts[0] == "llm" and parts[1].isdigit():
            i = int(parts[1])
            if i < len(self.models):
                return self.models[i]
        return None


def _json_response(status: int, data: Any) -> httpx.Response:
    """A response whose body is still to be streamed (as the executors read it)."""
    raw = json.dumps(data, ensure_ascii=False).encode()
    return httpx.Response(
        status,
        headers={"content-type": "application/json", "content-length": str(len(raw))},
        stream=httpx.ByteStream(raw),
    )


def _mock_answer(raw: bytes, model_name: str) -> httpx.Response:
    """The TESTONLY mock's answer to a chat-completions body, as an OpenAI response."""
    from tmy.llm.mock import respond

    try:
        body = json.loads(raw)
    except ValueError:
        return _json_response(400, {"error": {"message": "explain: the body is not JSON"}})
    done = respond(body, model_name)
    message: dict[str, Any] = {"role": "assistant", "content": done.content}
    if done.tool_calls:
        message["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in done.tool_calls
        ]
    return _json_response(
        200,
        {
            "id": "explain-dry-run",
            "object": "chat.completion",
            "model": body.get("model", model_name),
            "choices": [
                {"index": 0, "message": message, "finish_reason": done.finish_reason or "stop"}
            ],
            "usage": {
                "prompt_tokens": done.usage.prompt,
                "completion_tokens": done.usage.completion,
                "total_tokens": done.usage.total,
            },
        },
    )


def _shown_headers(headers: httpx.Headers) -> dict[str, str]:
    out = {}
    for name, value in headers.items():
        low = name.lower()
        if low in _NOISY_HEADERS or (low == "accept" and value == "*/*"):
            continue
        out[name] = redact.MASK if redact.is_secret_name(name) else redact.redact(value)
    return out


def _shown_url(url: httpx.URL) -> str:
    """The URL with its password and credential-named query parameters masked."""
    text = str(url)
    head, sep, rest = text.partition("?")
    if sep:
        query, hash_, fragment = rest.partition("#")
        parts = []
        for pair in query.split("&"):
            name, eq, _ = pair.partition("=")
            secret = eq and redact.is_secret_name(unquote_plus(name))
            parts.append(f"{name}={redact.MASK}" if secret else pair)
        text = f"{head}?{'&'.join(parts)}{hash_}{fragment}"
    return redact.redact(redact.safe_url(text))


def _shown_body(raw: bytes, content_type: str) -> Any:
    if not raw:
        return None
    text = redact.redact(raw.decode("utf-8", errors="replace"))
    if "json" in content_type or text[:1] in "{[":
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def _dry_llm(services: Services) -> list[Any]:
    """Point every LLM model of the dry services at the recorder; the real configs, by index."""
    rt = services.extra.get("llm")
    if rt is None or not hasattr(rt, "config"):
        return []
    config = rt.config
    originals = list(config.models.values())
    models = {
        name: replace(model, base_url=f"http://{DRY_HOST}/llm/{i}", fallback=())
        for i, (name, model) in enumerate(config.models.items())
    }
    rt.config = replace(config, models=models, retries=0)
    return originals


async def _dry_run(
    engine: Engine, rulebook: Any, match: Match, message: Message, ex: Explanation
) -> tuple[Reply, list[dict[str, Any]], dict[str, Any]]:
    """Run ``match`` on a second engine: overlay store, recorded network, the real rules."""
    from tmy.app import SERVICE_HOOKS

    real = engine.services
    overlay = OverlayStore(real.store)
    services = Services(real.settings, overlay, real.registry)
    for hook in SERVICE_HOOKS:
        hook(services)
    dry = _DryEngine(rulebook, services)
    dry.dry_run = True  # its run.done lines say so: trace and log readers tell them apart
    dry.fixed_now = engine.fixed_now
    dry.tz = engine.tz
    recorder = _Recorder(dry, _dry_llm(services))
    services._http = httpx.AsyncClient(
        transport=recorder,
        follow_redirects=True,
        headers={"Accept-Encoding": ACCEPT_ENCODING},
    )
    token = logs.bind_trace(ex.trace_id)
    try:
        if match.rule.cooldown is not None:  # the window the run would start (overlay only)
            await dry.cooldown_claim(match.rule, message)
        reply = await dry.run_rule(match, message, ex.trace_id, ex.text)
    finally:
        logs.TRACE.reset(token)
        await services.aclose()
    writes = {k: (None if v is MISSING else v) for k, v in overlay.written().items()}
    await overlay.close()
    return reply, recorder.captured, writes


# -- the steps and the reply ------------------------------------------------------------------


def _take_reply(ex: Explanation, rulebook: Any, reply: Reply) -> None:
    ex.trace_id = reply.trace_id
    ex.reply = {"text": reply.text, "error": reply.error}
    if reply.stopped:
        ex.reply["stopped"] = True
    if not ex.dry_run:
        _take_decision(ex, rulebook, reply)
    rule = ex._rule
    by_uri = {s.uri: s for s in rule.steps} if rule is not None else {}
    requests = {}
    for req in ex.requests:
        requests.setdefault(req["uri"], []).append(req)
    ran: set[str] = set()
    for record in reply.steps:
        ran.add(record.uri)
        ex.steps.append(_step(record, by_uri.get(record.uri), requests.pop(record.uri, None)))
    if rule is not None and reply.steps and not ex._blocked:
        last = reply.steps[-1]
        why = (
            f"the run stopped at {last.uri} (stop:)"
            if reply.stopped
            else f"the run ended at {last.uri}: {last.error}"
        )
        for step in rule.steps:
            if step.uri not in ran:
                ex.steps.append(
                    {
                        "uri": step.uri,
                        "plugin": step.plugin,
                        "ran": False,
                        "skipped": True,
                        "skip_reason": f"not reached: {why}",
                    }
                )


def _take_decision(ex: Explanation, rulebook: Any, reply: Reply) -> None:
    """After ``--run``: the real engine decided, so its word wins over the prediction."""
    if reply.rule is None:
        if ex.matched is not None and not ex._blocked:  # expected a run, there was none
            ex.notes.append(f"explain expected rule {ex.matched!r}, but the engine did not run it")
            ex.reason = reply.reason or reply.error or "the engine ran no rule"
            ex.matched, ex._rule = None, None
        elif ex.reason is None:
            ex.reason = reply.reason or reply.error or "no rule matched"
        ex._blocked = True  # (a rule blocked by the chat switch keeps its name in ``matched``)
        return
    if reply.rule != ex.matched:
        ex.notes.append(f"explain expected rule {ex.matched!r}; the engine ran {reply.rule!r}")
        ex.matched, ex._rule = reply.rule, rulebook.by_id.get(reply.rule)
    if reply.reason is not None:  # matched, but not run (a cooldown)
        ex.reason = ex.reason or reply.reason
        ex._blocked = True
    else:
        ex.reason, ex._blocked = None, False


def _step(record: StepRecord, step: Any, sent: list[dict[str, Any]] | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "uri": record.uri,
        "plugin": record.plugin,
        "ran": not record.skipped,
        "input": record.input,
        "result": record.result,
        "error": record.error or None,
        "ms": record.ms,
        "skipped": record.skipped,
    }
    if record.skipped:
        out["skip_reason"] = _skip_reason(step)
    if record.extra:
        out["extra"] = dict(record.extra)
    if record.extra.get("stopped"):
        out["stopped"] = True
    if sent:
        out["would_send"] = [{k: v for k, v in s.items() if k != "uri"} for s in sent]
    return out


def _skip_reason(step: Any) -> str:
    if step is None:
        return "skipped"
    if step.when is not None:
        return f"when: {_source(step.when)} was false"
    keys = [k for k in getattr(step, "extras", {}) if k.startswith("when")]
    if keys:
        return f"{keys[0]}: the model judged no"
    return "skipped by an extension"


def _source(value: Any) -> str:
    if isinstance(value, Constant):
        return repr(value.value)
    if isinstance(value, Expression):
        return repr(f"?= {value.source}")
    return repr(getattr(value, "source", value))


# -- output -----------------------------------------------------------------------------------


def _show(value: Any, limit: int) -> str:
    if isinstance(value, str):
        return repr(preview(value, limit))
    shown = preview(value, limit)
    return shown if isinstance(shown, str) else json.dumps(shown)


def _sent_line(sent: dict[str, Any]) -> str:
    if sent["kind"] != "llm":
        return f"{sent['method']} {sent['url']}"
    if sent["url"] == "TESTONLY":
        return f"an LLM request to model {sent['model']!r} (the TESTONLY mock answers it)"
    return (
        f"an LLM request to model {sent['model']!r}: {sent['method']} {sent['url']} "
        "(the TESTONLY mock answered it here)"
    )


def _render(ex: Explanation, compact: bool) -> str:
    limit = _SHOW_CHAT if compact else _SHOW
    lines = [ex.headline]
    if ex.matched is not None and ex._rule is not None:
        r = ex._rule
        lines[0] += f" ({r.file}:{r.line})"
    lines.append(f"text: {_show(ex.text, limit)}")
    folded = f" (case-folded: {_show(ex.folded, limit)})" if ex.folded != ex.normalised else ""
    lines.append(f"normalised: {_show(ex.normalised, limit)}{folded}")
    m = ex.message
    if m and not compact:
        lines.append(
            f"message: user {m['user']} · chat {m['chat']} · platform {m['platform']} · "
            f"{'private' if m['private'] else 'group'}"
            f"{' · admin' if m['admin'] else ''}{' · mentions the bot' if m['mention'] else ''}"
        )
    if ex.candidates:
        lines.append("candidates (best first; the first one the filters admit wins):")
        rows = ex.candidates[:10] if compact else ex.candidates
        for c in rows:
            mark = "*" if c["won"] else "-"
            where = f"{c['file']}:{c['line']}"
            if compact:
                lines.append(f"  {mark} {c['rule']} {c['trigger']!r}: {c['why']}")
            else:
                lines.append(
                    f"  {mark} {c['rule']}  {c['trigger']!r}  {c['kind']}  "
                    f"priority {c['priority']}  literal {c['literal_length']}  {where}  "
                    f"— {c['why']}"
                )
        if len(rows) < len(ex.candidates):
            lines.append(f"  … and {len(ex.candidates) - len(rows)} more")
    elif ex._looked_up:
        lines.append("candidates: none (no trigger matched)")
    # a refused candidate is already shown above with its reason
    listed = {(c["rule"], c["trigger"]) for c in ex.candidates}
    misses = [n for n in ex.near_misses if (n["rule"], n["trigger"]) not in listed]
    if misses:
        lines.append("near misses:")
        shown = misses[:5] if compact else misses
        for n in shown:
            lines.append(f"  - {n['rule']} {n['trigger']!r}: {n['why']}")
        if len(shown) < len(misses):
            lines.append(f"  … and {len(misses) - len(shown)} more")
    if ex.session is not None and not compact:
        lines.append(f"session: open for rule {ex.session['rule']!r}")
    if ex.steps:
        how = (
            "dry run: store writes kept in an overlay, HTTP and LLM requests not sent"
            if ex.dry_run
            else "the real run"
        )
        lines.append(f"steps ({how}):")
        for s in ex.steps:
            head = f"  {s['uri']} [{s['plugin']}]"
            if not s.get("ran", True) or s.get("skipped"):
                lines.append(f"{head} skipped: {s.get('skip_reason', 'skipped')}")
                continue
            stop = "  (stop: ended the run)" if s.get("stopped") else ""
            lines.append(f"{head} {s['ms']:g} ms{stop}")
            lines.append(f"      input:  {_show(s['input'], limit)}")
            for sent in s.get("would_send", ()):
                lines.append(f"      would send: {_sent_line(sent)}")
                if not compact:
                    if sent.get("headers"):
                        shown = json.dumps(sent["headers"], ensure_ascii=False)
                        lines.append(f"        headers: {shown}")
                    if sent.get("body") is not None:
                        body_limit = _SHOW_LLM if sent["kind"] == "llm" else limit
                        lines.append(f"        body: {_show(sent['body'], body_limit)}")
            if s["error"]:
                lines.append(f"      error:  {s['error']}")
            else:
                lines.append(f"      result: {_show(s['result'], limit)}")
    elif ex.matched is not None and not ex._blocked and ex._rule is not None:
        lines.append("steps: none")
    if ex.matched is not None and not ex._blocked:
        reply = ex.reply
        lines.append(f"reply: {_show(reply.get('text', ''), limit)}")
        if reply.get("error"):
            lines.append(f"error: {reply['error']}")
    if ex.writes and not compact:
        lines.append("store writes (kept in the overlay, not stored):")
        for key, value in ex.writes.items():
            lines.append(f"  {key} = {'(deleted)' if value is None else _show(value, limit)}")
    elif ex.writes:
        lines.append(f"store writes (not stored): {', '.join(ex.writes)}")
    lines.extend(f"note: {n}" for n in ex.notes)
    if ex.dry_run and ex.steps and not compact:
        lines.append("(nothing was changed; --run sends the message for real)")
    return "\n".join(lines)


# -- entry points -----------------------------------------------------------------------------


async def explain_text(engine: Engine, message: Message, text: str) -> str:
    """The admin command: ``text`` explained as if ``message``'s sender sent it there (dry)."""
    if not text.strip():
        return "usage: explain TEXT"
    ex = await explain(engine, _copy(message, text))
    return ex.render(compact=True)


def configure(parser: argparse.ArgumentParser) -> None:
    """The ``explain`` subcommand's arguments (the common --user/--chat/... come with it)."""
    parser.description = (
        "explain why the bot answers a message the way it does: matching, near misses, "
        "each step; a dry run unless --run"
    )
    parser.add_argument("text", help="the message, as a user would send it")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--private", action="store_true", help="a private chat (default)")
    where.add_argument(
        "--group", action="store_true", help="a group chat (chat 'group' unless --chat)"
    )
    parser.add_argument(
        "--mention", action="store_true", help="the message @-mentions the bot (or replies to it)"
    )
    parser.add_argument("--admin", action="store_true", help="the sender is an admin")
    parser.add_argument(
        "--run", action="store_true", help="run the message for real (changes the store, sends)"
    )
    parser.add_argument("--json", action="store_true", help="print the explanation as JSON")


def run(args: argparse.Namespace, settings: Any) -> int:
    """``tmy explain``: 0 when explained, 1 when the run failed."""
    from tmy.cli import identity

    who = dict(identity(args))  # --user-name / TMY_USER_NAME included
    name = who.pop("user_name", None)
    private = True if args.private else (False if args.group else None)
    message = message_for(
        args.text,
        user=who.get("user", "console"),
        chat=who.get("chat", ""),
        platform=who.get("platform", "console"),
        user_name=name or "",
        private=private,
        mention=args.mention,
        admin=args.admin,
    )
    ex = asyncio.run(_cli(settings, message, args.run))
    if args.json:
        print(json.dumps(ex.as_dict(), ensure_ascii=False, indent=2))
    else:
        print(ex.render())
    return 1 if ex.reply.get("error") else 0


async def _cli(settings: Any, message: Message, real: bool) -> Explanation:
    from tmy.app import App

    async with App(settings.with_(console=False, http_enabled=False)) as app:
        assert app.engine is not None
        return await explain(app.engine, message, run=real)


COMMANDS["explain"] = (configure, run)
