"""Scheduled rules: validation with file:line, fire times, exactly once across daemons.

The exactly-once tests start real ``serve`` processes sharing one Redis (or one
SQLite file), let an ``every: 1s`` rule fire until both daemons have run some
occurrences, SIGKILL one daemon and check that every occurrence ran exactly once:
no gap, no duplicate.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import aiohttp
import pytest

from tests.support.log_helpers import read_log
from tests.support.onebot_fake import connect_reverse
from tmy.config import load_settings
from tmy.cron import EXTENSION as cron_extension
from tmy.cron import Schedule, Timing, validate_schedule
from tmy.errors import AdapterError, RuleError
from tmy.executors import default_registry
from tmy.message import Message
from tmy.rulebook.loader import load_sources
from tmy.store import open_store
from tmy.testing import LoopbackAdapter, serving

UTC_ZONE = ZoneInfo("UTC")  # what settings.tz holds for timezone: UTC
REPO = Path(__file__).resolve().parent.parent

TICK_RULES = """
variables:
  ticks: {scope: global, default: 0}
  fired: {scope: global, default: []}
rules:
  - id: tick
    schedule: {every: 1s, misfire_grace: 30}
    steps:
      - {plugin: ADJUST, input: "?= ticks + 1", save: ticks}
      - {plugin: ADJUST, input: "?= fired + [FIRE_TIME]", save: fired}
