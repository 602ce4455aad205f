"""One of two daemons stalled mid check-in for 8 s: does the same user check in twice?

Two real daemons (``python run.py serve``) share one store and run the README's
check-in rule, with a slow HTTP step (to a local gate) between the increment
and the date stamp. Each round a new user checks in on daemon A; once A's run
sits in the slow step (holding the span's leases), A is stalled for
``--stall`` seconds (8) — SIGSTOP, or with ``--partition`` (Redis only) its
link to Redis frozen by a small TCP proxy this script runs — while the same
user checks in on daemon B. B gets the leases once A's have expired (5 s by
default) and checks the user in. Then A resumes and its run finishes: it must
not check the user in a second time.

    python bench/checkin_stall.py                      # SQLite + Redis (SIGSTOP) + Redis partition
    python bench/checkin_stall.py --mode sqlite --rounds 3
    python bench/checkin_stall.py --tmy-root /tmp/tmy-old   # the same against another checkout

Loopback only; bounded (each round ≤ stall + 60 s); writes
bench/results/checkin_stall.txt (.quick.txt with --rounds < 10).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from checkin_common import (
    ROOT,
    SUCCESS,
    Daemon,
    FreezingProxy,
    Gate,
    checkin_state,
    write_rules,
)
from common import (
    REDIS_DB,
    REDIS_HOST,
    REDIS_PORT,
    redis_available,
    redis_cleanup,
    redis_prefix,
    redis_url,
)


async def run_mode(
    mode: str, rounds: int, stall: float, lease_ttl: float | None, root: Path
) -> dict[str, int]:
    prefix = redis_prefix()
    gate = Gate(hold_first=True)
    await gate.start()
    proxy = FreezingProxy(REDIS_HOST, REDIS_PORT)
    await proxy.start()
    option = "" if lease_ttl is None else f"lease_ttl={lease_ttl:g}"
    with tempfile.TemporaryDirectory(prefix="tmy-stall-") as tmp_dir:
        tmp = Path(tmp_dir)
        if mode == "sqlite":
            store_a = store_b = f"sqlite:///{tmp / 'tmy.db'}" + (f"?{option}" if option else "")
        else:
            store_b = redis_url(prefix) + (f"&{option}" if option else "")
            store_a = store_b
            if mode == "redis-partition":  # A reaches Redis only through the proxy
                store_a = store_b.replace(f":{REDIS_PORT}/", f":{proxy.port}/", 1)
        rules = write_rules(tmp / "rules", gate)
        a = Daemon("a", tmp, rules, store_a, root=root)
        b = Daemon("b", tmp, rules, store_b, root=root)
        counts = {"rounds": 0, "one": 0, "duplicates": 0, "none": 0, "a_lease_error": 0}
        try:
            await asyncio.gather(a.start(), b.start())
            for i in range(rounds):
                user = f"s{i}"
                gate.rearm()
                asking_a = asyncio.ensure_future(a.ask("签到", user, timeout=stall + 60))
                await gate.wait_arrival()  # A holds the leases, between increment and stamp
                stalled = time.monotonic()
                if mode == "redis-partition":
                    proxy.freeze()
                else:
                    a.signal(signal.SIGSTOP)
                asking_b = asyncio.ensure_future(b.ask("签到", user, timeout=stall + 60))
                await asyncio.sleep(max(0.0, stall - (time.monotonic() - stalled)))
                proxy.thaw()
                a.signal(signal.SIGCONT)
                gate.release()
                answer_a, answer_b = await asyncio.wait_for(
                    asyncio.gather(asking_a, asking_b), stall + 60
                )
                state = await checkin_state(store_b, user)
                answers = (str(x.get("answer", "")) for x in (answer_a, answer_b))
                wins = sum(text.startswith(SUCCESS) for text in answers)
                counts["rounds"] += 1
                if wins > 1 or (state[0] or 0) > 1:
                    counts["duplicates"] += 1
                elif wins == 1 and state[0] == 1:
                    counts["one"] += 1
                else:
                    counts["none"] += 1
                counts["a_lease_error"] += "lease" in str(answer_a.get("error") or "")
                print(
                    f"{mode} round {i + 1:2}: A {answer_a.get('answer')!r} "
                    f"(error {answer_a.get('error')!r}); B {answer_b.get('answer')!r}; "
                    f"store {state}",
                    flush=True,
                )
        finally:
            a.stop()
            b.stop()
            await gate.stop()
            await proxy.stop()
            if mode != "sqlite":
                redis_cleanup(prefix)
    return counts


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--mode", choices=("sqlite", "redis", "redis-partition", "all"), default="all"
    )
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--stall", type=float, default=8.0, help="seconds A is stalled")
    parser.add_argument(
        "--lease-ttl", type=float, default=None, help="store ?lease_ttl= (default: 5 s)"
    )
    parser.add_argument("--tmy-root", type=Path, default=ROOT, help="checkout to run daemons")
    args = parser.parse_args()
    # this process opens the store only to read the results: its lease clean-up
    # notes ("cleared the lease of a dead holder") are the daemons' business
    logging.getLogger("tmy.store").setLevel(logging.ERROR)
    modes = ["sqlite", "redis", "redis-partition"] if args.mode == "all" else [args.mode]
    lines = [
        f"checkin_stall: two daemons on one store, A stalled {args.stall:g}s mid check-in "
        f"(lease {args.lease_ttl or 5:g}s) while B serves the same user's check-in",
        f"command: python bench/checkin_stall.py {' '.join(sys.argv[1:])}".rstrip(),
        f"daemon code: {args.tmy_root}",
        f"redis: {REDIS_HOST}:{REDIS_PORT}/{REDIS_DB}",
        f"when: {time.strftime('%Y-%m-%d %H:%M:%S')}",
        "",
        "mode | rounds | exactly one check-in | duplicate check-ins | none | "
        "A ended with a lease error",
    ]
    ok = True
    for mode in modes:
        if mode != "sqlite" and not redis_available():
            lines.append(f"{mode} | skipped: no Redis at {REDIS_HOST}:{REDIS_PORT}")
            continue
        c = await run_mode(mode, args.rounds, args.stall, args.lease_ttl, args.tmy_root)
        lines.append(
            f"{mode} | {c['rounds']} | {c['one']} | {c['duplicates']} | {c['none']} | "
            f"{c['a_lease_error']}"
        )
        ok = ok and c["duplicates"] == 0 and c["one"] == c["rounds"]
    lines.append("")
    lines.append("verdict: " + ("0 duplicates" if ok else "DUPLICATES OR LOST CHECK-INS"))
    text = "\n".join(lines) + "\n"
    print(text)
    results = Path(__file__).resolve().parent / "results"
    results.mkdir(exist_ok=True)
    name = "checkin_stall" + ("" if args.tmy_root == ROOT else ".other")
    (results / f"{name}{'' if args.rounds >= 10 else '.quick'}.txt").write_text(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
