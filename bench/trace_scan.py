"""``.tmy trace ID`` on a large log: reply time and the longest event-loop stall.

Writes a JSON log of ``--mb`` megabytes (lines shaped like the daemon's:
``message.received`` / ``run.done`` / ``reply.sent`` with a 16-hex trace id),
with one known run near the end, opens the real :class:`tmy.app.App` with
``log.file`` pointing at it and asks the admin command ``.tmy trace`` for the
known id and for a short id (``a``), while a ticker task measures the longest
gap between its 1 ms sleeps — the time the event loop could not run anything.

    python bench/trace_scan.py --mb 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import common  # noqa: F401  (puts the repository on sys.path)

KNOWN = "feedfacecafe0001"


def write_log(path: Path, megabytes: int) -> None:
    """About ``megabytes`` MB of realistic lines; the run ``KNOWN`` 1,000 runs before the end."""
    target = megabytes * 1_000_000
    runs = []
    n = 0
    size = 0
    with path.open("wb", buffering=1 << 20) as f:
        while size < target:
            tid = f"abcdef01{n:08x}"
            stamp = "2026-11-25T12:00:00.000Z"
            lines = [
                {"event": "message.received", "trace_id": tid, "text": f"count apples {n}",
                 "user": "ann", "chat": "g1", "platform": "test", "level": "info",
                 "timestamp": stamp},
                {"event": "run.done", "trace_id": tid, "rule": "count", "trigger": "count *",
                 "question": f"apples {n}", "answer": f"apples: {n}", "ms": 0.4,
                 "steps": [{"uri": "count/add", "plugin": "ADJUST", "input": 1, "result": 1}],
                 "level": "info", "timestamp": stamp},
                {"event": "reply.sent", "trace_id": tid, "rule": "count",
                 "answer": f"apples: {n}", "ms": 0.5, "level": "info", "timestamp": stamp},
            ]  # fmt: skip
            runs.append(tid)
            blob = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
            f.write(blob)
            size += len(blob)
            n += 1
        known = {"event": "reply.sent", "trace_id": KNOWN, "answer": "known", "level": "info",
                 "timestamp": "2026-11-25T12:00:00.000Z"}  # fmt: skip
        f.write(json.dumps(known).encode() + b"\n")
        for i in range(1000):
            tick = {"event": "tick", "trace_id": f"{i:016x}", "level": "info"}
            f.write(json.dumps(tick).encode() + b"\n")


async def ticker(stop: asyncio.Event, worst: list[float]) -> None:
    """The longest gap between 1 ms sleeps: how long the event loop could run nothing."""
    last = time.perf_counter()
    while not stop.is_set():
        await asyncio.sleep(0.001)
        now = time.perf_counter()
        worst[0] = max(worst[0], now - last)
        last = now


async def measure(log: Path, ids: list[str]) -> list[dict[str, object]]:
    from tmy.app import App
    from tmy.builtins import extensions
    from tmy.config import Settings
    from tmy.message import Message

    base = Path(tempfile.mkdtemp(prefix="tmy-trace-bench-"))
    settings = Settings(
        rules=base / "rules",
        plugins=base / "no-plugins",
        store=f"sqlite:///{base / 'tmy.db'}",
        admins=frozenset({"bench:root"}),
        log_file=str(log),
    )
    rows = []
    async with App(settings, extensions=extensions(), rule_texts={"r.yaml": "rules: []\n"}) as app:
        for tid in ids:
            stop = asyncio.Event()
            worst = [0.0]
            tick = asyncio.create_task(ticker(stop, worst))
            await asyncio.sleep(0.01)
            t0 = time.perf_counter()
            msg = Message(f".tmy trace {tid}", user="root", platform="bench")
            reply = await app.engine.handle(msg)
            took = time.perf_counter() - t0
            stop.set()
            await tick
            text = (reply.text or reply.error or "").replace("\n", " | ")
            stall = round(worst[0] * 1000, 1)
            rows.append({"id": tid, "reply_s": round(took, 3), "max_stall_ms": stall})
            rows[-1]["reply"] = text[:160]
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mb", type=int, default=200, help="log size in MB")
    p.add_argument("--keep", metavar="FILE", help="reuse / keep the generated log at FILE")
    args = p.parse_args()
    log = Path(args.keep) if args.keep else Path(tempfile.mkdtemp()) / "tmy.log"
    if not log.exists():
        t = time.perf_counter()
        write_log(log, args.mb)
        print(f"wrote {log.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - t:.1f}s",
              file=sys.stderr)  # fmt: skip
    rows = asyncio.run(measure(log, [KNOWN, "a", "abcdef01", "2026-11-25T12:00:00.000Z"]))
    for row in rows:
        print(json.dumps(row, ensure_ascii=False))
    if not args.keep:
        os.unlink(log)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
