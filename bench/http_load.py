"""HTTP under load: ``POST /v1/messages`` against ``python run.py serve`` on loopback.

The server is the real daemon (``python run.py serve --http 127.0.0.1:PORT
--no-console``) in its own process, on 10,000 prefix rules (one ADJUST step
each, as in ``dispatch.py``), SQLite store and info-level logs in a temporary
directory. The load generator is a SEPARATE process (this script with
``--client``) using one aiohttp session with keep-alive connections: C workers
each send one request at a time (closed loop) with a random rule's trigger,
until ``--count`` requests are done or ``--duration`` seconds have passed,
after a short warm-up. Every response must be 200 with the expected ``rule``
and ``answer``; anything else counts as an error. Only 127.0.0.1 is used.

    python bench/http_load.py            # C = 1, 16, 64, 256; up to 20,000 requests / 20 s each
    python bench/http_load.py --quick    # 1,000 rules; C = 1, 64; 1,000 requests each
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import common

HOST = "127.0.0.1"


# -- the load generator (its own process) -------------------------------------------------------


async def client(
    url: str, n_rules: int, concurrency: int, count: int, duration: float, warmup: int
) -> dict[str, Any]:
    import aiohttp

    rng = random.Random(concurrency)
    lat: list[int] = []
    errors: list[str] = []
    error_count = 0
    done = 0
    clock = time.perf_counter_ns
    connector = aiohttp.TCPConnector(
        limit=concurrency, limit_per_host=concurrency, force_close=False, enable_cleanup_closed=True
    )
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(record: bool) -> None:
            nonlocal error_count
            i = rng.randrange(n_rules)
            body = {"text": common.message_for(i, "prefix"), "user": f"u{i % 997}"}
            t0 = clock()
            try:
                async with session.post(url, json=body) as resp:
                    data = await resp.read()
                    status = resp.status
                dt = clock() - t0
                doc = json.loads(data)
                ok = (
                    status == 200
                    and doc.get("rule") == f"r{i}"
                    and doc.get("answer") == common.answer_for(f"r{i}")
                    and doc.get("error") is None
                )
                problem = None if ok else f"{status} {data[:200]!r} for {body['text']!r}"
            except Exception as exc:
                dt = clock() - t0
                problem = f"{type(exc).__name__}: {exc}"
            if record:
                lat.append(dt)
                if problem:
                    error_count += 1
                    if len(errors) < 5:
                        errors.append(problem)

        async def warm_worker(k: int) -> None:
            for _ in range(k):
                await one(False)

        per = max(1, warmup // concurrency)
        await asyncio.gather(*(warm_worker(per) for _ in range(concurrency)))
        deadline = time.perf_counter() + duration
        cpu0 = time.process_time()

        async def worker() -> None:
            nonlocal done
            while done < count and time.perf_counter() < deadline:
                done += 1
                await one(True)

        print("MEASURE-START", flush=True)
        start = clock()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = (clock() - start) / 1e9
        cpu = time.process_time() - cpu0
        print("MEASURE-END", flush=True)
    s = common.summarize_ns(lat)
    return {
        "concurrency": concurrency,
        "requests": len(lat),
        "wall_s": round(wall, 3),
        "req_per_s": round(len(lat) / wall, 1),
        "p50_ms": round(s["p50_us"] / 1000, 2),
        "p99_ms": round(s["p99_us"] / 1000, 2),
        "max_ms": round(s["max_us"] / 1000, 2),
        "errors": error_count,
        "error_examples": errors,
        "client_cpu_share": round(cpu / wall, 2),
        "stopped_by": "count" if len(lat) >= count else "duration",
    }


# -- the runner ---------------------------------------------------------------------------------


def run_level(
    url: str,
    n_rules: int,
    concurrency: int,
    count: int,
    duration: float,
    warmup: int,
    server_pid: int,
) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--client",
        "--url",
        url,
        "--rules",
        str(n_rules),
        "--concurrency",
        str(concurrency),
        "--count",
        str(count),
        "--duration",
        str(duration),
        "--warmup",
        str(warmup),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    marks: dict[str, tuple[float, float]] = {}
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:  # the client announces its measured window
        line = line.strip()
        if line in ("MEASURE-START", "MEASURE-END"):
            marks[line] = (time.perf_counter(), common.proc_cpu_s(server_pid))
        elif line:
            lines.append(line)
    try:
        proc.wait(timeout=duration + 120)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"load generator failed:\n{proc.stderr.read()[-3000:] if proc.stderr else ''}"
        )
    res = json.loads(lines[-1])
    if len(marks) == 2:  # share of one core the server used during the measured window
        (w0, c0), (w1, c1) = marks["MEASURE-START"], marks["MEASURE-END"]
        res["server_cpu_share"] = round((c1 - c0) / (w1 - w0), 2) if w1 > w0 else None
    else:
        res["server_cpu_share"] = None
    return res


def evaluate(rows: list[dict]) -> list[dict]:
    t = []
    r = next((r for r in rows if r["concurrency"] == 64), None)
    if r:
        t.append(
            {
                "target": "C=64: >= 2,000 req/s",
                "value": r["req_per_s"],
                "ok": r["req_per_s"] >= 2000,
            }
        )
        t.append({"target": "C=64: p99 < 100 ms", "value": r["p99_ms"], "ok": r["p99_ms"] < 100})
    errors = sum(r["errors"] for r in rows)
    t.append({"target": "zero errors at every concurrency", "value": errors, "ok": errors == 0})
    return t


def report(rows: list[dict], targets: list[dict], meta: dict) -> str:
    headers = [
        "concurrency",
        "requests",
        "req/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "errors",
        "server CPU",
        "client CPU",
    ]
    body = [
        [
            r["concurrency"],
            r["requests"],
            r["req_per_s"],
            r["p50_ms"],
            r["p99_ms"],
            r["max_ms"],
            r["errors"],
            r["server_cpu_share"],
            r["client_cpu_share"],
        ]
        for r in rows
    ]
    out = [
        common.table(
            f"HTTP POST /v1/messages, {meta['rules']:,} rules, serve on loopback "
            f"(peak server RSS {meta['server_peak_rss_mb']} MB)",
            headers,
            body,
        )
    ]
    out.append(
        common.table(
            "HTTP targets",
            ["target", "measured", "verdict"],
            [[t["target"], t["value"], common.verdict(t["ok"])] for t in targets],
        )
    )
    return "\n".join(out)


def main() -> int:
    p = common.base_parser(__doc__.split("\n")[0])
    p.add_argument("--client", action="store_true", help="internal: be the load generator")
    p.add_argument("--url")
    p.add_argument("--rules", type=int)
    p.add_argument("--concurrency", type=int, action="append")
    p.add_argument("--count", type=int)
    p.add_argument("--duration", type=float)
    p.add_argument("--warmup", type=int)
    args = p.parse_args()
    if args.client:
        res = asyncio.run(
            client(
                args.url, args.rules, args.concurrency[0], args.count, args.duration, args.warmup
            )
        )
        print(json.dumps(res))
        return 0
    n_rules = args.rules or (1_000 if args.quick else 10_000)
    levels = args.concurrency or ([1, 64] if args.quick else [1, 16, 64, 256])
    count = args.count or (1_000 if args.quick else 20_000)
    duration = args.duration or (10.0 if args.quick else 20.0)
    warmup = args.warmup or (200 if args.quick else 1_000)
    rows = []
    with common.temp_dir("http") as tmp:
        common.write_rules(tmp / "rules", common.dispatch_rules_yaml(n_rules, mix=False))
        port = common.free_port()
        server = common.spawn_serve(tmp, HOST, port)
        try:
            startup = common.wait_http(HOST, port, proc=server, timeout=120)
            url = f"http://{HOST}:{port}/v1/messages"
            for c in levels:
                r = run_level(url, n_rules, c, count, duration, warmup, server.pid)
                rows.append(r)
                print(
                    f"  C={c:<4} {r['req_per_s']:>8,.0f} req/s p50 {r['p50_ms']:.2f} ms "
                    f"p99 {r['p99_ms']:.2f} ms errors {r['errors']} "
                    f"(server CPU {r['server_cpu_share']}, client CPU {r['client_cpu_share']})",
                    file=sys.stderr,
                    flush=True,
                )
            peak = common.proc_peak_rss_mb(server.pid)
        finally:
            code = common.stop_process(server)
            stderr = (tmp / "serve.stderr").read_text()[-2000:]
        if code not in (0, -15):
            print(f"server exited with {code}: {stderr}", file=sys.stderr)
        meta = {
            "rules": n_rules,
            "startup_s": round(startup, 2),
            "server_peak_rss_mb": peak,
            "server_exit_code": code,
            "count_per_level": count,
            "duration_cap_s": duration,
        }
    targets = evaluate(rows)
    print(report(rows, targets, meta))
    if not args.no_write:
        path = common.write_result(
            "http_load", {**meta, "rows": rows, "targets": targets}, quick=args.quick
        )
        print(f"\nwritten: {path.relative_to(common.ROOT)}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
