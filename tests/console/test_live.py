"""The console's Live runs on a served daemon: the page lists the kept runs (no script
needed) with filters, the SSE stream delivers a run within 2 s, each run's trace (from the
log file, or from the feed when the log has none) with a replay link, escaping, login."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.support.console import ConsoleClient, console_daemon, logged_in

RULES = {
    "r.yaml": """
rules:
  - id: hi
    triggers: [hi]
    steps: [{plugin: ADJUST, input: "hey {USER}"}]
  - id: count
    triggers: ["count *"]
    steps: [{plugin: ADJUST, input: "?= int(QUESTION)"}]
"""
}
EVIL = "<script>alert(1)</script>"


async def test_the_page_lists_recent_runs_filtered_and_escaped() -> None:
    async with console_daemon(RULES) as daemon:
        await daemon.push("hi", user="ann", chat="g1")
        await daemon.push("count x", user=EVIL, chat="g2")
        await daemon.push("nothing", user="bob", chat="g1")
        async with logged_in(daemon, viewer=True) as viewer:
            page = await viewer.get("live")
            assert page.status_code == 200 and "live.js" in page.text
            assert EVIL not in page.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
            data = await viewer.json("live")
            assert [(r["kind"], r["rule"], r["user"]) for r in data["runs"]] == [
                ("unmatched", None, "bob"),
                ("run", "count", EVIL),
                ("run", "hi", "ann"),
            ]
            ann = data["runs"][2]
            assert ann["answer"] == "hey ann" and ann["error"] is None and ann["ms"] >= 0
            assert ann["trace_url"].endswith(f"live/trace?id={ann['trace_id']}")
            replay = parse_qs(urlsplit(ann["replay_url"]).query)
            assert replay == {"text": ["hi"], "user": ["ann"], "chat": ["g1"], "platform": ["test"]}
            errors = await viewer.json("live", errors="1")
            assert [r["rule"] for r in errors["runs"]] == ["count"] and errors["runs"][0]["error"]
            assert [r["user"] for r in (await viewer.json("live", chat="g1"))["runs"]] == [
                "bob",
                "ann",
            ]
            assert (await viewer.json("live", rule="hi", platform="other"))["runs"] == []


async def _events(client: ConsoleClient, sub: str, found: Any, seconds: float) -> list[dict]:
    """Read ``sub``'s SSE until ``found(events)`` or ``seconds`` pass."""
    events: list[dict] = []
    name = "message"
    async with client.http.stream("GET", client.url(sub)) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        ends = time.monotonic() + seconds
        async with asyncio.timeout(seconds):
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    data = line[6:]
                    events.append({"event": name, "data": json.loads(data)})
                    name = "message"
                    if found(events) or time.monotonic() > ends:
                        break
    return events


@pytest.mark.slow
async def test_a_run_appears_in_the_stream_within_2_seconds() -> None:
    async with console_daemon(RULES) as daemon, logged_in(daemon) as admin:
        reader = asyncio.create_task(
            _events(admin, "live/stream?user=ann", lambda ev: len(ev) >= 1, 10)
        )
        await asyncio.sleep(0.3)  # the stream is open
        await daemon.push("hi", user="bob")  # filtered out
        sent = time.monotonic()
        reply = await daemon.push("hi", user="ann", chat=EVIL)
        events = await reader
        assert time.monotonic() - sent < 2.0
        [event] = events
        assert event["event"] == "message" and event["data"]["trace_id"] == reply.trace_id
        assert event["data"]["chat"] == EVIL and event["data"]["answer"] == "hey ann"


async def test_the_stream_needs_a_login() -> None:
    async with console_daemon(RULES) as daemon:
        path = daemon.settings.web_console.path
        async with httpx.AsyncClient(base_url=daemon.url) as anon:
            for sub in ("live/stream", "live", "live/trace?id=0123456789abcdef"):
                r = await anon.get(f"{path}/{sub}", headers={"Accept": "text/event-stream"})
                assert r.status_code == 401, sub


async def test_a_trace_from_the_feed_when_the_log_has_none() -> None:
    async with console_daemon(RULES) as daemon:
        reply = await daemon.push("count x", user=EVIL, chat="g2")
        async with logged_in(daemon) as admin:
            data = await admin.json("live/trace", id=reply.trace_id)
            assert data["source"].startswith("the console's copy")
            assert data["view"]["rule"] == "count" and data["view"]["reply"]["error"]
            assert "int(QUESTION)" in data["text"] and reply.trace_id in data["text"]
            assert parse_qs(urlsplit(data["replay_url"]).query)["user"] == [EVIL]
            page = await admin.get("live/trace", params={"id": reply.trace_id})
            assert page.status_code == 200 and "Replay in the playground" in page.text
            assert EVIL not in page.text
            assert (await admin.get("live/trace", params={"id": "nope"})).status_code == 400
            missing = await admin.get("live/trace", params={"id": "0123456789abcdef"})
            assert missing.status_code == 404


async def test_a_trace_from_the_log_file(log_file: Path) -> None:
    async with console_daemon(RULES, log_file=str(log_file)) as daemon:
        reply = await daemon.push("hi", user="ann", chat="g1")
        async with logged_in(daemon) as admin:
            data = await admin.json("live/trace", id=reply.trace_id)
            assert data["source"] == "the log file"
            assert data["view"]["rule"] == "hi" and data["view"]["reply"]["answer"] == "hey ann"
            assert data["view"]["steps"][0]["result"] == "hey ann"


@pytest.mark.slow
async def test_an_open_stream_does_not_hold_up_the_daemons_shutdown() -> None:
    """aiohttp waits up to shutdown_grace (30 s) for handlers in flight: the stream ends."""
    async with (
        console_daemon(RULES) as daemon,
        logged_in(daemon) as admin,
        admin.http.stream("GET", admin.url("live/stream")) as response,
    ):
        assert response.status_code == 200
        started = time.monotonic()
        await daemon.app.__aexit__(None, None, None)  # what the daemon does on SIGTERM
        assert time.monotonic() - started < 10


async def _read(client: ConsoleClient, sub: str, count: int, last_id: str = "") -> tuple:
    """The first ``count`` runs of ``sub``'s SSE (their trace ids) and the last event id."""
    headers = {"Last-Event-ID": last_id} if last_id else {}
    traces: list[str] = []
    event_id = ""
    async with client.http.stream("GET", client.url(sub), headers=headers) as response:
        async with asyncio.timeout(10):
            async for line in response.aiter_lines():
                if line.startswith("id: "):
                    event_id = line[4:]
                elif line.startswith("data: "):
                    traces.append(json.loads(line[6:])["trace_id"])
                    if len(traces) >= count:
                        break
    return traces, event_id


@pytest.mark.slow
async def test_a_reconnecting_view_gets_the_runs_it_missed_once() -> None:
    """The browser reconnects (a stream lasts STREAM_SECONDS) with Last-Event-ID: the runs
    reported while it was away come first, none twice."""
    async with console_daemon(RULES) as daemon, logged_in(daemon) as admin:
        reader = asyncio.create_task(_read(admin, "live/stream?user=ann", 1))
        await asyncio.sleep(0.3)
        first = await daemon.push("hi", user="ann")
        seen, last_id = await reader
        assert seen == [first.trace_id] and last_id
        await asyncio.sleep(0.2)  # a later batch than the one seen
        missed = [(await daemon.push("hi", user="ann")).trace_id for _ in range(3)]
        await daemon.push("hi", user="bob")  # not this view's
        again, _ = await _read(admin, "live/stream?user=ann", 3, last_id)
        assert again == missed
