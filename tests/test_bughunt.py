"""Bug hunt: each test shows one defect a review found (each failed before its fix)."""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tmy.store import open_store
from tmy.store.base import MISSING
from tmy.testing import Bot

# A plugin whose step waits on a gate the test controls (no sleeps, no timing).
GATE_PLUGIN = """
import asyncio
import json

async def gated(value, cfg, ctx):
    gates = ctx.services.extra.setdefault("gates", {})
    entered = gates.setdefault("entered", asyncio.Event())
    release = gates.setdefault("release", asyncio.Event())
    entered.set()
    await release.wait()
    return value

def register(registry):
    registry.add("GATED", gated)
"""


@pytest.fixture
def gate_plugins(tmp_path: Path) -> Path:
    folder = tmp_path / "bughunt-plugins"
    folder.mkdir()
    (folder / "bughunt_gate.py").write_text(GATE_PLUGIN, encoding="utf-8")
    return folder


def _gates(bot: Bot) -> dict[str, asyncio.Event]:
    gates = bot.engine.services.extra.setdefault("gates", {})
    gates.setdefault("entered", asyncio.Event())
    gates.setdefault("release", asyncio.Event())
    return gates


# --------------------------------------------------------------------------------------
# 1. A locked read-modify-write step and a list-mode update on the same variable
#    do not exclude each other: the list-mode change is lost (a member served twice).
# --------------------------------------------------------------------------------------

QUEUE_RULES = """
variables:
  queue: {scope: global, default: ["x"]}
rules:
  - id: push
    triggers: ["push *"]
    steps:
      - plugin: GATED
        input: "?= queue + [QUESTION]"
        save: queue
  - id: next
    triggers: ["next"]
    steps:
      - plugin: ADJUST
        input: SHIFT
        INPUT: queue
"""


async def test_locked_step_and_list_mode_update_do_not_lose_updates(
    store_url: str, gate_plugins: Path
) -> None:
    async with Bot({"q.yaml": QUEUE_RULES}, plugins=gate_plugins, store=store_url) as bot:
        gates = _gates(bot)
        push = asyncio.create_task(bot.ask("push y"))
        await asyncio.wait_for(gates["entered"].wait(), 10)
        # "push" now holds queue's lock between its read and its write; a SHIFT
        # arriving meanwhile must wait for it instead of landing in between
        shift = asyncio.create_task(bot.ask("next"))
        await asyncio.sleep(0.2)
        assert not shift.done(), "the SHIFT ran while a read-modify-write held the lock"
        gates["release"].set()
        pushed, shifted = await asyncio.wait_for(asyncio.gather(push, shift), 10)
        assert pushed.error is None and shifted.error is None
        assert shifted.text == "x"
        # x was served once and is gone; y was pushed and is still there
        assert await bot.var("queue") == ["y"]


# --------------------------------------------------------------------------------------
# 2. RedisStore.update group commit: a leader cancelled while committing a later batch
#    leaves the riders of that batch waiting forever.
# --------------------------------------------------------------------------------------


@pytest.mark.redis
@pytest.mark.slow
async def test_redis_update_leader_cancelled_does_not_strand_riders(redis_server: Any) -> None:
    server = redis_server()
    admin = server.client()
    store = open_store(server.url)
    await store.open()
    try:
        paused = asyncio.Event()

        def leader_fn(cur: Any) -> tuple[Any, Any]:
            return (0 if cur is MISSING else cur) + 1, "leader"

        def rider_fn(cur: Any) -> tuple[Any, Any]:
            # runs in the leader's task just before it sends the riders' batch:
            # freeze Redis so that compare-and-set stays in flight
            if not paused.is_set():
                admin.client_pause(3000)
                paused.set()
            return (0 if cur is MISSING else cur) + 1, "rider"

        leader = asyncio.create_task(store.update("k", leader_fn))
        await asyncio.sleep(0)  # the leader is now committing its own batch
        rider = asyncio.create_task(store.update("k", rider_fn))
        await asyncio.wait_for(paused.wait(), 10)
        await asyncio.sleep(0.2)  # the riders' CAS is in flight, Redis is paused
        leader.cancel()  # e.g. the leader's run hit its step timeout
        await asyncio.wait({leader}, timeout=10)
        admin.client_unpause()
        # the rider must settle (with its result or an error), never hang
        done, _ = await asyncio.wait({rider}, timeout=5)
        if rider not in done:
            rider.cancel()
        assert rider in done, "the rider of the cancelled leader's batch hangs forever"
    finally:
        admin.client_unpause()
        admin.close()
        await store.close()


