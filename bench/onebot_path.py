"""The QQ message path end to end: server CPU per message, against a bare WebSocket floor.

Side by side on loopback, each server in its own process, driven by the same
fake NapCat (``bench/onebot_fake.py``: a OneBot v11 reverse-WebSocket client
sending group message events, ``--in-flight`` (64) unanswered at a time, and
answering every action with an echo'd OK response):

* **floor** — a bare aiohttp WebSocket server that decodes each frame and
  answers each message event with one fixed ``send_msg`` frame;
* **tmy** — ``python run.py serve --no-console`` with the OneBot reverse
  adapter, the SQLite store (the default), logging at ``info`` to a file, and
  N = 1, 10, 100, 1,000, 10,000, 100,000 generated prefix rules (``kw<i>*`` →
  ADJUST ``ok-r<i>``, as ``dispatch.py``); ``send_interval: 0`` (the pacing QQ
  needs is waiting, not CPU) and messages spread over 1,000 groups;
* **NoneBot2** — when ``nonebot2[fastapi]`` and ``nonebot-adapter-onebot`` are
  importable by ``--nonebot-python`` (default: this interpreter; install with
  ``pip install -r bench/requirements-peers.txt``), N ``on_startswith`` rules
  answering with ``matcher.send`` (``bench/onebot_nonebot.py``), at N ≤ 100
  (it tries every matcher on every message), best of 2 windows of at most
  ``--nonebot-count`` messages or ``--nonebot-time-cap`` seconds (then the
  replies in flight are awaited).

Server CPU is the server process's own utime+stime (``/proc/<pid>/stat``) over
the measured window divided by the messages answered in it; best of
``--rounds`` windows of ``--count`` messages after a warm-up. Every reply is
checked (the right text to the right group); any wrong or missing reply makes
the script exit 1. Writes ``bench/results/onebot_path.json``.

    python3 bench/onebot_path.py            # ~2 min
    python3 bench/onebot_path.py --quick    # N = 1 and 1,000, fewer messages
    python3 bench/onebot_path.py --callgrind [--compare CHECKOUT]   # ~2 min per server

``--callgrind`` runs each server under ``valgrind --tool=callgrind`` (instrumented
from the warm-up on, counters zeroed and dumped around one window of ``--count``
messages by signals to ``onebot_fake.py wrap``) and reports instructions per
message: repeatable where CPU time is not (a shared machine changes how many events
one socket read carries, and so the CPU per message). It leaves out the kernel's
share (the system calls), which CPU time includes.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import common
import onebot_fake as fake

GOAL_US = 50.0
GOAL_RATIO = 2.5
GOAL_P99_MS = 5.0
NAMES = {"floor": "floor (bare aiohttp WS)", "tmy": "tmy", "before": "tmy --compare",
         "nonebot": "NoneBot2"}  # fmt: skip
RULES = "1,10,100,1000,10000,100000"  # --rules (--callgrind: 1,10000)
COUNT = 20000  # --count (--callgrind: 1000)
# --callgrind's groups: at callgrind's ~200 messages/s, 1,000 groups would bring each chat
# back after ~5 s, past the chat switch's 2 s verdict cache (a store read per message that
# the real-speed run, each chat back within ~0.1 s, does not make); 100 keep it as then
CG_GROUPS = 100
NONEBOT_MAX_N = 100  # NoneBot2 checks every matcher per message: 1,000 rules is ~2 msgs/s


def _tmy_config(tmp: Path, port: int, n: int) -> Path:
    rules = tmp / "rules"
    rules.mkdir()
    common.write_dispatch_rules(rules, n, mix=False)
    (tmp / "plugins").mkdir()
    config = tmp / "tmy.yaml"
    config.write_text(
        f"""rules: {rules}
plugins: {tmp / "plugins"}
store: sqlite:///{tmp / "tmy.db"}
watch: false
log: {{level: {common.LOG_LEVEL}, file: {tmp / "tmy.log"}, format: json}}
adapters:
  console: {{enabled: false}}
  http:
    listen: 127.0.0.1:{port}
  onebot:
    enabled: true
    access_token: {fake.TOKEN}
    send_interval: 0
