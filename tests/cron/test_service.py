"""The scheduler (tmy.cron.service): replies through an adapter, edge values and reloads,
the chat switch, commits on a cluster, fenced writes against a chat run."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.cron.scheduled import GROUP, UTC_ZONE, counted, history, load, wait_for
from tests.support.onebot_fake import connect_reverse
from tmy.config import load_settings
from tmy.message import Message
from tmy.testing import serving

# -- the reply goes out through an adapter ----------------------------------------------------

SEND_RULES = """
rules:
  - id: digest
    schedule:
      every: 1s
      send_to: [{platform: onebot, chat: "group:777"}]
      input: daily digest
    steps:
      - {plugin: ADJUST, input: "{QUESTION} for {CHAT} at {FIRE_TIME} by {USER}"}
"""


@pytest.mark.timeout(60)
async def test_a_cron_reply_reaches_a_chat_through_onebot(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.yaml").write_text(SEND_RULES)
    settings = load_settings(
        env={},
        rules=str(rules),
        plugins=str(tmp_path / "none"),
        store=f"sqlite:///{tmp_path / 'tmy.db'}",
        http_listen="127.0.0.1:0",
        console=False,
        watch=False,
        timezone="UTC",
        adapters={"onebot": {"enabled": True, "send_interval": 0}},
    )
    began = time.time()
    async with serving(settings=settings) as daemon:
        async with aiohttp.ClientSession() as session:
            impl = await connect_reverse(
                session, f"ws://127.0.0.1:{daemon.http.port}/onebot/v11/ws"
            )
            action = await asyncio.wait_for(impl.next_action(), 10)
            assert action["action"] == "send_msg"
            assert action["params"]["group_id"] == 777
            text = "".join(
                seg["data"]["text"] for seg in action["params"]["message"] if seg["type"] == "text"
            )
            assert text.startswith("daily digest for group:777 at ")
            assert text.endswith(" by cron")
            fire = datetime.fromisoformat(text.split(" at ")[1].split(" by ")[0])
            # a time while this test ran, to the second (not a bound on how long it took)
            assert fire.microsecond == 0 and began - 1 <= fire.timestamp() <= time.time()
            await impl.ws.close()
        # runs are kept in the history with their trace ids and send results (a firing
        # before the test client connected is kept too, with the send's error)
        for _ in range(50):
            jobs = await _cron_json(settings)
            if any(r["sent"] == "ok" for r in jobs[0]["last_runs"]):
                break
            await asyncio.sleep(0.1)
        run = next(r for r in jobs[0]["last_runs"] if r["sent"] == "ok")
        assert run["outcome"] == "ok" and len(run["trace_id"]) == 16
        for r in jobs[0]["last_runs"]:  # a send before the client connected is retried
            assert r["sent"].startswith(("ok", "error: onebot: no bot account connected (")), r
        assert run["target"] == "onebot:group:777:"
        assert len(jobs[0]["next"]) == 3


async def _cron_json(settings: Any) -> list[dict[str, Any]]:
    from tmy.app import App
    from tmy.builtins import extensions
    from tmy.cron import jobs_report

    async with App(settings.with_(http_enabled=False), extensions=extensions()) as app:
        return await jobs_report(app.engine.rulebook, app.store, UTC_ZONE)


# -- edge values and reloads -------------------------------------------------------------------


@pytest.mark.timeout(30)
async def test_misfire_grace_zero_means_on_time_only_and_still_fires() -> None:
    rules = {"r.yaml": counted("every: 1s, misfire_grace: 0")}
    async with serving(rules, http_enabled=False) as daemon:
        store = daemon.app.store
        runs = await wait_for(lambda: history(store), timeout=4)
        assert runs and runs[0]["outcome"] == "ok", "an on-time firing was skipped as late"
        assert await store.get("var/global/ticks") == len(runs)


@pytest.mark.timeout(30)
async def test_raising_misfire_grace_by_reload_never_reruns_an_occurrence(tmp_path: Path) -> None:
    """A Cron of its own: the test hands it the raised schedule (``update``) directly."""
    import sqlite3

    from tmy.cron import Cron
    from tmy.testing import Bot

    db = tmp_path / "tmy.db"
    # every hour, an hour of grace: starting now runs the latest (already past) occurrence
    rules = {"r.yaml": counted("every: 1h, misfire_grace: 3600")}
    async with Bot(rules, store=f"sqlite:///{db}") as bot:
        store = bot.app.store
        cron = Cron(bot.engine, store, None, default_zone=UTC_ZONE)
        cron.start(bot.engine.rulebook)
        try:
            assert await wait_for(lambda: history(store)), "the missed occurrence did not run"
            with sqlite3.connect(db) as conn:
                rows = conn.execute(
                    "SELECT key, expires FROM kv WHERE key LIKE '%cron/done/%'"
                ).fetchall()
            # the done mark outlives the largest grace a reload may set (a day)
            assert rows and all(exp - time.time() > 86_400 for _, exp in rows), rows
            raised = load(counted("every: 1h, misfire_grace: 86400"))
            cron.update(raised)  # a changed schedule restarts the job: it looks back a day
            await asyncio.sleep(1.0)
            assert await store.get("var/global/ticks") == 1, "the occurrence ran again"
            assert len(await history(store)) == 1
        finally:
            await cron.stop()


# -- the chat switch ------------------------------------------------------------------------


@pytest.mark.timeout(30)
async def test_tmy_off_in_a_chat_stops_its_scheduled_runs_and_posts() -> None:
    """A Cron of its own, started after the chat is off (a served daemon's cron could
    fire before the test turns it off)."""
    from tmy.cron import Cron
    from tmy.testing import Bot

    async with Bot({"r.yaml": counted("every: 1s", GROUP)}) as bot:
        store = bot.app.store
        chat = Message(".tmy off", user="op", chat="group:5", platform="onebot")
        await bot.app.switch.set(chat, True)
        sent: list[str] = []

        async def send(target: Any, text: str) -> None:
            sent.append(text)

        cron = Cron(bot.engine, store, send, default_zone=UTC_ZONE)
        cron.start(bot.engine.rulebook)
        try:
            runs = await wait_for(lambda: history(store), timeout=4)
            assert runs and runs[0]["outcome"] == "skipped: chat off", runs
            assert sent == [] and not await store.get("var/global/ticks")  # not run at all
            await bot.app.switch.set(chat, False)
            assert await wait_for(lambda: asyncio.sleep(0, sent), timeout=4)
        finally:
            await cron.stop()


@pytest.mark.redis
@pytest.mark.timeout(60)
async def test_a_scheduled_run_commits_on_a_redis_cluster_one_slot_at_a_time(
    cluster_store_url: str,
) -> None:
    """A cluster commits one hash slot per script: the done mark (fenced, in its lease's
    slot) and the run's variables (each alone) still land, once."""
    rules = {"r.yaml": counted("every: 1h, misfire_grace: 3600")}
    async with serving(rules, store=cluster_store_url, http_enabled=False) as daemon:
        store = daemon.app.store
        runs = await wait_for(lambda: history(store), timeout=10)
        assert runs and runs[0]["outcome"] == "ok", runs
        assert await store.get("var/global/ticks") == 1


