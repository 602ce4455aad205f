"""Dispatch with the web console on and one live view connected, against the console off.

Issue 23 asks that the dispatch benchmark with the console enabled and one live-view
client connected stay within 10% of the figure without it. For each round and each
mode a child process

1. writes N dispatch rules (``common.write_dispatch_rules``, the ``prefix`` set) and
   opens the real :class:`tmy.app.App` **serving** (the HTTP listener on loopback,
   ``info`` logging to a file as the daemon ships), with ``console.enabled`` in mode
   ``on`` and off in mode ``off``;
2. in mode ``on`` starts a live-view client in its own process (as a browser is):
   it logs in (``POST /console/login``) and follows ``/console/live/stream``,
   reconnecting as EventSource does, counting the runs and the "N runs skipped" it gets;
   the child waits until the stream is connected;
3. sends, per scenario (``last``, ``none``, ``random``), M messages through
   ``Engine.handle`` one after another, letting the event loop turn every 64 messages
   in both modes (as a daemon reading messages from sockets does — and so that the
   console's feed, ticker and stream get their share of the CPU), checking every reply.

Rounds alternate off / on; the best msgs/s per mode and scenario is kept (the least
disturbed by other processes), and the ratio on ÷ off is the verdict (≥ 0.90).

    python bench/console.py                 # N = 10 and 10,000, 5 rounds, 20,000 messages
    python bench/console.py --quick         # N = 10, 1 round, 2,000 messages
    python bench/console.py --n 10 --rounds 5 --messages 50000
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import common

SCENARIOS = ("last", "none", "random")
PASSWORD = "bench-console-password"
YIELD_EVERY = 64


# -- the live-view client (its own process) ---------------------------------------------------


async def client(base: str, path: str) -> None:
    """Log in, follow the stream until SIGTERM, print what came as JSON."""
    import httpx

    got = {"runs": 0, "skipped": 0, "markers": 0, "sampled": 0, "connects": 0}
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with httpx.AsyncClient(base_url=base, timeout=None) as http:
        r = await http.post(f"{path}/login", params={"format": "json"}, data={"password": PASSWORD})
        r.raise_for_status()

        async def follow() -> None:
            while True:
                async with http.stream("GET", f"{path}/live/stream") as stream:
                    got["connects"] += 1
                    print("connected", flush=True)
                    event = ""
                    async for line in stream.aiter_lines():
                        if line.startswith("event: "):
                            event = line[7:]
                        elif line.startswith("data: "):
                            if event in ("skipped", "sampled"):
                                got[event] += int(line[6:])
                                got["markers"] += 1
                            else:
                                json.loads(line[6:])  # a browser parses each one too
                                got["runs"] += 1
                            event = ""

        task = asyncio.create_task(follow())
        await stop.wait()
        task.cancel()
    print(json.dumps(got), flush=True)


# -- the child: one mode, one N ---------------------------------------------------------------


async def _drive(engine: Any, msgs: list[tuple[str, str | None]]) -> dict[str, Any]:
    from tmy.message import Message

    handle, wrong = engine.handle, 0
    start = time.perf_counter()
    for n, (text, expected) in enumerate(msgs, 1):
        reply = await handle(Message(text, user="bench-user", platform="bench"))
        want = common.answer_for(expected) if expected else ""
        if reply.rule != expected or reply.text != want or reply.error is not None:
            wrong += 1
        if n % YIELD_EVERY == 0:
            await asyncio.sleep(0)
    wall = time.perf_counter() - start
    return {"messages": len(msgs), "msgs_per_s": round(len(msgs) / wall, 1), "wrong": wrong}


async def child(mode: str, n: int, messages: int, warmup: int) -> dict[str, Any]:
    from tmy.app import App
    from tmy.builtins import extensions

    with common.temp_dir(f"console-{mode}-{n}") as tmp:
        common.configure_logs(tmp)
        common.write_dispatch_rules(tmp / "rules", n, mix=False)
        msgs = {s: common.dispatch_messages(n, s, messages, mix=False) for s in SCENARIOS}
        warm = common.dispatch_messages(n, "random", warmup, mix=False, seed=99)
        console = {"enabled": mode == "on", "password": PASSWORD}
        settings = dataclasses.replace(
            common.settings_for(tmp, rules=tmp / "rules"),
            http_enabled=True, http_listen="127.0.0.1:0", web_console=console, watch=False,
        )  # fmt: skip
        app = App(settings, extensions=extensions(), serve=True)
        await app.__aenter__()
        viewer = None
        try:
            if mode == "on":
                viewer = await _start_viewer(app)
            out: dict[str, Any] = {"mode": mode, "n": n, "scenarios": {}}
            await _drive(app.engine, warm)
            for scenario in SCENARIOS:
                out["scenarios"][scenario] = await _drive(app.engine, msgs[scenario])
            if viewer is not None:
                await asyncio.sleep(1.0)  # the last runs reach the viewer
                out["viewer"] = await _stop_viewer(viewer)
                from tmy.console.feed import feed_of

                feed = feed_of(app)
                out["feed_drained"] = feed.drained if feed else None
        finally:
            if viewer is not None and viewer.returncode is None:
                viewer.kill()
            await app.__aexit__(None, None, None)
        return out


async def _start_viewer(app: Any) -> asyncio.subprocess.Process:
    from tmy.console.feed import feed_of

    base = f"http://127.0.0.1:{app.http.port}"
    path = app.settings.web_console.path
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--client", base, path, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    if line.strip() != b"connected":
        raise RuntimeError(f"the live-view client did not connect: {line!r}")
    feed = feed_of(app)
    for _ in range(100):  # the stream handler has subscribed
        if feed is not None and feed.subscribers:
            break
        await asyncio.sleep(0.05)
    return proc


async def _stop_viewer(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    proc.send_signal(signal.SIGTERM)
    assert proc.stdout is not None
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    lines = [x for x in out.decode().splitlines() if x.startswith("{")]
    return json.loads(lines[-1]) if lines else {"error": "no report"}


# -- the parent ------------------------------------------------------------------------------


def run_child(mode: str, n: int, messages: int, warmup: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", mode, "--n", str(n),
           "--messages", str(messages), "--warmup", str(warmup)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"console child {mode} n={n} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summarize(runs: list[dict[str, Any]], ns: list[int]) -> list[dict[str, Any]]:
    """Per N and scenario: the best msgs/s of each mode over the rounds, and on ÷ off."""
    rows = []
    for n in ns:
        for scenario in SCENARIOS:
            best = {}
            for mode in ("off", "on"):
                rates = [r["scenarios"][scenario]["msgs_per_s"] for r in runs
                         if r["n"] == n and r["mode"] == mode]  # fmt: skip
                best[mode] = max(rates)
            ratio = best["on"] / best["off"]
            rows.append({"n": n, "scenario": scenario, "off": best["off"], "on": best["on"],
                         "ratio": round(ratio, 3), "ok": ratio >= 0.9})  # fmt: skip
    return rows


def main() -> int:
    p = common.base_parser(__doc__.split("\n")[0])
    p.add_argument("--child", choices=("off", "on"), help="internal: one mode in this process")
    p.add_argument("--client", nargs=2, metavar=("BASE", "PATH"), help="internal: the viewer")
    p.add_argument("--n", type=int, action="append", help="rule counts (repeatable)")
    p.add_argument("--rounds", type=int)
    p.add_argument("--messages", type=int)
    p.add_argument("--warmup", type=int, default=2000)
    args = p.parse_args()
    if args.client:
        asyncio.run(client(*args.client))
        return 0
    messages = args.messages or (2000 if args.quick else 20_000)
    ns = args.n or ([10] if args.quick else [10, 10_000])
    if args.child:
        print(json.dumps(asyncio.run(child(args.child, ns[0], messages, args.warmup))))
        return 0
    rounds = args.rounds or (1 if args.quick else 5)
    runs = []
    for r in range(rounds):
        for n in ns:
            for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
                res = run_child(mode, n, messages, args.warmup)
                runs.append(res)
                rates = "  ".join(f"{k} {v['msgs_per_s']:>9,.0f}/s" for k, v in
                                  res["scenarios"].items())  # fmt: skip
                print(f"  round {r + 1} N={n:>6,} {mode:3}: {rates}  {res.get('viewer', '')}",
                      file=sys.stderr, flush=True)  # fmt: skip
    rows = summarize(runs, ns)
    wrong = sum(s["wrong"] for r in runs for s in r["scenarios"].values())
    body = [[r["n"], r["scenario"], r["off"], r["on"], f"{r['ratio']:.3f}",
             common.verdict(r["ok"])] for r in rows]  # fmt: skip
    print(common.table("Dispatch, console off vs on with one live view (best of "
                       f"{rounds} rounds, {messages:,} messages each)",
                       ["rules", "scenario", "off msgs/s", "on msgs/s", "on ÷ off", "≥ 0.90"],
                       body))  # fmt: skip
    viewers = [r["viewer"] for r in runs if "viewer" in r]
    print(f"live view: {viewers}; wrong replies: {wrong}")
    if not args.no_write:
        payload = {"messages_per_scenario": messages, "rounds": rounds, "rows": rows,
                   "runs": runs, "wrong": wrong, "pid": os.getpid()}  # fmt: skip
        path = common.write_result("console", payload, quick=args.quick)
        print(f"\nwritten: {path.relative_to(common.ROOT)}")
    return 0 if wrong == 0 and all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
