"""Prometheus metrics: what ``GET /metrics`` serves.

Every metric lives on :data:`REGISTRY`, a registry of tmy's own (not
prometheus-client's process-wide default), so importing tmy in another program
adds nothing to that program's metrics and tests can read tmy's alone.

The instruments (the hot path's plain counters and histograms, the cap on
label values) are :mod:`tmy.metrics.instruments`. The rest of the code calls
the small functions below (:func:`message`,
:func:`run`, :func:`step`, …), never the metric objects: each function keeps
the labelled children it has made in a dict keyed by the label value, so a call
on the hot path is a dict lookup and an ``inc``/``observe`` (about a
microsecond). Label values that come from outside (platform, rule, plugin,
model, store op, adapter) are capped at :data:`MAX_LABEL_VALUES` distinct
values per metric; later ones are counted under ``"other"``, so a flood of
invented names cannot grow memory or the scrape without limit. Outcome-like
labels take a fixed set of values; anything else is counted as ``"other"``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import generate_latest as _generate_latest

from tmy.metrics.instruments import (
    MAX_LABEL_VALUES,
    OTHER,
    Children,
    HotMetric,
    SumOfCounters,
    outcomes,
)

__all__ = [
    "MAX_LABEL_VALUES",
    "REGISTRY",
    "adapter_connected",
    "chat_dropped",
    "cron_fire",
    "cron_send_failed",
    "http_refused",
    "lease_lost",
    "llm_request",
    "mcp_call",
    "mcp_reconnect",
    "mcp_server_up",
    "message",
    "reload",
    "render",
    "run",
    "run_meters",
    "step",
    "store_error",
    "store_op",
]

REGISTRY = CollectorRegistry(auto_describe=True)


# Seconds: steps range from microseconds (ADJUST) to a minute or more (LLM with tools).
_STEP_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
)  # fmt: skip
# Store round-trips: sub-millisecond (SQLite, local Redis) up to a lock wait (30 s default).
_STORE_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip


MESSAGES_RECEIVED = SumOfCounters(  # each message is matched or unmatched: their sum
    "tmy_messages_received",
    "Messages received from chat platforms.",
    ["platform"],
    registry=REGISTRY,  # first, as in /metrics before it was a sum
)
MESSAGES_MATCHED = HotMetric(
    "tmy_messages_matched",
    "Received messages that matched a rule.",
    ["platform"],
    registry=REGISTRY,
)
MESSAGES_UNMATCHED = HotMetric(
    "tmy_messages_unmatched",
    "Received messages that matched no rule.",
    ["platform"],
    registry=REGISTRY,
)
MESSAGES_RECEIVED.parts = (MESSAGES_MATCHED, MESSAGES_UNMATCHED)
RUNS = HotMetric(
    "tmy_runs",
    "Rule runs by rule and outcome (ok | error).",
    ["rule", "outcome"],
    registry=REGISTRY,
)
STEP_SECONDS = HotMetric(
    "tmy_step_seconds",
    "Duration of one executed step, by executor (plugin).",
    ["plugin"],
    buckets=_STEP_BUCKETS,
    registry=REGISTRY,
)
STORE_OP_SECONDS = HotMetric(
    "tmy_store_op_seconds",
    "Duration of one store operation (get, set, update, lock acquire, …).",
    ["op"],
    buckets=_STORE_BUCKETS,
    registry=REGISTRY,
)
STORE_ERRORS = HotMetric(
    "tmy_store_errors",
    "Store operations that failed with a StoreError.",
    ["op"],
    registry=REGISTRY,
)
LLM_REQUESTS = Counter(
    "tmy_llm_requests",
    "Model calls (one per completion a step asked for, fallbacks and retries included).",
    ["model"],
    registry=REGISTRY,
)
LLM_TOKENS = Counter(
    "tmy_llm_tokens",
    "Tokens used, by model and kind (prompt | completion | cached).",
    ["model", "kind"],
    registry=REGISTRY,
)
LLM_RETRIES = Counter(
    "tmy_llm_retries",
    "HTTP requests re-sent to a model (retries and fallbacks) beyond the first.",
    ["model"],
    registry=REGISTRY,
)
CRON_FIRES = Counter(
    "tmy_cron_fires",
    "Scheduled (cron) rule firings by rule and outcome (ok | error | skipped).",
    ["rule", "outcome"],
    registry=REGISTRY,
)
ADAPTER_CONNECTS = Counter(
    "tmy_adapter_connects",
    "Connections an adapter established to its platform (first ones and reconnects).",
    ["adapter"],
    registry=REGISTRY,
)
ADAPTER_RECONNECTS = Counter(
    "tmy_adapter_reconnects",
    "Connections an adapter re-established after losing one.",
    ["adapter"],
    registry=REGISTRY,
)
HTTP_REFUSED = Counter(
    "tmy_http_refused",
    "Connections or requests the listener refused or closed, by reason "
    "(busy | conn_cap | header_timeout | idle | host | cross_site | content_type).",
    ["reason"],
    registry=REGISTRY,
)
CHAT_DROPPED = Counter(
    "tmy_chat_dropped",
    "Messages or replies dropped (or merged) because one chat's own queue was full.",
    ["adapter", "what"],
    registry=REGISTRY,
)
CRON_SEND_FAILURES = Counter(
    "tmy_cron_send_failures",
    "Failed sends of scheduled replies (each attempt; the outbox retries them).",
    ["rule", "outcome"],
    registry=REGISTRY,
)
LEASES_LOST = Counter(
    "tmy_leases_lost",
    "Runs that lost their store lease before they could write (their writes were refused).",
    ["kind"],
    registry=REGISTRY,
)
RELOADS = Counter(
    "tmy_reloads",
    "Rule / config reloads by outcome (ok | error).",
    ["outcome"],
    registry=REGISTRY,
)


_messages = Children(lambda p: (MESSAGES_MATCHED.labels(p), MESSAGES_UNMATCHED.labels(p)))
_runs = Children(lambda r: (RUNS.labels(r, "ok"), RUNS.labels(r, "error")))
_steps = Children(lambda p: STEP_SECONDS.labels(p))
_store_ops = Children(lambda op: STORE_OP_SECONDS.labels(op))
_store_errors = Children(lambda op: STORE_ERRORS.labels(op))
_llm = Children(
    lambda m: (
        LLM_REQUESTS.labels(m),
        LLM_TOKENS.labels(m, "prompt"),
        LLM_TOKENS.labels(m, "completion"),
        LLM_TOKENS.labels(m, "cached"),
        LLM_RETRIES.labels(m),
    )
)
_CRON_OUTCOMES = ("ok", "error", "skipped")
_cron = Children(outcomes(CRON_FIRES, _CRON_OUTCOMES))
_adapters = Children(lambda a: (ADAPTER_CONNECTS.labels(a), ADAPTER_RECONNECTS.labels(a)))
_RELOAD_OK = RELOADS.labels("ok")
_RELOAD_ERROR = RELOADS.labels("error")


def message(platform: str, matched: bool) -> None:
    """One message received from ``platform``; ``matched`` when it hit a rule (received
    is their sum, :data:`MESSAGES_RECEIVED`)."""
    _messages(platform)[0 if matched else 1].value += 1.0


def message_meters(platform: str) -> tuple[Any, Any]:
    """(matched, unmatched) counters of ``platform``, for a caller that keeps them (one
    of them ``.value += 1`` per message: received is their sum)."""
    return _messages(platform)


def run(rule: str, ok: bool) -> None:
    """One run of ``rule`` ended (``ok`` False when it ended with an error)."""
    _runs(rule)[0 if ok else 1].value += 1.0


# (ok, error) run counters of a rule, for a caller that keeps them (``.value += 1``). This
# and step_meter are the label caches themselves, not functions calling them: a constant
# rule's plan is made at its first hit (each message's at 100,000 rules) and asks both
run_meters: Callable[[str], tuple[Any, Any]] = _runs


def step(plugin: str, seconds: float) -> None:
    """One executed step of executor ``plugin`` took ``seconds``."""
    _steps(plugin).observe(seconds)


# the histogram child of an executor's steps, for a caller that keeps it (``observe``)
step_meter: Callable[[str], Any] = _steps


def store_op(op: str, seconds: float) -> None:
    """One store operation ``op`` (get, set, update, lock, …) took ``seconds``."""
    _store_ops(op).observe(seconds)


def store_error(op: str) -> None:
    """One store operation ``op`` failed with a StoreError."""
    _store_errors(op).inc()


def llm_request(
    model: str,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    cached_tokens: int = 0,
    retries: int = 0,
) -> None:
    """One model call: its tokens by kind and the requests re-sent for it."""
    requests, prompt, completion, cached, resent = _llm(model)
    requests.inc()
    if prompt_tokens > 0:
        prompt.inc(prompt_tokens)
    if completion_tokens > 0:
        completion.inc(completion_tokens)
    if cached_tokens > 0:
        cached.inc(cached_tokens)
    if retries > 0:
        resent.inc(retries)


def cron_fire(rule: str, outcome: str) -> None:
    """One scheduled firing of ``rule``: ``outcome`` is ok, error or skipped."""
    children = _cron(rule)
    child = children.get(outcome) if isinstance(outcome, str) else None
    (child if child is not None else children[OTHER]).inc()


def adapter_connected(adapter: str, reconnect: bool) -> None:
    """``adapter`` established a connection; ``reconnect`` when it had one before."""
    connects, reconnects = _adapters(adapter)
    connects.inc()
    if reconnect:
        reconnects.inc()


def reload(ok: bool) -> None:
    """One reload of rules / config ended (``ok`` False when it was refused)."""
    (_RELOAD_OK if ok else _RELOAD_ERROR).inc()


_http_refused = Children(lambda reason: HTTP_REFUSED.labels(reason), cap=32)
_chat_dropped = Children(
    lambda adapter: {w: CHAT_DROPPED.labels(adapter, w) for w in ("message", "reply", OTHER)}
)
_CRON_SEND_OUTCOMES = ("retry", "gave_up")
_cron_send = Children(outcomes(CRON_SEND_FAILURES, _CRON_SEND_OUTCOMES))
_leases_lost = Children(lambda kind: LEASES_LOST.labels(kind), cap=32)


def http_refused(reason: str) -> None:
    """The listener refused a request or closed a connection for ``reason``."""
    _http_refused(reason).inc()


def chat_dropped(adapter: str, what: str) -> None:
    """One chat's own queue on ``adapter`` was full: a ``message`` or ``reply`` was dropped."""
    children = _chat_dropped(adapter)
    children.get(what, children[OTHER]).inc()


