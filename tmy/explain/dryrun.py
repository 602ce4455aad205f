"""The dry run: the matched rule run by a second engine that changes nothing.

That engine shares the rules but reads the store through an
:class:`~tmy.store.overlay.OverlayStore` (writes stay in memory and are
listed), and its HTTP client sends nothing: each request is recorded
(credentials masked) and answered with a placeholder; an LLM request is
answered by the TESTONLY mock. Every random draw is recorded (``ex.draws``)
under the step that made it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_plus

from tmy import logs, redact
from tmy.bodies import ACCEPT_ENCODING
from tmy.engine.core import Engine, Services
from tmy.explain.model import Explanation
from tmy.llm.mock import respond
from tmy.llm.runtime import STATE_KEY, Runtime
from tmy.message import Message, Reply
from tmy.rulebook.triggers import Match
from tmy.store.base import MISSING
from tmy.store.overlay import OverlayStore
from tmy.values import randomness
from tmy.values.compiled import to_text

if TYPE_CHECKING:  # deferred: httpx is ~50 ms of every CLI start
    import httpx

DRY_HOST = "tmy-dry-run.invalid"  # where the dry run points LLM models (never resolved)
PLACEHOLDER = {
    "dry_run": True,
    "note": "not sent: explain runs HTTP steps dry (use --run to send it)",
}
_NOISY_HEADERS = frozenset(
    {"host", "connection", "content-length", "accept-encoding", "user-agent"}
)


class _StepTracker:
    """Which step of the dry run is running (the recorder files each request under it)."""

    def __init__(self) -> None:
        self.frames: list[dict[str, Any] | None] = []

    def current_uri(self) -> str:
        for loc in reversed(self.frames):
            if loc is not None:
                return to_text(loc.get("STEP_URI", ""))
        return ""


class _DryEngine(Engine):
    """An engine on the overlay store that tells the tracker which step is running.

    Its run.done lines say ``dry_run``: trace and log readers tell them apart.
    """

    def __init__(
        self, rulebook: Any, services: Services, tracker: _StepTracker, fixed_now: str | None
    ) -> None:
        super().__init__(rulebook, services, fixed_now=fixed_now, dry_run=True)
        self.tracker = tracker

    def locals_for(self, match: Match, message: Message, text: str) -> dict[str, Any]:
        loc = super().locals_for(match, message, text)
        frames = self.tracker.frames
        if frames and frames[-1] is None:
            frames[-1] = loc
        return loc

    async def run_rule(self, match: Match, *args: Any, **kwargs: Any) -> Reply:
        self.tracker.frames.append(None)
        try:
            return await super().run_rule(match, *args, **kwargs)
        finally:
            self.tracker.frames.pop()


class _Recorder:
    """The dry run's network: records each request, sends none, answers a stand-in.

    Requests to :data:`DRY_HOST` are LLM requests (the dry run points every
    model there): the TESTONLY mock answers them. Anything else (HTTP steps,
    plugins using the shared client) gets :data:`PLACEHOLDER` as JSON.
    An ``httpx`` transport by what it does (``handle_async_request``, ``aclose``), not by
    subclassing ``httpx.AsyncBaseTransport``: httpx is ~50 ms of every CLI start.
    """

    def __init__(self, tracker: _StepTracker, models: Sequence[Any]) -> None:
        self.tracker = tracker
        self.models = tuple(models)  # the real ModelConfigs, by their index in the dry URL
        self.captured: list[dict[str, Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raw = await request.aread()
        headers = _shown_headers(request.headers)
        body = _shown_body(raw, request.headers.get("content-type", ""))
        entry: dict[str, Any] = {"uri": self.tracker.current_uri(), "method": request.method}
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

    async def aclose(self) -> None:
        """Nothing to close: no connection was ever opened."""

    def _model(self, path: str) -> Any:
        parts = path.strip("/").split("/")
        if len(parts) >= 2 and parts[0] == "llm" and parts[1].isdigit():
            i = int(parts[1])
            if i < len(self.models):
                return self.models[i]
        return None


def _json_response(status: int, data: Any) -> httpx.Response:
    """A response whose body is still to be streamed (as the executors read it)."""
    import httpx  # deferred: httpx is ~50 ms of every CLI start

    raw = json.dumps(data, ensure_ascii=False).encode()
    return httpx.Response(
        status,
        headers={"content-type": "application/json", "content-length": str(len(raw))},
        stream=httpx.ByteStream(raw),
    )


def _mock_answer(raw: bytes, model_name: str) -> httpx.Response:
    """The TESTONLY mock's answer to a chat-completions body, as an OpenAI response."""
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


