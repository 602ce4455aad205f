"""The console's Live runs: runs as they happen, each one's full trace, a replay link.

* ``live`` — the newest runs the feed keeps (:mod:`tmy.console.feed`), filtered by
  rule, user, chat, platform or "errors only" (the query string): a table that works
  without JavaScript; ``static/live.js`` then follows ``live/stream``.
* ``live/stream`` — Server-Sent Events: one ``data:`` JSON row per run the filter
  admits (:func:`brief`), ``event: skipped`` (``data:`` a count) when this view fell behind and the
  feed dropped runs for it or sampled them out (a busy bot, :mod:`tmy.console.feed`),
  ``event: sampled`` when a view filtered by user, chat or platform may have lost some
  (whose the sampled-out runs were is not known), a comment every few seconds to keep proxies from
  closing it. Written at most :data:`PACE` times a second, so a busy bot costs the
  stream a batch, not a write per run. A connection lasts :data:`STREAM_SECONDS`
  (EventSource reconnects by itself), so a daemon's shutdown never waits on one.
  A stream holds no in-flight slot of the listener (:func:`~tmy.adapters.http.gate.long_lived`):
  instead at most :data:`STREAMS_PER_SESSION` are open per session and
  :data:`STREAMS` in all (503 beyond); a stream ends when its session does (logging
  out) and when the browser has not taken a write within :data:`WRITE_SECONDS`.
* ``live/trace?id=TRACE_ID`` — that run as ``trace`` shows it, from the log file
  (read in a thread within a bound, :mod:`tmy.tracelog`), or from the feed's own
  copy of the run when the log has none (logging off, or to a terminal); with a link
  that replays the message in the playground.

Every value is escaped by the templates (and set as text by the script); configured
secrets are masked as in the log (:mod:`tmy.redact`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import orjson
from aiohttp import web

from tmy import redact
from tmy.adapters.http.gate import long_lived
from tmy.console.feed import Event, Filter, Seen
from tmy.console.overview import clock, feed_for
from tmy.console.records import as_event
from tmy.console.web import ConsoleRequest, Refused, Route, page
from tmy.errors import ConfigError, TmyError
from tmy.tracelog import Bound, as_dict, build_view, check_trace_id, look_up_async, render

ROWS = 100  # runs the page lists
PACE = 0.25  # seconds between two writes of a stream
KEEPALIVE = 10.0  # seconds of silence before a keep-alive comment
POLL = 0.5  # seconds between two looks at whether the browser or the daemon has gone
STREAM_SECONDS = 60.0  # one stream connection at most (the browser reconnects)
ANSWER = 160  # characters of an answer shown in a row
STREAMS = 32  # live streams open at once, in all
STREAMS_PER_SESSION = 4  # live streams open at once, per session
WRITE_SECONDS = 15.0  # a write the browser has not taken by then ends its stream


class Streams:
    """How many live streams are open, in all and per session (the caps above)."""

    def __init__(self) -> None:
        self.total = 0
        self.by_session: dict[str, int] = {}

    def open(self, session: str) -> str | None:
        """Count one more stream for ``session``; why not (a message), or None when opened."""
        if self.by_session.get(session, 0) >= STREAMS_PER_SESSION:
            return (f"this session has {STREAMS_PER_SESSION} live streams open already: "
                    "close a Live runs tab and try again")  # fmt: skip
        if self.total >= STREAMS:
            return f"{STREAMS} live streams are open already: try again later"
        self.total += 1
        self.by_session[session] = self.by_session.get(session, 0) + 1
        return None

    def close(self, session: str) -> None:
        self.total -= 1
        left = self.by_session.pop(session, 1) - 1
        if left > 0:
            self.by_session[session] = left


def _masked(value: Any) -> Any:
    if isinstance(value, str) and redact.active():
        return redact.redact(value)
    return value


def replay_url(req: ConsoleRequest, e: Event) -> str:
    """The playground, prefilled with this message (its text as the log kept it)."""
    return req.url("playground", text=e.get("text") or "", user=e.get("user") or "",
                   chat=e.get("chat") or "", platform=e.get("platform") or "")  # fmt: skip


def row(req: ConsoleRequest, at: float, e: Event) -> dict[str, Any]:
    """One run (or unmatched message) as the page shows it: :func:`brief`'s fields with
    ``at`` as a clock time and the links to its trace and to a replay."""
    out = brief(at, e)
    out["at"] = clock(at)
    trace_id = out["trace_id"]
    out["trace_url"] = req.url("live/trace", id=trace_id) if trace_id else ""
    out["replay_url"] = replay_url(req, e)
    return out


def brief(at: float, e: Event) -> dict[str, Any]:
    """One run as the stream sends it (``at`` in epoch seconds, no URLs: the script builds
    them; a busy stream's rows are many); :func:`row` adds what the page shows besides."""
    masked = redact.active()
    answer = e.get("answer")
    if type(answer) is str and len(answer) > ANSWER:
        answer = answer[:ANSWER] + "…"
    out = {
        "trace_id": e.get("trace_id") or "",
        "at": at,
        "kind": "run" if e.get("event") == "run.done" else "unmatched",
        "rule": e.get("rule"),
        "user": e.get("user"),
        "chat": e.get("chat"),
        "platform": e.get("platform"),
        "text": e.get("text"),
        "answer": answer,
        "error": e.get("error"),
        "reason": e.get("reason"),
        "ms": e.get("ms"),
    }
    if masked:
        for key in ("text", "answer", "error"):
            out[key] = _masked(out[key])
    for flag in ("nested", "scheduled", "dry_run"):
        if flag in e:
            out[flag] = True
    return out


async def _live(req: ConsoleRequest) -> web.StreamResponse:
    feed = feed_for(req.app)
    wanted = Filter.of(req.request.query)
    runs = [row(req, at, as_event(r)) for at, r in feed.latest(wanted, ROWS)]
    data = {
        "runs": runs,
        "filter": {**wanted.query(), "errors": wanted.errors},
        "stream": req.url("live/stream", **wanted.query()),
        "kept": len(feed.recent),
    }
    return await page(req, "live.html", data, title="Live runs")


async def _stream(req: ConsoleRequest) -> web.StreamResponse:
    streams: Streams = req.site.state.setdefault("live.streams", Streams())
    refused = streams.open(req.session.id)
    if refused is not None:
        raise Refused(503, refused)
    long_lived(req.request)  # bounded by the caps above, not by the in-flight slots
    feed = feed_for(req.app)
    wanted = Filter.of(req.request.query)
    sub = feed.subscribe(wanted)
    last = _last_event_id(req.request)  # a reconnect: what came since its last run first
    backlog = feed.since(wanted, last) if last is not None else []
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",  # nginx: pass each event on at once
            "X-Content-Type-Options": "nosniff",
        }
    )
    try:
        await response.prepare(req.request)
        await _write(response, b"retry: 2000\n: tmy live runs\n\n")
        if backlog:
            await _write(response, _events(backlog))
        await _follow(req, sub, response, backlog[-1][0] if backlog else last)
    except TimeoutError:  # the browser stopped reading: drop it, not wait on it
        if req.request.transport is not None:
            req.request.transport.abort()
    except (ConnectionError, asyncio.CancelledError):
        pass  # the browser left, or the daemon is stopping
    finally:
        feed.unsubscribe(sub)
        streams.close(req.session.id)
    return response


