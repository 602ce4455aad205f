"""Scheduled rules under a stalled daemon: does any occurrence run or post twice?

Two real ``python3 run.py serve`` daemons share one store (a SQLite file, then
a Redis under a random key prefix) and the same ``every:`` rule, which calls a
local HTTP step, increments a counter, appends its FIRE_TIME to a list and posts
``tick <FIRE_TIME>`` to a OneBot group. Each daemon has its own fake NapCat
(a reverse WebSocket client that answers every action and records the posts).

Each round is one occurrence: the daemon whose HTTP step arrives first — it holds
the occurrence's claim lease — is SIGSTOPped right there for ``--stall`` seconds
(default 8, longer than the 5 s lease), then SIGCONTed. With the backend
``redis-partition`` each daemon reaches Redis through its own TCP proxy and the
claimant's link is frozen instead (it keeps running; its commands wait). One
daemon is stalled at a time, and only on-time occurrences (not a start-up
catch-up). The other daemon takes the expired lease and runs the occurrence.
The paused one, resumed, must write and post nothing. Afterwards every
occurrence must have run exactly once:

* the counter equals the number of fire times in the list, and no fire time twice;
* the history (``cron/hist/stall``) has one run per fire time;
* every post went out once (across both fake NapCats), none twice.

Loopback only, bounded in time (``--rounds`` × ``--every`` + start-up), prints
the figures and writes ``bench/results/cron_stall.txt``.

    python3 bench/cron_stall.py                       # 10 rounds, 8 s stalls, every 10s
    python3 bench/cron_stall.py --backends sqlite,redis,redis-partition
    python3 bench/cron_stall.py --rounds 3 --backends sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from aiohttp import web
from common import RESULTS, ROOT, machine_info, now_iso

from tmy.store import open_store

RULES = """
variables:
  ticks: {scope: global, default: 0}
  fired: {scope: global, default: []}
rules:
  - id: stall
    schedule:
      every: %(every)ds
      misfire_grace: 60
      send_to: [{platform: onebot, chat: "group:42"}]
    steps:
      - {plugin: HTTP, url: "http://127.0.0.1:%(port)d/%(name)s?fire={FIRE_TIME}", result: text}
      - {plugin: ADJUST, input: "?= ticks + 1", save: ticks}
      - {plugin: ADJUST, input: "?= fired + [FIRE_TIME]", save: fired}
      - {plugin: ADJUST, input: "tick {FIRE_TIME}"}
"""
CONFIG = "adapters:\n  onebot: {enabled: true, send_interval: 0}\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeNapCat:
    """A OneBot v11 implementation on reverse WebSocket: answers ok, records posts."""

    def __init__(self) -> None:
        self.posts: list[tuple[float, str]] = []
        self.task: asyncio.Task[None] | None = None

    async def run(self, session: aiohttp.ClientSession, port: int) -> None:
        url = f"ws://127.0.0.1:{port}/onebot/v11/ws"
        headers = {"X-Self-ID": "10001", "X-Client-Role": "Universal"}
        while True:  # reconnect while the daemon is paused or starting
            try:
                async with session.ws_connect(url, headers=headers, heartbeat=None) as ws:
                    async for msg in ws:
                        if msg.type != aiohttp.WSMsgType.TEXT:
                            continue
                        frame = json.loads(msg.data)
                        if frame.get("action") == "send_msg":
                            segs = frame["params"]["message"]
                            text = "".join(s["data"]["text"] for s in segs if s["type"] == "text")
                            self.posts.append((time.time(), text))
                        if "action" in frame:
                            await ws.send_json(
                                {"status": "ok", "retcode": 0, "data": {"message_id": 1},
                                 "echo": frame.get("echo")}
                            )  # fmt: skip
            except (aiohttp.ClientError, OSError):
                pass
            await asyncio.sleep(0.2)


def spawn(rules: Path, store: str, log: Path, port: int, config: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMY_", "OPENAI_"))}
    env.update(TMY_LOG_FILE=str(log), TMY_WATCH="0", TMY_TIMEZONE="UTC", TMY_CONFIG=str(config))
    return subprocess.Popen(
        [sys.executable, "run.py", "serve", "--no-console", "--rules", str(rules),
         "--store", store, "--http", f"127.0.0.1:{port}"],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


async def read_store(url: str) -> tuple[Any, Any, Any]:
    store = open_store(url)
    await store.open()
    try:
        return (
            await store.get("var/global/ticks"),
            await store.get("var/global/fired"),
            await store.get("cron/hist/stall"),
        )
    finally:
        await store.close()


class FreezingProxy:
    """A TCP proxy to Redis whose link can be frozen (bytes wait; nothing is lost)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

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