"""


def load(text: str) -> Any:
    return load_sources([(Path("c.yaml"), text)], default_registry([cron_extension]))


def rule_with(schedule: str) -> str:
    return (
        "rules:\n  - id: job\n    schedule:\n"
        + "".join(f"      {line}\n" for line in schedule.strip().splitlines())
        + "    steps: [{plugin: ADJUST, input: 'at {FIRE_TIME}'}]\n"
    )


# -- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ('{cron: "61 * * * *"}', "bad cron expression '61 * * * *'"),
        ('{cron: "* * *"}', "Wrong number of fields"),
        ("{every: 10x}", "'every:' must be a positive interval"),
        ("{every: 0s}", "'every:' must be a positive interval"),
        ('{cron: "* * * * *", every: 5s}', "exactly one of"),
        ("{every: 5s, timezone: Mars/Olympus}", "unknown timezone 'Mars/Olympus'"),
        ("{every: 5s, send_to: [{platform: icq, chat: '1'}]}", "unknown platform 'icq'"),
        ("{every: 5s, send_to: [{platform: onebot}]}", "needs a text 'chat:'"),
        ("{every: 5s, misfire_grace: -1}", "misfire_grace"),
        ("{every: 5s, at: noon}", "unknown key 'at'"),
    ],
)
def test_check_refuses_bad_schedules_with_file_and_line(schedule: str, message: str) -> None:
    text = f"rules:\n  - id: job\n    schedule: {schedule}\n    steps: [{{plugin: ADJUST}}]\n"
    with pytest.raises(RuleError) as caught:
        load(text)
    assert "c.yaml:3" in str(caught.value)
    assert message in str(caught.value)


def test_a_rule_may_have_triggers_and_a_schedule_and_fire_time_is_known() -> None:
    book = load(
        "rules:\n  - id: both\n    triggers: [digest]\n"
        "    schedule: {cron: '0 9 * * 1-5', timezone: Asia/Shanghai,"
        " send_to: [{platform: onebot, chat: 'group:1'}], input: daily}\n"
        "    steps: [{plugin: ADJUST, input: '{QUESTION} {FIRE_TIME}'}]\n"
    )
    schedule = book.by_id["both"].extras["schedule"]
    assert schedule.cron == "0 9 * * 1-5" and schedule.input == "daily"
    assert schedule.send_to[0].chat == "group:1"


def test_every_is_aligned_to_the_epoch_so_every_daemon_agrees() -> None:
    schedule = validate_schedule({"every": "30s"})
    timing = Timing(schedule, UTC_ZONE)
    moment = datetime(2026, 11, 24, 10, 0, 17, 500_000, tzinfo=UTC)
    assert timing.after(moment) == datetime(2026, 11, 24, 10, 0, 30, tzinfo=UTC)
    assert timing.after(datetime(2026, 11, 24, 10, 0, 30, tzinfo=UTC)).second == 0  # strictly after
    assert timing.latest(moment, 60) == datetime(2026, 11, 24, 10, 0, 0, tzinfo=UTC)
    assert timing.latest(moment, 10) is None  # 17.5 s late: outside a 10 s grace


def test_cron_times_are_computed_in_the_schedules_time_zone() -> None:
    timing = Timing(
        validate_schedule({"cron": "0 9 * * 1-5", "timezone": "Asia/Shanghai"}), UTC_ZONE
    )
    # Tuesday 2026-11-24 02:00 UTC is 10:00 in Shanghai: next is Wednesday 09:00 +08:00
    fire = timing.after(datetime(2026, 11, 24, 2, 0, tzinfo=UTC))
    assert fire.isoformat() == "2026-11-25T09:00:00+08:00"
    friday = timing.after(datetime(2026, 11, 27, 2, 0, tzinfo=UTC))
    assert friday.isoformat() == "2026-11-30T09:00:00+08:00"  # the weekend is skipped


def test_after_downtime_only_the_latest_missed_occurrence_is_run() -> None:
    timing = Timing(validate_schedule({"cron": "*/5 * * * *"}), UTC_ZONE)
    now = datetime(2026, 11, 24, 10, 17, 0, tzinfo=UTC)
    assert timing.latest(now, 3600) == datetime(2026, 11, 24, 10, 15, tzinfo=UTC)
    assert timing.latest(now, 60) is None


def test_schedules_compare_by_value_for_reload() -> None:
    a = validate_schedule({"every": "1m", "send_to": [{"platform": "discord", "chat": "9"}]})
    b = validate_schedule({"every": 60, "send_to": [{"platform": "discord", "chat": 9}]})
    assert a == b and isinstance(a, Schedule)


# -- exactly once across daemons --------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(
    rules: Path, store: str, log: Path, *, port: int | None = None, config: Path | None = None
) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMY_", "OPENAI_"))}
    env.update(TMY_LOG_FILE=str(log), TMY_WATCH="0", TMY_TIMEZONE="UTC")
    if config is not None:
        env["TMY_CONFIG"] = str(config)
    return subprocess.Popen(
        [sys.executable, "run.py", "serve", "--no-console", "--rules", str(rules),
         "--store", store, "--http", f"127.0.0.1:{port or _free_port()}"],
        cwd=REPO, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


async def _read_fired(store_url: str) -> tuple[int, list[str]]:
    store = open_store(store_url)
    await store.open()
    try:
        # one read of both (MGET / one query): a commit cannot land between them
        ticks, fired = await store.get_many(["var/global/ticks", "var/global/fired"])
    finally:
        await store.close()
    return (ticks or 0), (fired or [])


def _assert_each_second_once(ticks: int, fired: list[str]) -> None:
    seconds = [int(datetime.fromisoformat(f).timestamp()) for f in fired]
    assert len(seconds) == len(set(seconds)), f"an occurrence ran twice: {sorted(seconds)}"
    ordered = sorted(seconds)
    gaps = [b for a, b in itertools.pairwise(ordered) if b - a != 1]
    assert not gaps, f"occurrences missing before {gaps}: {ordered}"
    # The two steps are separate writes: a read taken while an occurrence runs (or after
    # SIGKILL landed between its steps) may see the counter one ahead of the list.
    ahead = ticks - len(fired)
    assert 0 <= ahead <= 1, f"the counter and the list disagree: {ticks} vs {len(fired)}"


async def _two_daemons_exactly_once(tmp_path: Path, store_url: str) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "tick.yaml").write_text(TICK_RULES)
    logs = [tmp_path / f"d{i}.log" for i in range(2)]
    daemons = [_spawn(rules, store_url, log) for log in logs]

    async def fired_once_each(at_least: int, *, both: bool) -> list[str]:
        """Poll until ``at_least`` occurrences ran (and, with ``both``, each daemon ran
        some); check every read on the way: none twice, none missing."""
        async with asyncio.timeout(40):
            while True:
                ticks, fired = await _read_fired(store_url)
                _assert_each_second_once(ticks, fired)
                took_turns = all(p.exists() and '"cron.done"' in p.read_text() for p in logs)
                if len(fired) >= at_least and (took_turns or not both):
                    return fired
                await asyncio.sleep(0.25)

    try:
        fired = await fired_once_each(5, both=True)  # both daemons take turns
        daemons[0].send_signal(signal.SIGKILL)
        daemons[0].wait()
        await fired_once_each(len(fired) + 3, both=False)  # the survivor goes on alone
    finally:
        for d in daemons:
            if d.poll() is None:
                d.send_signal(signal.SIGTERM)
        for d in daemons:
            try:
                d.wait(20)
            except subprocess.TimeoutExpired:
                d.kill()


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.timeout(90)
async def test_two_daemons_on_one_redis_run_each_occurrence_exactly_once(
    tmp_path: Path, redis_url: str
) -> None:
    prefix = f"crontest{uuid.uuid4().hex[:8]}"
    await _two_daemons_exactly_once(tmp_path, f"{redis_url}?prefix={prefix}")


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_two_processes_on_one_sqlite_file_run_each_occurrence_exactly_once(
    tmp_path: Path,
) -> None:
    await _two_daemons_exactly_once(tmp_path, f"sqlite:///{tmp_path / 'shared.db'}")


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


@pytest.mark.slow  # run.py processes
def test_run_py_cron_lists_jobs_and_their_next_fire_times(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.yaml").write_text(rule_with("cron: '30 8 * * *'\ntimezone: Asia/Tokyo"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMY_")}
    base = [
        sys.executable,
        "run.py",
        "--rules",
        str(rules),
        "--store",
        f"sqlite:///{tmp_path / 'x.db'}",
    ]
    out = subprocess.run(
        [*base, "cron", "--json"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    jobs = json.loads(out.stdout)
    assert [j["rule"] for j in jobs] == ["job"]
    assert all(n.endswith("T08:30:00+09:00") for n in jobs[0]["next"])
    assert jobs[0]["last_runs"] == []
    text = subprocess.run([*base, "cron"], cwd=REPO, env=env, capture_output=True, text=True)
    assert "job  cron '30 8 * * *' (Asia/Tokyo)" in text.stdout and "no runs yet" in text.stdout


@pytest.mark.parametrize(
    ("weekdays", "expected"),
    [("1-5", "mon,tue,wed,thu,fri"), ("0", "sun"), ("7", "sun"), ("0,6", "sun,sat"),
     ("*/2", "sun,tue,thu,sat"), ("mon-fri", "mon-fri"), ("*", "*")],
)  # fmt: skip
def test_cron_weekday_numbers_mean_what_they_mean_in_crontab(weekdays: str, expected: str) -> None:
    from tmy.cron.schedule import _standard_weekdays

    assert _standard_weekdays(weekdays) == expected


# -- fenced by the claim lease: a paused daemon writes and sends nothing more -----------------

STALL_RULES = """
variables:
  ticks: {scope: global, default: 0}
  fired: {scope: global, default: []}