# --------------------------------------------------------------------------------------
# 3. Engine.handle raises when the final STEP_RESULT is a map with non-string keys
#    (an expression can build one): to_text lets json's TypeError escape.
# --------------------------------------------------------------------------------------


async def test_handle_never_raises_on_a_result_json_cannot_render() -> None:
    rules = """
    rules:
      - id: t
        triggers: ["t"]
        steps:
          - plugin: ADJUST
            input: "?= {(1, 2): 'pair'}"
    """
    async with Bot({"t.yaml": textwrap.dedent(rules)}) as bot:
        reply = await bot.ask("t")  # must not raise
        assert reply.rule == "t"


# --------------------------------------------------------------------------------------
# 4. Graceful stop: serve() stops adapters before draining, and ConsoleAdapter.stop()
#    cancels the console task, so a console run in flight is cancelled, not finished.
# --------------------------------------------------------------------------------------

GATED_RULES = """
rules:
  - id: slow
    triggers: ["slow"]
    steps:
      - plugin: GATED
        input: "done"
"""


async def test_console_stop_lets_the_run_in_flight_finish(
    gate_plugins: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import sys

    from tmy.adapters.console import ConsoleAdapter

    monkeypatch.setattr(sys, "stdin", io.StringIO("slow\n"))
    out = io.StringIO()
    async with Bot({"g.yaml": GATED_RULES}, plugins=gate_plugins) as bot:
        gates = _gates(bot)
        console = ConsoleAdapter(user="op", out=out)
        await console.start(bot.engine.handle)
        await asyncio.wait_for(gates["entered"].wait(), 10)
        # SIGTERM: serve() stops its adapters, then drains the engine
        await console.stop()
        gates["release"].set()
        assert await bot.engine.drain(10)
        await asyncio.sleep(0.05)
        assert "done" in out.getvalue(), "the console's run in flight was cancelled"


# --------------------------------------------------------------------------------------
# 5. `vars del NAME[path]` silently resets the WHOLE variable (data loss) instead of
#    deleting the position or refusing a path (README: `del NAME`).
# --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_vars_del_with_a_path_does_not_wipe_the_whole_variable(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parent.parent
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "s.yaml").write_text(
        "variables:\n  scores: {scope: global, default: {}}\n"
        "rules:\n  - id: r\n    triggers: [r]\n    steps:\n      - {plugin: ADJUST}\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMY_")}
    common = ["--rules", str(rules), "--store", f"sqlite:///{tmp_path / 's.db'}"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "run.py", *common, *args],
            cwd=repo, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    assert run("vars", "set", "scores[ann]", "5").returncode == 0
    assert run("vars", "set", "scores[bob]", "7").returncode == 0
    deleted = run("vars", "del", "scores[bob]")
    after = json.loads(run("vars", "get", "scores").stdout)
    # either refuse the path, or delete only bob's entry; never lose ann's score
    assert after.get("ann") == 5, f"del exited {deleted.returncode}: {deleted.stdout!r}"


# --------------------------------------------------------------------------------------
# 6. A variable default that JSON cannot hold (a YAML date) passes `check` and the
#    load, then fails at run time (and crashes `vars list` with a traceback).
# --------------------------------------------------------------------------------------