async def one_backend(
    name: str,
    store_url: str,
    args: argparse.Namespace,
    proxies: dict[str, tuple[FreezingProxy, str]] | None = None,
) -> dict[str, Any]:
    """One backend's rounds: SIGSTOP the claimant, or (``proxies``: each daemon reaches the
    store through its own proxy) freeze the claimant's link to the store (the partition case)."""
    tmp = Path(tempfile.mkdtemp(prefix=f"cron-stall-{name}-"))
    daemons: dict[str, subprocess.Popen[bytes]] = {}
    stalls: dict[str, dict[str, Any]] = {}  # fire time -> {daemon, at}
    begun = time.time()
    quiet_until = [0.0]
    loop = asyncio.get_running_loop()

    async def step(request: web.Request) -> web.Response:
        who, fire = request.match_info["name"], request.query["fire"]
        on_time = datetime.fromisoformat(fire).timestamp() >= begun  # not a start-up catch-up
        free = time.time() >= quiet_until[0]  # one daemon stalled at a time
        if (
            fire not in stalls
            and len(stalls) < args.rounds
            and len(daemons) == 2
            and on_time
            and free
        ):
            stalls[fire] = {"daemon": who, "at": time.time()}
            quiet_until[0] = time.time() + args.stall + 1
            if proxies is None:
                pid = daemons[who].pid
                os.kill(pid, signal.SIGSTOP)  # it holds the occurrence's claim lease now
                loop.call_later(args.stall, os.kill, pid, signal.SIGCONT)
            else:
                proxies[who][0].freeze(args.stall)  # it keeps running; its store link does not
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/{name}", step)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    http_port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    config = tmp / "tmy.yaml"
    config.write_text(CONFIG)
    naps = {who: FakeNapCat() for who in ("a", "b")}
    started = time.time()
    try:
        async with aiohttp.ClientSession() as session:
            for who in ("a", "b"):
                rules = tmp / f"rules-{who}"
                rules.mkdir()
                text = RULES % {"every": args.every, "port": http_port, "name": who}
                (rules / "stall.yaml").write_text(text)
                port = free_port()
                url = proxies[who][1] if proxies else store_url
                daemons[who] = spawn(rules, url, tmp / f"{who}.log", port, config)
                naps[who].task = asyncio.create_task(naps[who].run(session, port))
            limit = time.time() + args.rounds * args.every * 2 + 60
            while len(stalls) < args.rounds and time.time() < limit:
                await asyncio.sleep(0.2)
            await asyncio.sleep(args.stall + 3)  # the last stalled daemon resumes, posts land
            for nap in naps.values():
                assert nap.task is not None
                nap.task.cancel()
    finally:
        for d in daemons.values():
            if d.poll() is None:
                d.send_signal(signal.SIGCONT)
                d.send_signal(signal.SIGTERM)
        for d in daemons.values():
            try:
                d.wait(30)
            except subprocess.TimeoutExpired:
                d.kill()
        await runner.cleanup()
    ticks, fired, history = await read_store(store_url)
    fired = fired or []
    history = history or []
    posts = [p for nap in naps.values() for p in nap.posts]
    post_counts = collections.Counter(text for _, text in posts)
    fire_counts = collections.Counter(fired)
    runs = collections.Counter(h["fire_time"] for h in history if "attempt" not in h)
    lost = sum((tmp / f"{who}.log").read_text().count('"cron.lease_lost"') for who in ("a", "b"))
    stalled = sorted(stalls)
    post_at = {text: at for at, text in sorted(posts, reverse=True)}
    delays = [
        round(post_at[f"tick {f}"] - stalls[f]["at"], 2) for f in stalled if f"tick {f}" in post_at
    ]
    return {
        "backend": name,
        "rounds": len(stalled),
        "stall_s": args.stall,
        "occurrences": len(fire_counts),
        "counter": ticks,
        "ran_twice": sorted(f for f, n in fire_counts.items() if n > 1),
        "counter_matches": ticks == len(fired),
        "history_twice": sorted(f for f, n in runs.items() if n > 1),
        "posts": len(posts),
        "posted_twice": sorted(t for t, n in post_counts.items() if n > 1),
        "stalled_not_run": [f for f in stalled if fire_counts[f] != 1],
        "stalled_not_posted": [f for f in stalled if post_counts[f"tick {f}"] != 1],
        "lease_lost_logged": lost,
        "stalled_post_delay_s": delays,
        "seconds": round(time.time() - started, 1),
    }