def cron_send_failed(rule: str, outcome: str) -> None:
    """A scheduled reply of ``rule`` failed to send: ``retry`` (kept in the outbox) or
    ``gave_up`` (its retry window ended)."""
    children = _cron_send(rule)
    children.get(outcome, children[OTHER]).inc()


def lease_lost(kind: str) -> None:
    """A run (``kind``: ``span``, ``step``, ``cron``) lost its lease; its writes were refused."""
    _leases_lost(kind).inc()


MCP_SERVER_UP = Gauge(
    "tmy_mcp_server_up",
    "1 while the MCP tool server is connected, 0 while it is starting, reconnecting or failed.",
    ["server"],
    registry=REGISTRY,
)
MCP_CALLS = Counter(
    "tmy_mcp_calls",
    "MCP tool calls by server and outcome (ok | tool_error | error | timeout | down).",
    ["server", "outcome"],
    registry=REGISTRY,
)
MCP_CALL_SECONDS = Histogram(
    "tmy_mcp_call_seconds",
    "Duration of one MCP tool call that reached its server.",
    ["server"],
    buckets=_STEP_BUCKETS,
    registry=REGISTRY,
)
MCP_RECONNECTS = Counter(
    "tmy_mcp_reconnects",
    "Connections to an MCP server re-established after losing one.",
    ["server"],
    registry=REGISTRY,
)
_MCP_OUTCOMES = ("ok", "tool_error", "error", "timeout", "down")
_mcp_calls = Children(
    lambda s: (
        {o: MCP_CALLS.labels(s, o) for o in (*_MCP_OUTCOMES, OTHER)},
        MCP_CALL_SECONDS.labels(s),
    ),
    cap=64,
)
_mcp_up = Children(lambda s: MCP_SERVER_UP.labels(s), cap=64)
_mcp_reconnects = Children(lambda s: MCP_RECONNECTS.labels(s), cap=64)


def mcp_server_up(server: str, up: bool) -> None:
    """MCP ``server`` is connected (``up``) or not (starting, reconnecting, failed)."""
    _mcp_up(server).set(1 if up else 0)


def mcp_call(server: str, outcome: str, seconds: float | None = None) -> None:
    """One tool call to MCP ``server`` ended with ``outcome`` (ok, tool_error, error, timeout,
    down); ``seconds`` when it reached the server."""
    counters, histogram = _mcp_calls(server)
    counters.get(outcome, counters[OTHER]).inc()
    if seconds is not None:
        histogram.observe(seconds)


def mcp_reconnect(server: str) -> None:
    """MCP ``server`` was connected again after it had been lost."""
    _mcp_reconnects(server).inc()


def render() -> tuple[bytes, str]:
    """The body and content type of ``GET /metrics`` (Prometheus text format)."""
    return _generate_latest(REGISTRY), CONTENT_TYPE_LATEST