async def test_a_default_json_cannot_hold_is_a_load_time_error() -> None:
    from tmy.errors import RuleError

    rules = """
    variables:
      days: {scope: global, default: [2024-01-01, 2024-01-02]}
    rules:
      - id: next
        triggers: ["next"]
        steps:
          - {plugin: ADJUST, input: LOOPBACK, INPUT: days}
    """
    with pytest.raises(RuleError, match="days"):
        async with Bot({"d.yaml": textwrap.dedent(rules)}) as bot:
            await bot.ask("next")


# --------------------------------------------------------------------------------------
# 7. RedisStore.update trusts its per-process cache when fn changes nothing: on a
#    stale guess (another daemon wrote meanwhile) it returns fn's result computed on
#    the stale value and writes nothing, so the caller's write is silently lost.
# --------------------------------------------------------------------------------------


@pytest.mark.redis
async def test_redis_update_on_a_stale_guess_is_not_lost(
    redis_url: str, redis_namespace: str
) -> None:
    url = f"{redis_url}?prefix={redis_namespace}"
    daemon_a, daemon_b = open_store(url), open_store(url)
    await daemon_a.open()
    await daemon_b.open()
    try:
        await daemon_a.set("var/global/scores", {"ann": 5})  # A remembers this raw value
        await daemon_b.set("var/global/scores", {"ann": 7})  # another daemon changes it

        def save_ann_5(current: Any) -> tuple[Any, Any]:  # what `save: scores[ann]` does
            current["ann"] = 5
            return current, dict(current)

        seen = await daemon_a.update("var/global/scores", save_ann_5)
        assert seen == {"ann": 5}
        assert await daemon_b.get("var/global/scores") == {"ann": 5}, "A's save was lost"
    finally:
        await daemon_a.close()
        await daemon_b.close()


# --------------------------------------------------------------------------------------
# 8. A read-modify-write step whose `save:` position is computed (`save: "?= ..."`, or
#    a template root the loader cannot see) takes no lock: concurrent increments are lost.
# --------------------------------------------------------------------------------------


@pytest.mark.redis
async def test_computed_save_position_still_locks_the_variable(
    redis_url: str, redis_namespace: str
) -> None:
    rules = """
    variables:
      visits: {scope: global, default: 0}
    rules:
      - id: hello
        triggers: ["hello"]
        steps:
          - plugin: ADJUST
            input: "?= visits + 1"
            save: "?= 'visits'"
    """
    store = f"{redis_url}?prefix={redis_namespace}"
    async with Bot({"v.yaml": textwrap.dedent(rules)}, store=store) as bot:
        replies = await asyncio.gather(*(bot.ask("hello", user=f"u{i}") for i in range(50)))
        assert all(r.error is None for r in replies)
        assert await bot.var("visits") == 50


# --------------------------------------------------------------------------------------
# 9. `serve` started from a terminal does not exit on SIGTERM: the console's blocking
#    input() thread keeps asyncio.run() waiting in shutdown_default_executor until
#    someone presses Enter.
# --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_serve_on_a_terminal_exits_on_sigterm(tmp_path: Path) -> None:
    import os
    import pty
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    repo = Path(__file__).resolve().parent.parent
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.yaml").write_text(
        "rules:\n  - id: r\n    triggers: [r]\n    steps:\n      - {plugin: ADJUST}\n",
        encoding="utf-8",
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMY_")}
    proc = subprocess.Popen(
        [sys.executable, str(repo / "run.py"), "--rules", str(rules),
         "--store", f"sqlite:///{tmp_path / 't.db'}", "serve", "--http", f"127.0.0.1:{port}"],
        stdin=slave, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except OSError:
                assert time.monotonic() < deadline, "serve did not come up"
                time.sleep(0.1)
        time.sleep(0.3)  # the console is waiting for a line
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=8)
        except subprocess.TimeoutExpired:
            pytest.fail("serve still running 8 s after SIGTERM (waiting for a line on stdin)")
    finally:
        if proc.poll() is None:
            os.write(master, b"\n")
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        os.close(master)
        os.close(slave)