rules:
  - id: stall
    schedule:
      every: 3s
      misfire_grace: 30
      send_to: [{platform: onebot, chat: "group:42"}]
    steps:
      - {plugin: HTTP, url: "http://127.0.0.1:%(port)d/%(name)s?fire={FIRE_TIME}", result: text}
      - {plugin: ADJUST, input: "?= ticks + 1", save: ticks}
      - {plugin: ADJUST, input: "?= fired + [FIRE_TIME]", save: fired}
      - {plugin: ADJUST, input: "tick {FIRE_TIME}"}
"""
STALLS = 2  # occurrences whose first claimant is paused while it holds the lease
STALL_S = 2.5  # more than the tests' 1 s lease


def _sent_texts(impls: list[Any]) -> list[str]:
    texts = []
    for impl in impls:
        for _, frame in impl.actions:
            if frame.get("action") == "send_msg":
                segments = frame["params"]["message"]
                texts.append("".join(s["data"]["text"] for s in segments if s["type"] == "text"))
    return texts


async def _stall_one_of_two(
    tmp_path: Path,
    store_url: str,
    proxies: dict[str, FreezingProxy] | None = None,
    stalls: int = STALLS,
) -> None:
    """Two daemons share ``store_url`` (1 s leases); the first to claim each of two
    occurrences is SIGSTOPped for 2.5 s in the middle of its run (its HTTP step): the
    other takes the lease and runs it; the paused one, resumed, must write and send nothing.

    With ``proxies``, each daemon reaches the store through its own, and instead of a
    SIGSTOP the claimant's link is frozen for 2.5 s: it keeps running, its commit waits
    in the frozen link and reaches the store after the lease moved on."""
    from aiohttp import web

    daemons: dict[str, subprocess.Popen[bytes]] = {}
    stalled: dict[str, str] = {}  # fire time -> the daemon paused in it
    loop = asyncio.get_running_loop()

    async def step(request: web.Request) -> web.Response:
        name, fire = request.match_info["name"], request.query["fire"]
        if fire not in stalled and len(stalled) < stalls and len(daemons) == 2:
            if proxies is not None:
                stalled[fire] = name
                proxies[name].freeze(STALL_S)
            else:
                stalled[fire] = name
                pid = daemons[name].pid
                os.kill(pid, signal.SIGSTOP)  # it holds the claim: its renewals stop too
                loop.call_later(STALL_S, os.kill, pid, signal.SIGCONT)
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/{name}", step)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    config = tmp_path / "tmy.yaml"
    config.write_text("adapters:\n  onebot: {enabled: true, send_interval: 0}\n")
    ports = {}
    for name in ("a", "b"):
        rules = tmp_path / f"rules-{name}"
        rules.mkdir()
        (rules / "stall.yaml").write_text(STALL_RULES % {"port": port, "name": name})
        ports[name] = _free_port()
        url = proxies[name].url(store_url) if proxies is not None else store_url
        daemons[name] = _spawn(
            rules, url, tmp_path / f"{name}.log", port=ports[name], config=config
        )
    impls: list[Any] = []
    try:
        async with aiohttp.ClientSession() as session:
            for name in ("a", "b"):
                impls.append(await _connect_when_up(session, ports[name]))
            for _ in range(600):  # the stalls done
                if len(stalled) == stalls:
                    break
                await asyncio.sleep(0.1)
            assert len(stalled) == stalls, "no occurrence was claimed while both daemons ran"
            for _ in range(300):  # the other daemon ran and posted both stalled occurrences
                _, fired = await _read_fired(store_url)
                texts = _sent_texts(impls)
                if all(f in fired and f"tick {f}" in texts for f in stalled):
                    break
                await asyncio.sleep(0.1)
            # the paused ones resume and find their lease gone: once each said so, nothing
            # more of theirs can land (their commit is what was refused)
            async with asyncio.timeout(STALL_S + 20):
                while _lease_lost_lines(tmp_path) < len(stalled):
                    await asyncio.sleep(0.1)
            await asyncio.sleep(0.3)  # and a post, had one wrongly followed, would be here
            ticks, fired = await _read_fired(store_url)
            assert len(fired) == len(set(fired)), f"an occurrence ran twice: {sorted(fired)}"
            assert ticks == len(fired), "the run's two writes landed apart"
            for fire in stalled:
                assert fired.count(fire) == 1, (fire, fired)
            texts = _sent_texts(impls)
            assert len(texts) == len(set(texts)), f"a scheduled post went out twice: {texts}"
            for fire in stalled:
                assert texts.count(f"tick {fire}") == 1, (fire, texts)
    finally:
        for d in daemons.values():
            if d.poll() is None:
                d.send_signal(signal.SIGCONT)
                d.send_signal(signal.SIGTERM)
        for d in daemons.values():
            try:
                d.wait(20)
            except subprocess.TimeoutExpired:
                d.kill()
        await runner.cleanup()


def _lease_lost_lines(tmp_path: Path) -> int:
    """How many times the daemons "a" and "b" logged that they lost a lease."""
    logs = "".join((tmp_path / f"{n}.log").read_text() for n in ("a", "b"))
    return logs.count('"cron.lease_lost"')


class FreezingProxy:
    """A TCP proxy to a store whose link can be frozen: bytes wait, nothing is lost."""

    def __init__(self, port: int) -> None:
        self.port = port  # the store's
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", 0)

    def url(self, store_url: str) -> str:
        from urllib.parse import urlsplit, urlunsplit

        assert self.server is not None
        parts = urlsplit(store_url)
        listen = self.server.sockets[0].getsockname()[1]
        return urlunsplit(parts._replace(netloc=f"127.0.0.1:{listen}"))

    def freeze(self, seconds: float) -> None:
        self.flowing.clear()
        asyncio.get_running_loop().call_later(seconds, self.flowing.set)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self.flowing.wait()
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()


async def _connect_when_up(session: aiohttp.ClientSession, port: int) -> Any:
    """A fake NapCat connected to the daemon on ``port`` once it listens."""
    for _ in range(600):
        try:
            return await connect_reverse(session, f"ws://127.0.0.1:{port}/onebot/v11/ws")
        except (aiohttp.ClientError, OSError):
            await asyncio.sleep(0.1)
    raise AssertionError(f"no daemon listening on {port}")


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_a_daemon_paused_past_its_lease_on_sqlite_writes_and_sends_nothing(
    tmp_path: Path,
) -> None:
    await _stall_one_of_two(tmp_path, f"sqlite:///{tmp_path / 'shared.db'}?lease_ttl=1")


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.timeout(90)
async def test_a_daemon_paused_past_its_lease_on_redis_writes_and_sends_nothing(
    tmp_path: Path, redis_url: str, redis_namespace: str
) -> None:
    await _stall_one_of_two(tmp_path, f"{redis_url}?prefix={redis_namespace}&lease_ttl=1")


# -- edge values and reloads -------------------------------------------------------------------


def _counted(schedule: str, send_to: str = "") -> str:
    return (
        "variables:\n  ticks: {scope: global, default: 0}\n"
        f"rules:\n  - id: job\n    schedule: {{{schedule}{send_to}}}\n"
        "    steps:\n      - {plugin: ADJUST, input: '?= ticks + 1', save: ticks}\n"
        "      - {plugin: ADJUST, input: 'tick {FIRE_TIME}'}\n"
    )


async def _wait_for(check: Any, timeout: float = 5.0) -> Any:
    """Poll ``check()`` (a coroutine function) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        got = await check()
        if got or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.05)