""",
        encoding="utf-8",
    )
    return config


def _spawn(kind: str, tmp: Path, port: int, n: int, args: Any) -> subprocess.Popen[bytes]:
    """The server ``kind`` on ``port`` (under callgrind with ``--callgrind``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMY_", "OPENAI_"))}
    env["PYTHONUNBUFFERED"] = "1"
    if kind in ("tmy", "before"):
        env["TMY_CONFIG"] = str(_tmy_config(tmp, port, n))
        root = Path(args.compare) if kind == "before" else common.ROOT
        argv = [sys.executable, str(root / "run.py"), "serve", "--no-console"]
    elif kind == "floor":
        argv = [sys.executable, str(common.BENCH / "onebot_fake.py"), "floor", str(port)]
    else:
        python = args.nonebot_python
        argv = [python, str(common.BENCH / "onebot_nonebot.py"), str(port), str(n), fake.TOKEN]
    if args.profile:  # --profile: cProfile of one window, started and stopped by signals
        env["TMY_BENCH_PROFILE"] = str(tmp / "profile.out")
        argv = [argv[0], str(common.BENCH / "onebot_fake.py"), "wrap", *argv[1:]]
    elif args.callgrind:  # instrumented from the warm-up on (callgrind_control), zeroed and
        # dumped around the window by the wrapper's signals; PYTHONHASHSEED fixed: repeatable
        env["PYTHONHASHSEED"] = "0"
        argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                f"--callgrind-out-file={tmp / 'callgrind.out'}", "--zero-before=os_getppid",
                "--dump-before=os_getpgrp", argv[0], str(common.BENCH / "onebot_fake.py"),
                "wrap", *argv[1:]]  # fmt: skip
    return subprocess.Popen(
        argv,
        cwd=tmp,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=(tmp / f"{kind}.stderr").open("w"),
    )


def _message(n: int, fixed: bool):  # type: ignore[no-untyped-def]
    def message(j: int) -> tuple[str, str]:
        r = (j * 7919) % n
        return common.message_for(r, "prefix"), fake.FLOOR_TEXT if fixed else f"ok-r{r}"

    return message


async def _ready(port: int, proc: subprocess.Popen[bytes], health: str) -> None:
    import aiohttp

    deadline = asyncio.get_running_loop().time() + 180
    async with aiohttp.ClientSession() as session:
        while asyncio.get_running_loop().time() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode} before it was ready")
            try:
                if health == "ws":  # NoneBot2 has no health route: the socket is the test
                    async with session.ws_connect(f"ws://127.0.0.1:{port}/ping-none"):
                        return
                async with session.get(f"http://127.0.0.1:{port}{health}") as r:
                    if r.status < 500:
                        return
            except (aiohttp.ClientError, OSError):
                pass
            await asyncio.sleep(0.1)
    raise TimeoutError("the server did not come up")


