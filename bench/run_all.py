"""Run every benchmark, print their tables, then one table of every target.

    python bench/run_all.py             # the full set (about 30 minutes on 2 cores)
    python bench/run_all.py --quick     # a smoke run (about 1 minute)
    python bench/run_all.py --only dispatch,chain

Each benchmark runs as its own process (``python bench/<name>.py``) and writes
``bench/results/<name>.json`` (``<name>.quick.json`` with ``--quick``); this
script then writes ``bench/results/summary.json`` with every target. Other
work on the machine skews the figures: the script measures how busy the
machine is before it starts (``--wait-quiet`` waits for it to calm down) and
each result records the CPU other processes used while it ran.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import common

BENCHMARKS = (
    "dispatch",
    "chain",
    "http_load",
    "llm_fanout",
    "startup",
    # the paths of issue 24, each against its floor measured in the same run
    "onebot_path",
    "llm_step",
    "memory_recall",
    "rule_load",
    "dispatch_callgrind",
    # issue 25: the knowledge base's recall@4, ingest and search at 10,000 chunks
    "retrieval",
)


def main() -> int:
    p = common.base_parser(__doc__.split("\n")[0])
    p.add_argument("--only", help="comma-separated subset of: " + ", ".join(BENCHMARKS))
    p.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait up to this long for other processes to use < 0.25 cores",
    )
    args = p.parse_args()
    names = args.only.split(",") if args.only else list(BENCHMARKS)
    unknown = set(names) - set(BENCHMARKS)
    if unknown:
        p.error(f"unknown benchmarks: {', '.join(sorted(unknown))}")
    deadline = time.monotonic() + args.wait_quiet
    busy = common.others_busy_now(1.0)
    while busy > 0.25 and time.monotonic() < deadline:
        print(f"other processes use {busy} cores; waiting for a quieter machine…", file=sys.stderr)
        time.sleep(5)
        busy = common.others_busy_now(1.0)
    if busy > 0.25:
        print(
            f"WARNING: other processes use {busy} of {common.machine_info()['cores']} cores: "
            "the figures will be pessimistic",
            file=sys.stderr,
        )
    flags = (["--quick"] if args.quick else []) + (["--no-write"] if args.no_write else [])
    summary: list[dict] = []
    durations: dict[str, float] = {}
    failed: list[str] = []
    for name in names:
        print(f"\n## {name}\n", flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, str(common.BENCH / f"{name}.py"), *flags])
        durations[name] = round(time.perf_counter() - t0, 1)
        if proc.returncode != 0:
            failed.append(name)
            print(f"{name} FAILED (exit {proc.returncode})", file=sys.stderr)
            continue
        if args.no_write:
            continue
        path = common.RESULTS / (f"{name}.quick.json" if args.quick else f"{name}.json")
        doc = json.loads(path.read_text())
        for t in doc.get("targets", []):
            summary.append(
                {"benchmark": name, **t, "others_cores": doc["contention"]["others_cores"]}
            )
    if summary:
        rows = [
            [s["benchmark"], s["target"], s["value"], common.verdict(s["ok"]), s["others_cores"]]
            for s in summary
        ]
        print(
            common.table(
                "All targets",
                ["benchmark", "target", "measured", "verdict", "other load (cores)"],
                rows,
            )
        )
        missed = [s for s in summary if s["ok"] is False]
        print(
            f"\n{len(summary) - len(missed)} of {len(summary)} targets met; "
            f"durations (s): {durations}; machine load by others at start: {busy} cores"
        )
        if not args.no_write:
            out = common.write_result(
                "summary",
                {
                    "targets": summary,
                    "durations_s": durations,
                    "others_busy_at_start": busy,
                    "failed": failed,
                },
                quick=args.quick,
            )
            print(f"written: {out.relative_to(common.ROOT)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