async def _history(store: Any) -> list[dict[str, Any]]:
    return (await store.get("cron/hist/job")) or []


@pytest.mark.timeout(30)
async def test_misfire_grace_zero_means_on_time_only_and_still_fires() -> None:
    from tmy.cron import Cron
    from tmy.testing import Bot

    async with Bot({"r.yaml": _counted("every: 1s, misfire_grace: 0")}) as bot:
        store = bot.app.store
        cron = Cron(bot.engine, store, None, default_zone=UTC_ZONE)
        cron.start(bot.engine.rulebook)
        try:
            runs = await _wait_for(lambda: _history(store), timeout=4)
        finally:
            await cron.stop()
        assert runs and runs[0]["outcome"] == "ok", "an on-time firing was skipped as late"
        assert await store.get("var/global/ticks") == len(runs)


@pytest.mark.timeout(30)
async def test_raising_misfire_grace_by_reload_never_reruns_an_occurrence(tmp_path: Path) -> None:
    import sqlite3

    from tmy.cron import Cron
    from tmy.testing import Bot

    db = tmp_path / "tmy.db"
    # every hour, an hour of grace: starting now runs the latest (already past) occurrence
    rules = {"r.yaml": _counted("every: 1h, misfire_grace: 3600")}
    async with Bot(rules, store=f"sqlite:///{db}") as bot:
        store = bot.app.store
        cron = Cron(bot.engine, store, None, default_zone=UTC_ZONE)
        cron.start(bot.engine.rulebook)
        try:
            assert await _wait_for(lambda: _history(store)), "the missed occurrence did not run"
            with sqlite3.connect(db) as conn:
                rows = conn.execute(
                    "SELECT key, expires FROM kv WHERE key LIKE '%cron/done/%'"
                ).fetchall()
            # the done mark outlives the largest grace a reload may set (a day)
            assert rows and all(exp - time.time() > 86_400 for _, exp in rows), rows
            raised = load(_counted("every: 1h, misfire_grace: 86400"))
            cron.update(raised)  # a changed schedule restarts the job: it looks back a day
            await asyncio.sleep(1.0)
            assert await store.get("var/global/ticks") == 1, "the occurrence ran again"
            assert len(await _history(store)) == 1
        finally:
            await cron.stop()


