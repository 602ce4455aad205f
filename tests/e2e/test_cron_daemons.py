"""Scheduled rules: validation with file:line, fire times, exactly once across daemons.

The exactly-once tests start real ``serve`` processes sharing one Redis (or one
SQLite file), let an ``every: 1s`` rule fire until both daemons have run some
occurrences, SIGKILL one daemon and check that every occurrence ran exactly once:
no gap, no duplicate.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.onebot_fake import connect_reverse
from tmy.store import open_store

REPO = Path(__file__).resolve().parents[2]

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