async def _write(response: web.StreamResponse, data: bytes) -> None:
    """Write ``data``; TimeoutError when the browser has not taken it in :data:`WRITE_SECONDS`."""
    async with asyncio.timeout(WRITE_SECONDS):
        await response.write(data)


def _last_event_id(request: web.Request) -> float | None:
    """The time of the last batch a reconnecting browser got (``Last-Event-ID``), or None."""
    try:
        return float(request.headers.get("Last-Event-ID", ""))
    except ValueError:
        return None


def _events(items: list[Seen]) -> bytes:
    """``items`` as SSE events, the last one carrying its batch's time as the event id, so a
    browser that reconnects (every :data:`STREAM_SECONDS`) says where it stopped."""
    lines = [b"data: " + orjson.dumps(brief(at, as_event(r))) + b"\n\n" for at, r in items]
    lines[-1] = b"id: %s\n" % repr(items[-1][0]).encode() + lines[-1]  # exact: it is compared
    return b"".join(lines)


async def _follow(
    req: ConsoleRequest, sub: Any, response: web.StreamResponse, sent_up_to: float | None
) -> None:
    """Write what the feed offers this view until :data:`STREAM_SECONDS` have passed, the
    browser has gone, its session has ended or the listener is shutting down (looked at
    every :data:`POLL` s). ``sent_up_to``: runs of batches up to that time were sent
    already (a reconnect's backlog), so they are not sent twice."""
    now = time.monotonic()
    ends, quiet_since = now + STREAM_SECONDS, now
    auth = req.site.auth
    while now < ends and not _closing(req.request) and auth.alive(req.session):
        skipped, items = await sub.next(POLL)
        maybe = sub.take_maybe()
        now = time.monotonic()
        if not skipped and not items and not maybe:
            if now - quiet_since >= KEEPALIVE:
                await _write(response, b": keep-alive\n\n")
                quiet_since = now
            continue
        chunk = [b"event: skipped\ndata: %d\n\n" % skipped] if skipped else []
        if maybe:  # sampled out, whose user / chat / platform is not known
            chunk.append(b"event: sampled\ndata: %d\n\n" % maybe)
        if sent_up_to is not None:
            items = [(at, r) for at, r in items if at > sent_up_to]
        if items:
            chunk.append(_events(items))
        if chunk:
            await _write(response, b"".join(chunk))
        quiet_since = now
        await asyncio.sleep(PACE)
        now = time.monotonic()