def _dry_llm(rt: Runtime) -> Callable[[Services], Runtime]:
    """What makes the dry services' LLM runtime: ``rt`` (untouched) with every model
    sending to :data:`DRY_HOST` (the i-th at ``/llm/i``), where the recorder answers
    with the mock; no fallbacks, no retries."""
    config = rt.config
    models = {
        name: replace(model, base_url=f"http://{DRY_HOST}/llm/{i}", fallback=())
        for i, (name, model) in enumerate(config.models.items())
    }
    dry_config = replace(config, models=models, retries=0)
    return lambda services: rt.derive(services, dry_config)


@dataclass
class DrySession:
    """A second engine that changes nothing, with what it did: the overlay's writes and
    the recorded requests (read them after the ``async with`` block of :func:`dry_engine`)."""

    engine: Engine
    tracker: _StepTracker
    overlay: OverlayStore
    recorder: _Recorder
    writes: dict[str, Any] = field(default_factory=dict)

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self.recorder.captured


@asynccontextmanager
async def dry_engine(engine: Engine, rulebook: Any, trace_id: str) -> AsyncIterator[DrySession]:
    """The real rules on an overlay store with a recording network (``explain``'s dry run,
    ``cron fire --dry-run``); the overlay's writes land in ``session.writes`` at exit."""
    import httpx  # deferred: httpx is ~50 ms of every CLI start

    real = engine.services
    overlay = OverlayStore(real.store)
    tracker = _StepTracker()
    models: Sequence[Any] = ()
    dry_state: dict[str, Callable[[Services], Any]] = {}
    rt = real.state.get(STATE_KEY)
    if isinstance(rt, Runtime):  # the LLM extension is installed: its models go to the recorder
        models = tuple(rt.config.models.values())
        dry_state[STATE_KEY] = _dry_llm(rt)
    recorder = _Recorder(tracker, models)
    client = httpx.AsyncClient(
        transport=recorder, follow_redirects=True, headers={"Accept-Encoding": ACCEPT_ENCODING}
    )
    services = real.derive(overlay, http=client, state=dry_state)
    session = DrySession(
        _DryEngine(rulebook, services, tracker, engine.fixed_now), tracker, overlay, recorder
    )
    token = logs.bind_trace(trace_id)
    try:
        yield session
    finally:
        logs.TRACE.reset(token)
        await client.aclose()
        await services.aclose()
        session.writes = {k: (None if v is MISSING else v) for k, v in overlay.written().items()}
        await overlay.close()


async def dry_run(
    engine: Engine, rulebook: Any, match: Match, message: Message, ex: Explanation
) -> tuple[Reply, list[dict[str, Any]], dict[str, Any]]:
    """Run ``match`` on a second engine: overlay store, recorded network, the real rules."""
    async with dry_engine(engine, rulebook, ex.trace_id) as dry:

        def drew(call: str, value: Any) -> None:  # each draw, under the step that made it
            ex.draws.append({"uri": dry.tracker.current_uri(), "call": call, "value": value})

        if match.rule.cooldown is not None:  # the window the run would start (overlay only)
            await dry.engine.cooldown_claim(match.rule, message)
        with randomness.recording(drew):
            reply = await dry.engine.run_rule(match, message, ex.trace_id, ex.text)
    return reply, dry.requests, dry.writes