def test_misfire_grace_and_send_retry_are_bounded_at_load() -> None:
    with pytest.raises(RuleError, match="at most 86400"):
        load(rule_with("every: 5s\nmisfire_grace: 86401"))
    with pytest.raises(RuleError, match="'send_retry:' must be seconds"):
        load(rule_with("every: 5s\nsend_retry: -1"))
    schedule = validate_schedule({"every": 5, "send_retry": 600})
    assert schedule.retry_window == 600 and validate_schedule({"every": 5}).retry_window == 60


# -- the outbox and the chat switch ------------------------------------------------------------

GROUP = ", send_to: [{platform: onebot, chat: 'group:5'}]"


@pytest.mark.timeout(30)
async def test_tmy_off_in_a_chat_stops_its_scheduled_runs_and_posts() -> None:
    from tmy.cron import Cron
    from tmy.testing import Bot

    async with Bot({"r.yaml": _counted("every: 1s", GROUP)}) as bot:
        store = bot.app.store
        chat = Message(".tmy off", user="op", chat="group:5", platform="onebot")
        await bot.app.switch.set(chat, True)
        sent: list[str] = []

        async def send(target: Any, text: str) -> None:
            sent.append(text)

        cron = Cron(bot.engine, store, send, default_zone=UTC_ZONE)
        cron.start(bot.engine.rulebook)
        try:
            runs = await _wait_for(lambda: _history(store), timeout=4)
            assert runs and runs[0]["outcome"] == "skipped: chat off", runs
            assert sent == [] and not await store.get("var/global/ticks")  # not run at all
            await bot.app.switch.set(chat, False)
            assert await _wait_for(lambda: asyncio.sleep(0, sent), timeout=4)
        finally:
            await cron.stop()