async def _side(kind: str, n: int, args: Any) -> dict[str, Any]:
    """Start one server, warm it up, measure ``rounds`` windows; the best CPU window wins."""
    fixed = kind == "floor"
    count = args.count if kind != "nonebot" else min(args.count, args.nonebot_count)
    with tempfile.TemporaryDirectory(prefix=f"tmy-bench-onebot-{kind}-") as name:
        tmp = Path(name)
        port = common.free_port()
        proc = _spawn(kind, tmp, port, n, args)
        try:
            if kind == "nonebot":
                await asyncio.sleep(2.0)
                await _ready(port, proc, "/docs")
            else:
                await _ready(port, proc, "/healthz")
            url = f"ws://127.0.0.1:{port}{fake.PATH}"
            msg = _message(n, fixed)
            next_id = 1
            peer = kind == "nonebot"
            cap = args.nonebot_time_cap if peer else args.time_cap
            if args.callgrind or args.profile:
                return await _instructions(kind, n, proc, url, msg, fixed, tmp, args)
            warm = await fake.drive(url, count=50 if peer else max(count // 5, 200),
                                    in_flight=args.in_flight, first_id=next_id, message=msg,
                                    fixed=fixed, time_cap=cap)  # fmt: skip
            next_id += warm["sent"]
            rounds = []
            for _ in range(min(args.rounds, 2) if peer else args.rounds):
                cpu0 = common.proc_cpu_s(proc.pid)
                r = await fake.drive(url, count=count, in_flight=args.in_flight, first_id=next_id,
                                     message=msg, fixed=fixed, time_cap=cap)  # fmt: skip
                cpu = common.proc_cpu_s(proc.pid) - cpu0
                next_id += r["sent"]
                lat = sorted(r.pop("latencies"))
                r.update(
                    cpu_s=cpu,
                    us_per_msg=cpu / max(1, r["answered"]) * 1e6,
                    msgs_per_s=r["answered"] / r["wall_s"],
                    p50_ms=common.percentile(lat, 50) * 1000,
                    p99_ms=common.percentile(lat, 99) * 1000,
                )
                rounds.append(r)
            best = min(rounds, key=lambda x: x["us_per_msg"])
            return {
                "kind": kind,
                "rules": n,
                "us_per_msg": best["us_per_msg"],
                "msgs_per_s": max(x["msgs_per_s"] for x in rounds),
                "p99_ms": min(x["p99_ms"] for x in rounds),
                "p50_ms": min(x["p50_ms"] for x in rounds),
                "wrong": sum(x["wrong"] for x in rounds) + warm["wrong"],
                "unanswered": sum(x["unanswered"] for x in rounds) + warm["unanswered"],
                "answered": sum(x["answered"] for x in rounds),
                "wrong_examples": [e for x in rounds for e in x["wrong_examples"]][:5],
                "rounds": rounds,
            }
        finally:
            common.stop_process(proc)


async def _instructions(
    kind: str, n: int, proc: subprocess.Popen[bytes], url: str, msg: Any, fixed: bool,
    tmp: Path, args: Any,
) -> dict[str, Any]:  # fmt: skip
    """``--callgrind``: instructions per message of one window of ``count`` messages
    (``--profile``: its cProfile instead). ``--keep DIR`` keeps the dump."""
    import shutil
    import signal

    if not args.profile:
        subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], capture_output=True)
    warm = await fake.drive(url, count=args.count // 2, in_flight=args.in_flight, first_id=1,
                            message=msg, fixed=fixed, time_cap=600, groups=CG_GROUPS)  # fmt: skip
    proc.send_signal(signal.SIGUSR1)  # zero
    await asyncio.sleep(1.0)
    r = await fake.drive(url, count=args.count, in_flight=args.in_flight, first_id=warm["sent"] + 1,
                         message=msg, fixed=fixed, time_cap=600, groups=CG_GROUPS)  # fmt: skip
    proc.send_signal(signal.SIGUSR2)  # dump
    if args.profile:
        return await _profiled(kind, n, tmp / "profile.out", r, warm, args)
    dump = tmp / "callgrind.out.1"
    for _ in range(100):
        if dump.exists() and "totals:" in dump.read_text():
            break
        await asyncio.sleep(0.2)
    totals = [ln for ln in dump.read_text().splitlines() if ln.startswith(("summary:", "totals:"))]
    ir = int(totals[-1].split()[1])
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(dump, Path(args.keep) / f"callgrind.{kind}.{n}.out")
    return {"kind": kind, "rules": n, "ir_per_msg": ir / max(1, r["answered"]),
            "answered": r["answered"], "wrong": r["wrong"] + warm["wrong"],
            "unanswered": r["unanswered"] + warm["unanswered"],
            "wrong_examples": r["wrong_examples"]}  # fmt: skip


