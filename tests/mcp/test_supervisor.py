"""A server killed and restarted mid-conversation: the next call works — it does not wait out
the supervisor's pause (made long here, as after a few quick restarts it is), it wakes the
supervisor to connect at once and waits for that attempt. A server that stays down fails the
call within the documented bound. Real toolbox processes, restarted while tmy's loop runs."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

import pytest

from tests.mcp.test_servers import pid_of, servers, until
from tmy.mcp import servers as servers_module
from tmy.mcp import supervisor
from tmy.mcp.servers import McpError

pytestmark = pytest.mark.slow

LONG_PAUSE = 20.0  # the supervisor's first pause after a loss: far past any wait below


@pytest.fixture
def long_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    """The supervisor pauses 10..20 s between attempts (a backoff grown by quick restarts)."""
    monkeypatch.setattr(supervisor, "RETRY_BASE", LONG_PAUSE)


async def test_a_killed_and_restarted_http_server_answers_the_next_call(
    toolbox_http, long_pause
) -> None:
    async with servers(web=toolbox_http.config) as s:
        await s.wait_listed(20)
        first = await pid_of(s, "web")
        await toolbox_http.kill()
        await until(lambda: s.state("web")["state"] == "reconnecting")  # and pausing, long
        await toolbox_http.start()
        assert await pid_of(s, "web") == toolbox_http.pid != first
        assert s.state("web")["reconnects"] == 1


async def test_a_killed_stdio_server_is_spawned_again_by_the_next_call(
    toolbox_stdio, long_pause
) -> None:
    async with servers(box=toolbox_stdio.config) as s:
        await s.wait_listed(20)
        first = await pid_of(s, "box")
        os.kill(first, signal.SIGKILL)
        await until(lambda: s.state("box")["state"] == "reconnecting")
        assert await pid_of(s, "box") != first
        assert (await s.call("box", "echo", {"text": "back"})).text == "back"
        assert s.state("box")["reconnects"] == 1


async def test_concurrent_calls_share_one_reconnect(toolbox_http, long_pause) -> None:
    async with servers(web=toolbox_http.config) as s:
        await s.wait_listed(20)
        await toolbox_http.kill()
        await until(lambda: s.state("web")["state"] == "reconnecting")
        await toolbox_http.start()
        calls = [s.call("web", "echo", {"text": str(i)}) for i in range(5)]
        assert [r.text for r in await asyncio.gather(*calls)] == ["0", "1", "2", "3", "4"]
        assert s.state("web")["reconnects"] == 1


async def test_two_quick_restarts_and_the_next_call_works(toolbox_http) -> None:
    """Restarts closer together than STABLE (10 s): the backoff is not reset by time, and it
    does not matter — each next call connects at once."""
    async with servers(web=toolbox_http.config) as s:
        await s.wait_listed(20)
        for n in range(1, 4):
            await toolbox_http.restart()
            assert await pid_of(s, "web") == toolbox_http.pid
            assert s.state("web")["reconnects"] == n


async def test_a_server_that_stays_down_fails_the_call_once_the_attempt_fails(
    toolbox_http, long_pause
) -> None:
    async with servers(web=toolbox_http.config) as s:
        await s.wait_listed(20)
        await toolbox_http.kill()
        await until(lambda: s.state("web")["state"] == "reconnecting")
        started = time.monotonic()
        with pytest.raises(McpError) as caught:
            await s.call("web", "echo", {"text": "x"})
        assert time.monotonic() - started < servers_module.RECONNECT_WAIT
        message = str(caught.value)
        assert message.startswith("MCP server 'web' is not connected (reconnecting: ConnectError")
        assert "waited" not in message  # the attempt failed: no need to wait out the bound
        assert s.state("web")["reconnects"] == 0


async def test_a_server_that_does_not_answer_fails_the_call_after_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The attempt hangs (a server that never answers the handshake): the call gives up after
    RECONNECT_WAIT, or its own timeout when that is shorter, and says how long it waited."""
    monkeypatch.setattr(servers_module, "RECONNECT_WAIT", 1.0)
    mute = {"command": sys.executable, "args": ["-c", "import time; time.sleep(60)"], "timeout": 30}
    async with servers(mute=mute) as s:
        started = time.monotonic()
        with pytest.raises(McpError, match=r"^MCP server 'mute' is not connected \(starting\); "):
            await s.call("mute", "echo", {"text": "x"})
        assert time.monotonic() - started < 1.0 + 5  # the bound, and then some for a slow box
        # the call's own 0.3 s, less what went before the wait (a few ms on a busy box)
        with pytest.raises(McpError, match=r"; waited 0\.(3|2\d+) s for it$"):
            await s.call("mute", "echo", {"text": "x"}, timeout=0.3)
        with pytest.raises(McpError, match=r"; waited 1 s for it$"):
            await s.call("mute", "echo", {"text": "x"})
