"""kill -9 at random points in the check-in rule: points and stamp always consistent?

A real daemon (``python run.py serve``) runs the README's check-in rule with a
deliberately slow HTTP step (``--slow`` seconds, to a local gate) between the
increment and the date stamp. Each round a new user checks in and the daemon
is killed with SIGKILL at a random moment between sending the message and a
little after the slow step would end — before the rule, mid-way between two
of its steps, or after it. Then the store is read: the user's points and
stamp must be consistent (neither written, or one point stamped today). The
daemon is restarted and the user checks in again: exactly one point in all.

    python bench/checkin_kill.py                       # SQLite and Redis, 20 rounds each
    python bench/checkin_kill.py --backend sqlite --rounds 5
    python bench/checkin_kill.py --tmy-root /tmp/tmy-old   # the same against another checkout

Loopback only; writes bench/results/checkin_kill.txt (.quick.txt with --rounds < 20).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from checkin_common import (
    ALREADY,
    ROOT,
    SUCCESS,
    Daemon,
    Gate,
    checkin_state,
    consistent,
    today,
    write_rules,
)
from common import redis_available, redis_cleanup, redis_prefix, redis_url


async def run_backend(
    backend: str, rounds: int, slow: float, rng: random.Random, root: Path
) -> dict[str, int]:
    prefix = redis_prefix()
    gate = Gate(delay=slow)
    await gate.start()
    with tempfile.TemporaryDirectory(prefix="tmy-kill-") as tmp_dir:
        tmp = Path(tmp_dir)
        store = f"sqlite:///{tmp / 'tmy.db'}" if backend == "sqlite" else redis_url(prefix)
        daemon = Daemon("d", tmp, write_rules(tmp / "rules", gate), store, root=root)
        counts = {"rounds": 0, "none": 0, "all": 0, "torn": 0, "bad_final": 0, "between": 0}
        try:
            await daemon.start()
            for i in range(rounds):
                user = f"k{i}"
                seen = gate.arrivals
                asking = asyncio.ensure_future(daemon.ask("签到", user))
                await asyncio.sleep(rng.uniform(0.0, slow + 0.15))
                daemon.kill()
                killed = time.monotonic()
                # inside the slow step: after the increment, before the stamp
                between = gate.arrivals > seen and killed - gate.last_arrival < slow
                counts["between"] += between
                await asyncio.wait_for(asking, 30)
                state = await checkin_state(store, user)
                kind = "torn" if not consistent(state) else ("none" if state[0] is None else "all")
                counts[kind] += 1
                counts["rounds"] += 1
                await daemon.start()
                again = await daemon.ask("签到", user)
                expected = f"{SUCCESS}，累计 1 次" if kind == "none" else ALREADY
                final = await checkin_state(store, user)
                if again.get("answer") != expected or final != (1, today()):
                    counts["bad_final"] += 1
                print(
                    f"{backend} round {i + 1:2}: killed {'between' if between else 'outside'}"
                    f"; after kill {state!s:28} -> {kind:4}; "
                    f"again: {again.get('answer')!r}, final {final}",
                    flush=True,
                )
        finally:
            daemon.stop()
            await gate.stop()
            if backend == "redis":
                redis_cleanup(prefix)
    return counts


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "redis", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--slow", type=float, default=0.4, help="seconds of the slow step")
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--tmy-root", type=Path, default=ROOT, help="checkout to run the daemon")
    args = parser.parse_args()
    # this process opens the store only to read the results: its lease clean-up
    # notes ("cleared the lease of a dead holder") are the daemons' business
    logging.getLogger("tmy.store").setLevel(logging.ERROR)
    rng = random.Random(args.seed)
    backends = ["sqlite", "redis"] if args.backend == "both" else [args.backend]
    lines = [
        "checkin_kill: kill -9 at random points in the check-in rule "
        f"(slow step {args.slow:g}s between increment and stamp), restart after each",
        f"command: python bench/checkin_kill.py {' '.join(sys.argv[1:])}".rstrip(),
        f"daemon code: {args.tmy_root}",
        f"when: {time.strftime('%Y-%m-%d %H:%M:%S')}",
        "",
        "backend | kills | of which between increment and stamp | nothing written | "
        "all written | torn (points without stamp or the reverse) | wrong after restart",
    ]
    ok = True
    for backend in backends:
        if backend == "redis" and not redis_available():
            lines.append("redis | skipped: no Redis at 127.0.0.1:6379")
            continue
        c = await run_backend(backend, args.rounds, args.slow, rng, args.tmy_root)
        lines.append(
            f"{backend} | {c['rounds']} | {c['between']} | {c['none']} | {c['all']} | "
            f"{c['torn']} | {c['bad_final']}"
        )
        ok = ok and c["torn"] == 0 and c["bad_final"] == 0
    lines.append("")
    lines.append("verdict: " + ("consistent every time" if ok else "INCONSISTENT"))
    text = "\n".join(lines) + "\n"
    print(text)
    results = Path(__file__).resolve().parent / "results"
    results.mkdir(exist_ok=True)
    name = "checkin_kill" + ("" if args.tmy_root == ROOT else ".other")
    (results / f"{name}{'' if args.rounds >= 20 else '.quick'}.txt").write_text(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