async def _profiled(
    kind: str, n: int, out: Path, r: dict[str, Any], warm: dict[str, Any], args: Any
) -> dict[str, Any]:
    """``--profile``: the window's cProfile, its top functions printed (and kept with --keep)."""
    import pstats
    import shutil

    for _ in range(100):
        if out.exists() and out.stat().st_size:
            break
        await asyncio.sleep(0.2)
    await asyncio.sleep(0.5)
    print(f"\n### {NAMES[kind]}, {n:,} rules: cProfile of {r['answered']:,} messages")
    stats = pstats.Stats(str(out))
    stats.sort_stats("tottime").print_stats(45)
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(out, Path(args.keep) / f"profile.{kind}.{n}.out")
    return {"kind": kind, "rules": n, "ir_per_msg": 0.0, "answered": r["answered"],
            "wrong": r["wrong"] + warm["wrong"], "unanswered": r["unanswered"] + warm["unanswered"],
            "wrong_examples": r["wrong_examples"]}  # fmt: skip


def _nonebot_ok(python: str) -> bool:
    code = "import nonebot, nonebot.adapters.onebot.v11, fastapi, uvicorn"
    return subprocess.run([python, "-c", code], capture_output=True).returncode == 0


def _table(floor: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    head = ["server", "rules", "CPU µs/msg", "÷ floor", "msgs/s", "p50 ms", "p99 ms", "wrong"]
    cells = []
    for r in [floor, *rows]:
        cells.append([
            NAMES[r["kind"]],
            "—" if r["kind"] == "floor" else f"{r['rules']:,}",
            f"{r['us_per_msg']:.1f}",
            f"{r['us_per_msg'] / floor['us_per_msg']:.2f}",
            f"{r['msgs_per_s']:,.0f}",
            f"{r['p50_ms']:.2f}",
            f"{r['p99_ms']:.2f}",
            f"{r['wrong'] + r['unanswered']}",
        ])  # fmt: skip
    return common.table("OneBot v11 path (server CPU per message)", head, cells)


def _callgrind(args: Any) -> None:
    """``--callgrind``: instructions per message (repeatable on a shared machine, where CPU
    time is not), the floor's and tmy's (and ``--compare``'s) at each N."""
    rows = [asyncio.run(_side("floor", 1, args))]
    for n in args.rules:
        rows.append(asyncio.run(_side("tmy", n, args)))
        if args.compare:
            rows.append(asyncio.run(_side("before", n, args)))
    floor = rows[0]["ir_per_msg"]
    cells = [[NAMES[r["kind"]], "—" if r["kind"] == "floor" else f"{r['rules']:,}",
              f"{r['ir_per_msg']:,.0f}", f"{r['ir_per_msg'] / floor:.2f}",
              f"{r['wrong'] + r['unanswered']}"] for r in rows]  # fmt: skip
    head = ["server", "rules", "instructions/msg", "÷ floor", "wrong"]
    print(common.table("OneBot v11 path (callgrind, instructions per message)", head, cells))
    if not args.no_write:
        result = {"callgrind": rows, "count": args.count, "in_flight": args.in_flight}
        print(f"wrote {common.write_result('onebot_path_callgrind', result, quick=args.quick)}")
    if sum(r["wrong"] + r["unanswered"] for r in rows):
        sys.exit(f"FAILED: wrong or missing replies, e.g. {rows[-1]['wrong_examples'][:3]}")


async def run(args: Any) -> dict[str, Any]:
    floors = [await _side("floor", 1, args)]
    tmy, before = [], []
    for n in args.rules:
        tmy.append(await _side("tmy", n, args))
        if args.compare:
            before.append(await _side("before", n, args))
    floors.append(await _side("floor", 1, args))
    floor = min(floors, key=lambda x: x["us_per_msg"])
    floor["wrong"] = sum(f["wrong"] for f in floors)
    floor["unanswered"] = sum(f["unanswered"] for f in floors)
    peers: list[dict[str, Any]] = []
    nonebot = _nonebot_ok(args.nonebot_python) and not args.no_nonebot
    if nonebot:
        peers = [await _side("nonebot", n, args) for n in args.rules if n <= NONEBOT_MAX_N]
    return {"floor": floor, "tmy": tmy, "before": before, "nonebot": peers,
            "nonebot_installed": nonebot}  # fmt: skip


def main() -> None:
    parser = common.base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--rules", default=RULES)
    parser.add_argument("--count", type=int, default=COUNT, help="messages per window")
    parser.add_argument("--rounds", type=int, default=3, help="windows per server (best kept)")
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--time-cap", type=float, default=60.0, help="seconds per window at most")
    parser.add_argument("--nonebot-python", default=sys.executable)
    parser.add_argument("--nonebot-count", type=int, default=1000)
    parser.add_argument("--nonebot-time-cap", type=float, default=20.0, help="s per window")
    parser.add_argument("--no-nonebot", action="store_true")
    parser.add_argument("--compare", help="another checkout whose run.py to measure beside tmy")
    parser.add_argument(
        "--callgrind", action="store_true", help="instructions per message (--count 1000)"
    )
    parser.add_argument(
        "--profile", action="store_true", help="tmy's cProfile of one window (--count 1000)"
    )
    parser.add_argument("--keep", help="--callgrind/--profile: copy the dumps into this directory")
    args = parser.parse_args()
    if args.profile:
        args.rules = [int(x) for x in (args.rules if args.rules != RULES else "1").split(",")]
        args.count = args.count if args.count != COUNT else 1000
        for n in args.rules:
            asyncio.run(_side("tmy", n, args))
        return
    if args.callgrind:
        args.rules = [int(x) for x in (args.rules if args.rules != RULES else "1,10000").split(",")]
        args.count = args.count if args.count != COUNT else 1000
        _callgrind(args)
        return
    if args.quick:
        args.rules, args.count, args.rounds = "1,1000", min(args.count, 4000), min(args.rounds, 2)
        args.nonebot_count = min(args.nonebot_count, 300)
    args.rules = [int(x) for x in args.rules.split(",")]
    result = asyncio.run(run(args))
    floor, tmy = result["floor"], result["tmy"]
    print(_table(floor, tmy + result["before"] + result["nonebot"]))
    if not result["nonebot_installed"]:
        print(
            f"NoneBot2: not installed for {args.nonebot_python} (skipped); to add it: pip "
            "install -r bench/requirements-peers.txt (or --nonebot-python VENV/bin/python)"
        )
    worst = max(r["us_per_msg"] for r in tmy)
    flat = max(r["us_per_msg"] for r in tmy) / min(r["us_per_msg"] for r in tmy)
    p99 = max(r["p99_ms"] for r in tmy)
    ratio = worst / floor["us_per_msg"]
    met = worst <= GOAL_US and ratio <= GOAL_RATIO and p99 < GOAL_P99_MS
    print(f"tmy worst {worst:.1f} µs/msg = {ratio:.2f}× the floor ({floor['us_per_msg']:.1f} µs); "
          f"p99 ≤ {p99:.2f} ms at {args.in_flight} in flight (the floor's own p99 "
          f"{floor['p99_ms']:.2f} ms: the fake client shares the cores); "
          f"slowest ÷ fastest N {flat:.2f}; "
          f"goal ≤ {GOAL_US:g} µs, ≤ {GOAL_RATIO:g}×, p99 < {GOAL_P99_MS:g} ms: "
          + ("MET" if met else "NOT MET"))  # fmt: skip
    bad = sum(r["wrong"] + r["unanswered"] for r in [floor, *tmy])
    bad_peer = sum(r["wrong"] for r in result["nonebot"])
    result.update(goal_met=met, worst_us=worst, ratio=ratio, flat=flat, p99_ms=p99,
                  in_flight=args.in_flight, count=args.count, rounds=args.rounds)  # fmt: skip
    if not args.no_write:
        print(f"wrote {common.write_result('onebot_path', result, quick=args.quick)}")
    if bad or bad_peer:
        examples = [e for r in [floor, *tmy, *result["nonebot"]] for e in r["wrong_examples"]]
        print(f"FAILED: {bad + bad_peer} wrong or missing replies, e.g. {examples[:3]}")
        sys.exit(1)


if __name__ == "__main__":
    main()
