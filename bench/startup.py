"""Startup: time from ``python run.py serve`` to ``GET /healthz`` answering, with 10,000 rules.

Each run starts the real daemon (``python run.py serve --http 127.0.0.1:PORT
--no-console``; rules, SQLite store and info-level logs in a temporary
directory), polls ``/healthz`` every 5 ms from the moment the process is
spawned, then sends one message to check that the last rule answers, and
stops the daemon with SIGTERM (it must exit cleanly). The same is done with
10 rules, so the difference is what the rules cost; the import time of the
interpreter and packages is what remains.

    python bench/startup.py            # 10 and 10,000 rules, 3 runs each
    python bench/startup.py --quick    # 1 run each
    python bench/startup.py --rules 100000 --runs 1
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

import common

HOST = "127.0.0.1"


def post(port: int, text: str) -> dict[str, Any]:
    import http.client

    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    try:
        conn.request(
            "POST",
            "/v1/messages",
            body=json.dumps({"text": text}),
            headers={"Content-Type": "application/json"},
        )
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def one_run(n_rules: int) -> dict[str, Any]:
    with common.temp_dir(f"startup-{n_rules}") as tmp:
        common.write_rules(tmp / "rules", common.dispatch_rules_yaml(n_rules, mix=False))
        port = common.free_port()
        t0 = time.perf_counter()
        proc = common.spawn_serve(tmp, HOST, port)
        try:
            common.wait_http(HOST, port, proc=proc, timeout=300)
            ready = time.perf_counter() - t0
            peak = common.proc_peak_rss_mb(proc.pid)
            last = n_rules - 1
            reply = post(port, common.message_for(last, "prefix"))
            ok = reply.get("rule") == f"r{last}" and reply.get("answer") == common.answer_for(
                f"r{last}"
            )
        finally:
            t1 = time.perf_counter()
            code = common.stop_process(proc)
            stop_s = time.perf_counter() - t1
        return {
            "rules": n_rules,
            "ready_s": round(ready, 3),
            "peak_rss_mb": peak,
            "reply_ok": ok,
            "reply": reply,
            "exit_code": code,
            "stop_s": round(stop_s, 3),
        }


def main() -> int:
    p = common.base_parser(__doc__.split("\n")[0])
    p.add_argument("--rules", type=int, action="append", help="rule counts (default 10 and 10,000)")
    p.add_argument("--runs", type=int, help="runs per rule count (median reported)")
    args = p.parse_args()
    counts = args.rules or [10, 10_000]
    runs = args.runs or (1 if args.quick else 3)
    rows = []
    for n in counts:
        results = [one_run(n) for _ in range(runs)]
        for r in results:
            print(
                f"  {n:>7,} rules: ready in {r['ready_s']:.2f}s (peak {r['peak_rss_mb']} MB, "
                f"reply ok {r['reply_ok']}, exit {r['exit_code']})",
                file=sys.stderr,
                flush=True,
            )
        times = [r["ready_s"] for r in results]
        rows.append(
            {
                "rules": n,
                "runs": runs,
                "median_s": round(statistics.median(times), 3),
                "min_s": min(times),
                "max_s": max(times),
                "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
                "all_replies_ok": all(r["reply_ok"] for r in results),
                "clean_exit": all(r["exit_code"] == 0 for r in results),
                "details": results,
            }
        )
    headers = [
        "rules",
        "runs",
        "median s",
        "min s",
        "max s",
        "peak RSS MB",
        "reply ok",
        "clean exit",
    ]
    body = [
        [
            r["rules"],
            r["runs"],
            r["median_s"],
            r["min_s"],
            r["max_s"],
            r["peak_rss_mb"],
            r["all_replies_ok"],
            r["clean_exit"],
        ]
        for r in rows
    ]
    print(
        common.table("Startup: `python run.py serve` spawned → /healthz answers 200", headers, body)
    )
    base = next((r for r in rows if r["rules"] == 10), None)
    for r in rows:
        if base and r is not base:
            print(
                f"  {r['rules']:,} rules cost {r['median_s'] - base['median_s']:.2f} s "
                "more than 10 rules"
            )
    if not args.no_write:
        path = common.write_result("startup", {"rows": rows}, quick=args.quick)
        print(f"\nwritten: {path.relative_to(common.ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