def _failures(outcome: str) -> float:
    from tmy.metrics import REGISTRY

    value = REGISTRY.get_sample_value(
        "tmy_cron_send_failures_total", {"rule": "job", "outcome": outcome}
    )
    return value or 0.0


@pytest.mark.slow
@pytest.mark.timeout(30)
async def test_a_failed_scheduled_send_is_kept_retried_and_reported(log_file: Path) -> None:
    from tmy.cron import format_report, jobs_report, outbox_entries

    schedule = "every: 1h, misfire_grace: 3600, send_retry: 7200"
    onebot = RefusesFirstSend("onebot")
    rules = {"r.yaml": _counted(schedule, GROUP)}
    async with serving(rules, adapters=(onebot,), http_enabled=False) as daemon:
        store = daemon.app.store
        retries = _failures("retry")
        pending = await _wait_for(lambda: outbox_entries(store))
        assert [item["state"] for _, item in pending] == ["retry"]
        assert _failures("retry") == retries + 1
        jobs = await jobs_report(daemon.engine.rulebook, store, UTC_ZONE)
        (item,) = jobs[0]["outbox"]
        assert item["attempts"] == 1 and "no bot account" in item["last_error"]
        assert "pending send" in format_report(jobs)
        health = await daemon.health()
        assert health["cron"]["outbox"]["pending"] == 1
        assert health["cron"]["outbox"]["oldest"] == item["fire_time"]
        # the retry (after the first backoff) goes out, and the outbox empties
        assert (await onebot.pop(timeout=8)).text.startswith("tick ")
        assert await _wait_for(lambda: _outbox_empty(store), timeout=2)
        runs = await _wait_for(lambda: _retried(store), timeout=2)
        assert runs[-1]["sent"] == "ok (attempt 2)" and runs[-1]["attempt"] == 2, runs
        assert (await daemon.health())["cron"]["outbox"]["pending"] == 0
    failed = [e for e in read_log(log_file) if e["event"] == "cron.send_failed"]
    assert failed and failed[0]["level"] == "warning", failed
    assert failed[0]["error"] == "onebot: no bot account connected"