SHARED_COUNTER = """
variables:
  ticks: {scope: global, default: 0}
rules:
  - id: job
    schedule: {every: 1h, misfire_grace: 3600}
    steps:
      - {plugin: ADJUST, input: "?= ticks + 1", save: ticks}
      - {plugin: HTTP, url: "%(url)s", result: text}
      - {plugin: ADJUST, input: "tick {ticks}"}
  - id: bump
    triggers: [bump]
    steps:
      - {plugin: ADJUST, input: "?= ticks + 1", save: ticks}
"""


async def test_a_chat_run_writing_during_a_scheduled_run_is_not_overwritten() -> None:
    """A scheduled run's writes land at its end (fenced): meanwhile its variables stay
    locked, so a chat run's increment waits and is added on top instead of lost."""
    from aiohttp import web

    entered, release = asyncio.Event(), asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        entered.set()
        await release.wait()
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/slow", slow)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    rules = SHARED_COUNTER % {"url": f"http://127.0.0.1:{port}/slow"}
    try:
        async with serving({"r.yaml": rules}, http_enabled=False) as daemon:
            assert "ticks" in daemon.engine.rulebook.locked_variables
            try:
                async with asyncio.timeout(10):
                    await entered.wait()  # the scheduled run read ticks and waits in its step
                bump = asyncio.create_task(daemon.push("bump"))
                await asyncio.sleep(0.3)
                assert not bump.done()  # it waits for the scheduled run's lock
                release.set()
                async with asyncio.timeout(10):
                    assert (await bump).error is None
                assert await daemon.app.store.get("var/global/ticks") == 2
            finally:
                release.set()
    finally:
        await runner.cleanup()
