"""Loading 100,000 rules: CPU against libyaml's event-only parse, and RSS per rule.

The rules are the ones ``bench/dispatch.py`` loads (``common.dispatch_rules_yaml``):
the ``prefix`` set (every trigger ``kw<i>*``) and the ``mix`` set (exact /
prefix / suffix / contains in rotation plus 5 regex rules), each as one file
and split over 100 files. Every measurement runs in a fresh child process:

* ``floor``: ``for _ in yaml.parse(text, Loader=yaml.CSafeLoader): pass`` over
  the same files — libyaml's events, no Python tree;
* ``tmy``: the real :class:`tmy.app.App` opened on the rules directory as
  ``dispatch.py`` opens it (YAML, validation, compilation, trigger index, the
  store) — the CPU seconds (user + sys) of the load, and the RSS after it minus
  the RSS of the same process just before it, divided by the rule count. The
  dead-trigger analysis (``Rulebook.warnings``, computed once serving) is timed
  after it, on its own.

Each is repeated (best CPU of 3, median RSS; ``--quick``: 10,000 rules, 1 run)
and the loaded rulebook is checked: the rule count, and for a sample of rules
the id, file, line, trigger (source, kind, line) and step (plugin, constant
answer, line) against what the generator wrote (``wrong`` must be 0).
``--tracemalloc`` adds a run that reports the live bytes per rule.

    python bench/rule_load.py [--quick] [--n 100000] [--runs 3] [--tracemalloc]
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import common

GOAL_RATIO = 1.6
GOAL_BYTES = 1_500
CASES = (("prefix", 1), ("prefix", 100), ("mix", 1), ("mix", 100))


def expected(n: int, mix: bool, files: int, root: Path) -> dict[str, dict[str, Any]]:
    """Rule id -> its file, line, trigger and answer, as the generator writes them."""
    out: dict[str, dict[str, Any]] = {}
    per = -(-n // files)
    for k in range(files):
        file = str(root / f"bench-{k:04d}.yaml")
        line = 2  # after "rules:"
        rows: list[tuple[str, str, str]] = []
        if mix and k == 0:
            rows += [(f"rx{j}", f"re:^rx{j}-(?P<word>\\w+)$", "regex") for j in range(5)]
        for i in range(k * per, min(n, (k + 1) * per)):
            kind = common.rule_kind(i, mix)
            rows.append((f"r{i}", common.trigger_for(i, kind), kind))
        for rid, trig, kind in rows:
            out[rid] = {"file": file, "line": line, "trigger": trig, "kind": kind}
            line += 5
    return out


def check(rulebook: Any, want: dict[str, dict[str, Any]]) -> tuple[int, list[str]]:
    """Wrong answers in the loaded rulebook (the count, then every 997th rule and the ends)."""
    wrong, examples = 0, []
    if len(rulebook.rules) != len(want):
        wrong += 1
        examples.append(f"{len(rulebook.rules)} rules loaded, {len(want)} written")
    ids = list(want)
    sample = {*ids[::997], *ids[:6], *ids[-3:]}
    for rid in sorted(sample):
        w, rule = want[rid], rulebook.by_id.get(rid)
        got = None
        if rule is not None and len(rule.triggers) == 1 and len(rule.steps) == 1:
            t, s = rule.triggers[0], rule.steps[0]
            got = (rule.file, rule.line, t.source, t.kind, t.line, s.plugin, s.line, s.uri,
                   getattr(s.constant, "value", None))  # fmt: skip
        line = w["line"]
        exp = (w["file"], line, w["trigger"], w["kind"], line + 1, "ADJUST", line + 3,
               f"{rid}/0", common.answer_for(rid))  # fmt: skip
        if got != exp:
            wrong += 1
            if len(examples) < 5:
                examples.append(f"{rid}: got {got}, expected {exp}")
    return wrong, examples


def child_floor(root: Path) -> dict[str, Any]:
    import yaml

    texts = [p.read_text(encoding="utf-8") for p in sorted(root.glob("*.yaml"))]
    c0 = time.process_time()
    for text in texts:
        for _ in yaml.parse(text, Loader=yaml.CSafeLoader):
            pass
    return {"cpu_s": time.process_time() - c0}


async def child_tmy(root: Path, n: int, mix: bool, files: int, trace: bool) -> dict[str, Any]:
    import tracemalloc

    from tmy.app import App
    from tmy.builtins import extensions

    tmp = root.parent / f"run-{time.time_ns()}"
    tmp.mkdir()
    common.configure_logs(tmp)
    settings = common.settings_for(tmp, rules=root)
    want = expected(n, mix, files, root)
    app = App(settings, extensions=extensions())
    gc.collect()
    if trace:
        tracemalloc.start()
    rss0 = common.current_rss_mb()
    c0 = time.process_time()
    await app.__aenter__()
    cpu = time.process_time() - c0
    rss1 = common.current_rss_mb()
    live = tracemalloc.get_traced_memory()[0] if trace else None
    try:
        rulebook = app.engine.rulebook
        c1 = time.process_time()
        warnings = len(rulebook.warnings)
        analysis = time.process_time() - c1
        wrong, examples = check(rulebook, want)
    finally:
        await app.__aexit__(None, None, None)
    return {
        "cpu_s": cpu,
        "analysis_cpu_s": analysis,
        "warnings": warnings,
        "rules": len(want),
        "rss_bytes_per_rule": (rss1 - rss0) * 1024 * 1024 / len(want),
        "live_bytes_per_rule": live / len(want) if live is not None else None,
        "wrong": wrong,
        "wrong_examples": examples,
    }


def run_child(*args: str) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(n: int, mix: bool, files: int, runs: int, trace: bool, tmp: Path) -> dict[str, Any]:
    root = tmp / f"{'mix' if mix else 'prefix'}-{files}"
    common.write_dispatch_rules(root, n, mix=mix, files=files)
    base = ["--dir", str(root), "--n", str(n), "--files", str(files)] + (["--mix"] if mix else [])
    floors, loads = [], []
    for _ in range(runs):  # alternated, so both see the same neighbours
        floors.append(run_child("floor", *base)["cpu_s"])
        loads.append(run_child("tmy", *base))
    best = min(loads, key=lambda r: r["cpu_s"])
    row = {
        "set": "mix" if mix else "prefix",
        "files": files,
        "rules": best["rules"],
        "floor_cpu_s": round(min(floors), 3),
        "tmy_cpu_s": round(best["cpu_s"], 3),
        "ratio": round(best["cpu_s"] / min(floors), 2),
        "rss_bytes_per_rule": round(statistics.median(r["rss_bytes_per_rule"] for r in loads)),
        "analysis_cpu_s": round(min(r["analysis_cpu_s"] for r in loads), 3),
        "wrong": sum(r["wrong"] for r in loads),
        "wrong_examples": [e for r in loads for e in r["wrong_examples"]][:5],
        "runs": {"floor_cpu_s": floors, "tmy": loads},
    }
    if trace:
        traced = run_child("tmy", *base, "--trace")
        row["live_bytes_per_rule"] = round(traced["live_bytes_per_rule"])
    return row


def main() -> int:
    p = common.base_parser(__doc__.split("\n")[0])
    p.add_argument("--child", choices=("floor", "tmy"), help="internal: one measurement")
    p.add_argument("--dir", type=Path)
    p.add_argument("--n", type=int)
    p.add_argument("--files", type=int, default=1)
    p.add_argument("--mix", action="store_true")
    p.add_argument("--trace", action="store_true", help="child: tracemalloc the load")
    p.add_argument("--runs", type=int)
    p.add_argument("--tracemalloc", action="store_true", help="also report live bytes per rule")
    args = p.parse_args()
    if args.child == "floor":
        print(json.dumps(child_floor(args.dir)))
        return 0
    if args.child == "tmy":
        res = asyncio.run(child_tmy(args.dir, args.n, args.mix, args.files, args.trace))
        print(json.dumps(res))
        return 0
    n = args.n or (10_000 if args.quick else 100_000)
    runs = args.runs or (1 if args.quick else 3)
    rows = []
    with common.temp_dir("rule-load") as tmp:
        for s, files in CASES:
            row = measure(n, s == "mix", files, runs, args.tracemalloc, tmp)
            rows.append(row)
            print(f"  {s} / {files} file(s): {row['tmy_cpu_s']} s vs {row['floor_cpu_s']} s",
                  file=sys.stderr, flush=True)  # fmt: skip
    headers = ["set", "files", "rules", "floor CPU s", "tmy CPU s", "ratio", "RSS B/rule",
               "analysis CPU s", "wrong"]  # fmt: skip
    if args.tracemalloc:
        headers.append("live B/rule")
    body = [
        [r["set"], r["files"], r["rules"], r["floor_cpu_s"], r["tmy_cpu_s"], r["ratio"],
         r["rss_bytes_per_rule"], r["analysis_cpu_s"], r["wrong"]]
        + ([r["live_bytes_per_rule"]] if args.tracemalloc else [])
        for r in rows
    ]  # fmt: skip
    print(common.table(f"Rule load: {n:,} rules, App start vs libyaml events", headers, body))
    wrong = sum(r["wrong"] for r in rows)
    met = all(r["ratio"] <= GOAL_RATIO and r["rss_bytes_per_rule"] <= GOAL_BYTES for r in rows)
    print(f"goal (ratio <= {GOAL_RATIO}, RSS <= {GOAL_BYTES:,} B/rule): "
          f"{'met' if met else 'NOT met'}; wrong = {wrong}")  # fmt: skip
    for r in rows:
        for e in r["wrong_examples"]:
            print(f"  wrong: {e}")
    if not args.no_write:
        path = common.write_result(
            "rule_load", {"n": n, "runs": runs, "rows": rows, "goal_met": met}, quick=args.quick
        )
        print(f"written: {path.relative_to(common.ROOT)}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