def _closing(request: web.Request) -> bool:
    """The browser has gone, or the listener is shutting down: aiohttp then waits for the
    handlers in flight (``shutdown_grace``, 30 s) — a stream must end at once, not last."""
    transport = request.transport
    if transport is None or transport.is_closing():
        return True
    return bool(getattr(request.protocol, "_force_close", False))  # set by its shutdown()


async def trace_data(req: ConsoleRequest, trace_id: str) -> dict[str, Any]:
    """One run's trace: from the log file when it has the run, else from the feed."""
    try:
        check_trace_id(trace_id)
    except ConfigError as exc:
        raise Refused(400, str(exc)) from None
    feed = feed_for(req.app)
    kept = [as_event(r) for _, r in feed.find(trace_id)]
    text, view, source = "", None, ""
    log_file = req.app.settings.log_file
    if log_file:
        with contextlib.suppress(TmyError, OSError):
            text, view = await look_up_async(log_file, trace_id, 200, Bound())
            source = "the log file"
    if view is None and kept:
        view = build_view(trace_id, kept)
        text, source = render(view, 200), "the console's copy of recent runs (not in the log)"
    if view is None:
        raise Refused(404, f"no run {trace_id} in the log or among the recent runs")
    data = _redacted(as_dict(view))
    message = view.message or {}
    first = kept[0] if kept else {**message, "text": message.get("text")}
    return {
        "trace_id": trace_id,
        "source": source,
        "text": _masked(text),
        "view": data,
        "replay_url": replay_url(req, first),
    }


def _redacted(data: dict[str, Any]) -> dict[str, Any]:
    if not redact.active():
        return data
    return orjson.loads(redact.redact_line(orjson.dumps(data, default=str)))


async def _trace(req: ConsoleRequest) -> web.StreamResponse:
    trace_id = req.query("id").strip()
    data = await trace_data(req, trace_id)
    return await page(req, "live_trace.html", data, title=f"Trace {trace_id}", current="live")


ROUTES: tuple[Route, ...] = (
    Route("GET", "live", _live),
    Route("GET", "live/stream", _stream),
    Route("GET", "live/trace", _trace),
)
