"""Live streams hold no in-flight slot of the listener (so idle ones cannot crowd out
messages), are capped per session and in all (503 beyond), and end at logout."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import httpx
import pytest

from tests.support.console import ConsoleClient, console_daemon, logged_in
from tmy.console import live
from tmy.console.live import STREAMS_PER_SESSION, Streams

RULES = {
    "r.yaml": "rules:\n- id: hi\n  triggers: [hi]\n  steps: [{plugin: ADJUST, input: hello}]\n"
}


def test_streams_are_capped_per_session_and_in_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "STREAMS", STREAMS_PER_SESSION + 2)
    streams = Streams()
    for _ in range(STREAMS_PER_SESSION):
        assert streams.open("a") is None
    assert "this session has" in (streams.open("a") or "")
    assert streams.open("b") is None and streams.open("b") is None
    assert "open already" in (streams.open("c") or "")
    streams.close("a")
    assert streams.open("c") is None
    for session in ["a"] * (STREAMS_PER_SESSION - 1) + ["b", "b", "c"]:
        streams.close(session)
    assert streams.total == 0 and streams.by_session == {}


async def _open(stack: AsyncExitStack, client: ConsoleClient) -> httpx.Response:
    response = await stack.enter_async_context(client.http.stream("GET", client.url("live/stream")))
    if response.status_code == 200:
        lines = response.aiter_lines()
        assert (await anext(lines)).startswith("retry:"), "the stream has started"
    else:
        await response.aread()
    return response


async def test_open_streams_leave_the_listener_answering_messages() -> None:
    async with (
        console_daemon(RULES, http_max_requests_in_flight=4) as daemon,
        logged_in(daemon, viewer=True) as one,
        logged_in(daemon, viewer=True) as two,
        AsyncExitStack() as stack,
    ):
        opened = [await _open(stack, c) for c in (one, two) for _ in range(STREAMS_PER_SESSION)]
        assert [r.status_code for r in opened] == [200] * 2 * STREAMS_PER_SESSION
        async with httpx.AsyncClient(base_url=daemon.url, timeout=30) as http:
            answers = await asyncio.gather(
                *(http.post("/v1/messages", json={"text": "hi", "user": "u"}) for _ in range(3))
            )
        assert [(r.status_code, r.json()["answer"]) for r in answers] == [(200, "hello")] * 3
        beyond = await _open(stack, one)
        assert beyond.status_code == 503 and "this session has" in beyond.text


async def test_beyond_the_total_cap_a_stream_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "STREAMS", 2)
    async with (
        console_daemon(RULES) as daemon,
        logged_in(daemon, viewer=True) as one,
        logged_in(daemon) as two,
        AsyncExitStack() as stack,
    ):
        assert (await _open(stack, one)).status_code == 200
        assert (await _open(stack, two)).status_code == 200
        refused = await _open(stack, two)
        assert refused.status_code == 503 and "2 live streams are open" in refused.text


async def test_logging_out_ends_the_sessions_streams() -> None:
    async with console_daemon(RULES) as daemon, logged_in(daemon, viewer=True) as viewer:
        async with viewer.http.stream("GET", viewer.url("live/stream")) as response:
            assert response.status_code == 200
            lines = response.aiter_lines()
            assert (await anext(lines)).startswith("retry:")
            out = await viewer.post("logout")
            assert out.status_code == 303
            async with asyncio.timeout(10):  # ends (a stream lasts 60 s otherwise)
                rest = [line async for line in lines]
            assert not any(line.startswith("data:") for line in rest)
        async with logged_in(daemon, viewer=True) as again, AsyncExitStack() as stack:
            opened = [await _open(stack, again) for _ in range(STREAMS_PER_SESSION)]
            assert all(r.status_code == 200 for r in opened), "the ended streams were let go"