class RefusesFirstSend(LoopbackAdapter):
    """A platform whose first send is refused, as OneBot's is before NapCat connects."""

    refused = False

    async def send(self, target: Any, text: str) -> None:
        if not self.refused:
            self.refused = True
            raise AdapterError("onebot: no bot account connected")
        await super().send(target, text)


async def _outbox_empty(store: Any) -> bool:
    from tmy.cron import outbox_entries

    return not await outbox_entries(store)


async def _retried(store: Any) -> list[dict[str, Any]]:
    runs = await _history(store)
    return runs if any("attempt" in r for r in runs) else []


@pytest.mark.timeout(30)
async def test_a_send_that_keeps_failing_past_its_window_is_given_up_and_counted() -> None:
    from tmy.cron import Cron, outbox_entries
    from tmy.testing import Bot

    # the occurrence that runs at start is already older than its 1 s retry window
    rules = {"r.yaml": _counted("every: 1h, misfire_grace: 3600, send_retry: 1", GROUP)}
    async with Bot(rules) as bot:
        store = bot.app.store
        given_up = _failures("gave_up")

        async def send(target: Any, text: str) -> None:
            raise RuntimeError("onebot: no bot account connected")

        cron = Cron(bot.engine, store, send, default_zone=UTC_ZONE)
        cron.start(bot.engine.rulebook)
        try:
            runs = await _wait_for(lambda: _history(store))
        finally:
            await cron.stop()
        assert runs[0]["sent"].endswith("(gave up after 1 attempt)"), runs
        assert _failures("gave_up") == given_up + 1
        assert await outbox_entries(store) == []


@pytest.mark.timeout(30)
async def test_a_full_outbox_gives_a_failed_send_up_at_once() -> None:
    from tmy.cron import MAX_OUTBOX, OUTBOX_INDEX, Cron
    from tmy.testing import Bot

    schedule = "every: 1h, misfire_grace: 3600, send_retry: 7200"
    async with Bot({"r.yaml": _counted(schedule, GROUP)}) as bot:
        store = bot.app.store
        full = {f"other/-/{n}": "2026-01-01T00:00:00+00:00" for n in range(MAX_OUTBOX)}
        await store.set(OUTBOX_INDEX, full)

        async def send(target: Any, text: str) -> None:
            raise RuntimeError("onebot: no bot account connected")

        cron = Cron(bot.engine, store, send, default_zone=UTC_ZONE)
        cron.start(bot.engine.rulebook)
        try:
            runs = await _wait_for(lambda: _history(store))
        finally:
            await cron.stop()
        assert "the outbox is full" in runs[0]["sent"] and "gave up" in runs[0]["sent"], runs