async def cleanup_redis(url: str, prefix: str) -> None:
    import redis.asyncio as redis

    client = redis.Redis.from_url(url)
    try:
        keys = [k async for k in client.scan_iter(match=f"{prefix}*", count=1000)]
        for i in range(0, len(keys), 500):
            await client.delete(*keys[i : i + 500])
    finally:
        await client.aclose()


def render(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        f"cron_stall — {now_iso()} — {args.rounds} rounds, SIGSTOP {args.stall:g} s of the daemon "
        f"holding the claim (mid-run), every {args.every}s, default 5 s lease",
        f"command: python3 bench/cron_stall.py --rounds {args.rounds} --stall {args.stall:g} "
        f"--every {args.every} --backends {args.backends}",
        f"machine: {machine_info().get('cpu', '?')}",
        "",
    ]
    for r in results:
        dup = len(r["ran_twice"]) + len(r["history_twice"]) + len(r["posted_twice"])
        lines += [
            f"[{r['backend']}] {r['rounds']} stalled rounds, {r['occurrences']} occurrences, "
            f"{r['posts']} posts in {r['seconds']} s",
            f"  duplicates: {dup} (ran twice {len(r['ran_twice'])}, history twice "
            f"{len(r['history_twice'])}, posted twice {len(r['posted_twice'])})",
            f"  counter {r['counter']} == fire times: {r['counter_matches']}; stalled occurrences "
            f"not run once: {len(r['stalled_not_run'])}, not posted once: "
            f"{len(r['stalled_not_posted'])}",
            f"  cron.lease_lost logged: {r['lease_lost_logged']}; post delay after the stall "
            f"began (s): {r['stalled_post_delay_s']}",
        ]
    return "\n".join(lines) + "\n"


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--stall", type=float, default=8.0)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--backends", default="sqlite,redis")
    redis_default = os.environ.get("TMY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    parser.add_argument("--redis-url", default=redis_default)
    args = parser.parse_args()
    results = []
    for backend in args.backends.split(","):
        if backend == "sqlite":
            with tempfile.TemporaryDirectory(prefix="cron-stall-db-") as d:
                results.append(await one_backend("sqlite", f"sqlite:///{d}/shared.db", args))
        elif backend in ("redis", "redis-partition"):
            prefix = f"cronstall{uuid.uuid4().hex[:8]}"
            try:
                url = f"{args.redis_url}?prefix={prefix}"
                if backend == "redis":
                    results.append(await one_backend("redis", url, args))
                else:
                    parts = urlsplit(args.redis_url)
                    proxies = {}
                    for who in ("a", "b"):
                        proxy = FreezingProxy(parts.port or 6379)
                        listen = await proxy.start()
                        via = urlunsplit(parts._replace(netloc=f"127.0.0.1:{listen}"))
                        proxies[who] = (proxy, f"{via}?prefix={prefix}")
                    try:
                        results.append(await one_backend(backend, url, args, proxies))
                    finally:
                        for proxy, _ in proxies.values():
                            assert proxy.server is not None
                            proxy.server.close()
            finally:
                await cleanup_redis(args.redis_url, prefix)
        else:
            parser.error(f"unknown backend {backend!r}")
        print(render(results[-1:], args), flush=True)
    text = render(results, args)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cron_stall.txt").write_text(text)
    print(text)
    bad = any(
        r["ran_twice"] or r["history_twice"] or r["posted_twice"] or not r["counter_matches"]
        for r in results
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
