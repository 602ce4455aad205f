"""CLI start-up: wall and CPU time of one-shot ``python run.py …`` commands, against the floor.

Every operator command (``ask``, ``check``, ``test``, ``vars``, ``reload`` …) and
every test that starts tmy pays the interpreter's start plus ``import tmy.cli``.
This runs, N times each and alternating so background load hits them alike:

* ``python3 -c pass``          — the interpreter alone (the floor);
* ``python3 -c "import yaml"`` — the floor plus one small C-backed package;
* ``python3 run.py ask ".ping"`` — a one-shot command through the engine;
* ``python3 run.py check``     — loading and checking the shipped rules.

It prints the median wall and CPU (user + system of the child) of each, the ratio of
each tmy command to the floor, and writes ``bench/results/cli_startup.json``. The
environment is passed through as it is (``PYTHONDONTWRITEBYTECODE`` included: with it
set and no ``__pycache__`` of tmy, every start compiles tmy's sources; the JSON records
whether it was set).

    python bench/cli_startup.py            # 15 runs each
    python bench/cli_startup.py --quick    # 3 runs each
    python bench/cli_startup.py --runs 30
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

import common

CASES: dict[str, list[str]] = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "python -c 'import yaml'": [sys.executable, "-c", "import yaml"],
    "run.py ask .ping": [sys.executable, str(common.RUN_PY), "ask", ".ping"],
    "run.py check": [sys.executable, str(common.RUN_PY), "check"],
}
FLOOR = "python -c pass"


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def one_run(argv: list[str]) -> tuple[float, float, int]:
    """(wall s, CPU s, exit code) of one run, from the checkout's root with output dropped."""
    cpu0 = _children_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run(
        argv, cwd=common.ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
    )
    return time.perf_counter() - t0, _children_cpu() - cpu0, proc.returncode


def main() -> int:
    p = common.base_parser(__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, help="runs per command (median reported; default 15)")
    args = p.parse_args()
    runs = args.runs or (3 if args.quick else 15)
    samples: dict[str, list[tuple[float, float, int]]] = {name: [] for name in CASES}
    for argv in CASES.values():  # a warm-up each: the page cache, not the first read
        one_run(argv)
    for _ in range(runs):
        for name, argv in CASES.items():
            samples[name].append(one_run(argv))
    floor_wall = statistics.median(w for w, _, _ in samples[FLOOR])
    floor_cpu = statistics.median(c for _, c, _ in samples[FLOOR])
    rows: list[dict[str, Any]] = []
    for name, runs_of in samples.items():
        wall = statistics.median(w for w, _, _ in runs_of)
        cpu = statistics.median(c for _, c, _ in runs_of)
        rows.append(
            {
                "command": name,
                "runs": len(runs_of),
                "median_wall_s": round(wall, 3),
                "median_cpu_s": round(cpu, 3),
                "min_wall_s": round(min(w for w, _, _ in runs_of), 3),
                "wall_x_floor": round(wall / floor_wall, 1),
                "cpu_x_floor": round(cpu / floor_cpu, 1),
                "exit_codes": sorted({code for _, _, code in runs_of}),
            }
        )
    headers = ["command", "runs", "median wall s", "median CPU s", "min wall s", "wall ×floor"]
    body = [
        [
            r["command"],
            r["runs"],
            r["median_wall_s"],
            r["median_cpu_s"],
            r["min_wall_s"],
            r["wall_x_floor"],
        ]
        for r in rows
    ]
    title = "CLI start-up: one-shot `python run.py …` vs the interpreter"
    print(common.table(title, headers, body))
    bad = [r["command"] for r in rows if r["exit_codes"] != [0]]
    if bad:
        print(f"  non-zero exit: {', '.join(bad)}", file=sys.stderr)
    if not args.no_write:
        payload = {
            "rows": rows,
            "pythondontwritebytecode": bool(os.environ.get("PYTHONDONTWRITEBYTECODE")),
        }
        path = common.write_result("cli_startup", payload, quick=args.quick)
        print(f"  wrote {path.relative_to(common.ROOT)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
