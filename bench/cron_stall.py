"""Scheduled rules under a stalled daemon: does any occurrence run or post twice?

Two real ``python3 run.py serve`` daemons share one store (a SQLite file, then
a Redis under a random key prefix) and the same ``every:`` rule, which calls a
local HTTP step, increments a counter, appends its FIRE_TIME to a list and posts
``tick <FIRE_TIME>`` to a OneBot group. Each daemon has its own fake NapCat
(a reverse WebSocket client that answers every action and records the posts).

Each round is one occurrence: the daemon whose HTTP step arrives first — it holds
the occurrence's claim lease — is SIGSTOPped right there for ``--stall`` seconds
(default 8, longer than the 5 s lease), then SIGCONTed. The other daemon takes
the expired lease and runs the occurrence. The paused one, resumed, must write
and post nothing. Afterwards every occurrence must have run exactly once:

* the counter equals the number of fire times in the list, and no fire time twice;
* the history (``cron/hist/stall``) has one run per fire time;
* every post went out once (across both fake NapCats), none twice.

Loopback only, bounded in time (``--rounds`` × ``--every`` + start-up), prints
the figures and writes ``bench/results/cron_stall.txt``.

    python3 bench/cron_stall.py                       # 10 rounds, 8 s stalls, every 10s
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
from pathlib import Path
from typing import Any

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


async def one_backend(name: str, store_url: str, args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix=f"cron-stall-{name}-"))
    daemons: dict[str, subprocess.Popen[bytes]] = {}
    stalls: dict[str, dict[str, Any]] = {}  # fire time -> {daemon, at}
    loop = asyncio.get_running_loop()

    async def step(request: web.Request) -> web.Response:
        who, fire = request.match_info["name"], request.query["fire"]
        if fire not in stalls and len(stalls) < args.rounds and len(daemons) == 2:
            stalls[fire] = {"daemon": who, "at": time.time()}
            pid = daemons[who].pid
            os.kill(pid, signal.SIGSTOP)  # it holds the occurrence's claim lease now
            loop.call_later(args.stall, os.kill, pid, signal.SIGCONT)
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
                daemons[who] = spawn(rules, store_url, tmp / f"{who}.log", port, config)
                naps[who].task = asyncio.create_task(naps[who].run(session, port))
            limit = time.time() + args.rounds * args.every + 60
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
        elif backend == "redis":
            prefix = f"cronstall{uuid.uuid4().hex[:8]}"
            try:
                url = f"{args.redis_url}?prefix={prefix}"
                results.append(await one_backend("redis", url, args))
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