@pytest.mark.redis
@pytest.mark.timeout(60)
async def test_a_scheduled_run_commits_on_a_redis_cluster_one_slot_at_a_time(
    cluster_store_url: str,
) -> None:
    """A cluster commits one hash slot per script: the done mark (fenced, in its lease's
    slot) and the run's variables (each alone) still land, once."""
    from tmy.cron import Cron
    from tmy.testing import Bot

    rules = {"r.yaml": _counted("every: 1h, misfire_grace: 3600")}
    async with Bot(rules, store=cluster_store_url) as bot:
        store = bot.app.store
        cron = Cron(bot.engine, store, None, default_zone=UTC_ZONE)
        cron.start(bot.engine.rulebook)
        try:
            runs = await _wait_for(lambda: _history(store), timeout=10)
        finally:
            await cron.stop()
        assert runs and runs[0]["outcome"] == "ok", runs
        assert await store.get("var/global/ticks") == 1


@pytest.mark.slow
@pytest.mark.timeout(30)
async def test_two_daemons_resend_a_failed_scheduled_send_once(tmp_path: Path) -> None:
    """Both daemons poll the outbox; the resend is claimed, so exactly one posts it."""
    from tmy.cron import Cron, outbox_entries
    from tmy.testing import Bot

    schedule = "every: 1h, misfire_grace: 3600, send_retry: 7200"
    rules = {"r.yaml": _counted(schedule, GROUP)}
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    attempts: list[str] = []

    async def send(target: Any, text: str) -> None:
        attempts.append(text)
        if len(attempts) == 1:
            raise RuntimeError("onebot: no bot account connected")

    async with Bot(rules, store=url) as one, Bot(rules, store=url) as two:
        crons = [Cron(b.engine, b.app.store, send, default_zone=UTC_ZONE) for b in (one, two)]
        for cron, bot in zip(crons, (one, two), strict=True):
            cron.start(bot.engine.rulebook)
        try:
            assert await _wait_for(lambda: asyncio.sleep(0, len(attempts) >= 2), timeout=8)
            assert await _wait_for(lambda: _outbox_empty(one.app.store), timeout=2)
            await asyncio.sleep(1.5)  # another poll of each daemon: nothing more goes out
        finally:
            for cron in crons:
                await cron.stop()
        assert len(attempts) == 2, attempts
        assert await outbox_entries(one.app.store) == []
        assert await one.app.store.get("var/global/ticks") == 1


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.timeout(120)
async def test_a_daemon_cut_off_from_redis_past_its_lease_writes_and_sends_nothing(
    tmp_path: Path, redis_url: str, redis_namespace: str
) -> None:
    """The partition case: the claimant's link to Redis freezes (a proxy) for 2.5 s; its
    commit arrives after the lease moved on, and the store refuses it (token compare)."""
    from urllib.parse import urlsplit

    proxies = {name: FreezingProxy(urlsplit(redis_url).port or 6379) for name in ("a", "b")}
    for proxy in proxies.values():
        await proxy.start()
    try:
        url = f"{redis_url}?prefix={redis_namespace}&lease_ttl=1"
        await _stall_one_of_two(tmp_path, url, proxies=proxies, stalls=1)
    finally:
        for proxy in proxies.values():
            await proxy.close()


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

    from tmy.cron import Cron
    from tmy.testing import Bot

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
        async with Bot({"r.yaml": rules}) as bot:
            assert "ticks" in bot.engine.rulebook.locked_variables
            cron = Cron(bot.engine, bot.app.store, None, default_zone=UTC_ZONE)
            cron.start(bot.engine.rulebook)
            try:
                async with asyncio.timeout(10):
                    await entered.wait()  # the scheduled run read ticks and waits in its step
                bump = asyncio.create_task(bot.say("bump"))
                await asyncio.sleep(0.3)
                assert not bump.done()  # it waits for the scheduled run's lock
                release.set()
                async with asyncio.timeout(10):
                    await bump
                assert await bot.app.store.get("var/global/ticks") == 2
            finally:
                release.set()
                await cron.stop()
    finally:
        await runner.cleanup()
