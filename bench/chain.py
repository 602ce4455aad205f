"""Chains with state: a 5-step chain on SQLite and on Redis, sequential and at concurrency 64.

The rule (ADJUST steps, the executor that returns its input):

1. a template            ``input: "{MAGIC}:{QUESTION}:{USER}"``
2. an expression         ``input: "?= STEP_RESULT.upper() + ' #' + str(len(QUESTION))"``
3. a ``when``            ``when: "?= QUESTION != 'skip'"``, ``input: "{STEP_RESULT} | "``,
                         ``save: PRE_ANSWER`` (a run local)
4. a ``save`` into a persistent variable: ``save: last`` (``last`` has ``scope: user``)
5. a LOOPBACK on a persistent list: ``input: LOOPBACK``, ``INPUT: items`` (global list of 5)

The reply is ``PRE_ANSWER + STEP_RESULT`` = ``"CHAIN:<Q>:<USER> #<len> | <member>"``.
Persistent operations per message: 2 (step 4: one write; step 5: one atomic
read-modify-write of the list); nothing else touches the store (no session,
no ``STEP_SUMMARY``). On Redis the target is <= 1 round-trip per persistent
operation, i.e. <= 2 per message.

Checked for every message: the rule, the exact reply text (template,
expression, ``when`` and the LOOPBACK member). After each run: every list
member was handed out equally often (an exact rotation: no lost or doubled
update under concurrency), the stored list is the expected rotation, and each
user's stored ``last`` is what that user's final message saved.

Redis: db 15 at 127.0.0.1:6379 with a unique key prefix, keys deleted at the
end. Round-trips: ``INFO commandstats`` deltas over the measured messages,
divided by the messages; Redis counts the GET/SET a Lua script runs as calls
too, so a short extra pass under ``MONITOR`` (filtered to this run's key
prefix and connections) splits client-sent commands (= round-trips, nothing is
pipelined) from the script-internal ones.

    python bench/chain.py            # 10,000 messages per case
    python bench/chain.py --quick    # 600 messages per case
"""

from __future__ import annotations

import asyncio
import gc
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import common

ITEMS = ["alpha", "beta", "gamma", "delta", "eps"]
RULES = f"""\
variables:
  items: {{scope: global, default: {ITEMS!r}}}
  last: {{scope: user, default: ""}}
rules:
  - id: chain
    triggers: ["chain*"]
    steps:
      - id: template
        plugin: ADJUST
        input: "{{MAGIC}}:{{QUESTION}}:{{USER}}"
      - id: expression
        plugin: ADJUST
        input: "?= STEP_RESULT.upper() + ' #' + str(len(QUESTION))"
      - id: when
        plugin: ADJUST
        when: "?= QUESTION != 'skip'"
        input: "{{STEP_RESULT}} | "
        save: PRE_ANSWER
      - id: save
        plugin: ADJUST
        save: last
      - id: loopback
        plugin: ADJUST
        input: LOOPBACK
        INPUT: items
"""
PERSISTENT_OPS = 2


def prefix_of(question: str, user: str) -> str:
    return f"CHAIN:{question.upper()}:{user.upper()} #{len(question)} | "


def messages(count: int, users: int) -> list[tuple[str, str, str]]:
    """(text, user, expected prefix); message k goes to user k % users."""
    out = []
    for k in range(count):
        q, user = f"q{k}", f"u{k % users}"
        out.append((f"chain {q}", user, prefix_of(q, user)))
    return out


async def drive(engine: Any, msgs: list[tuple[str, str, str]], concurrency: int) -> dict[str, Any]:
    """Send ``msgs``: ``concurrency`` workers, each sending its share one after another."""
    from tmy.message import Message

    lat: list[int] = []
    members: Counter[str] = Counter()
    wrong = 0
    examples: list[str] = []
    clock = time.perf_counter_ns
    queues = [msgs[w::concurrency] for w in range(concurrency)]

    async def worker(batch: list[tuple[str, str, str]]) -> None:
        nonlocal wrong
        for text, user, expect in batch:
            msg = Message(text, user=user, platform="bench")
            t0 = clock()
            reply = await engine.handle(msg)
            lat.append(clock() - t0)
            member = reply.text[len(expect) :]
            if (
                reply.rule != "chain"
                or reply.error is not None
                or not reply.text.startswith(expect)
                or member not in ITEMS
            ):
                wrong += 1
                if len(examples) < 5:
                    examples.append(f"{text!r}/{user}: {reply.rule} {reply.text!r} {reply.error}")
            else:
                members[member] += 1

    start, cpu = clock(), time.process_time()
    await asyncio.gather(*(worker(q) for q in queues))
    wall = (clock() - start) / 1e9
    cpu = time.process_time() - cpu  # this process's CPU (user + system), all threads
    return {
        "messages": len(msgs),
        "concurrency": concurrency,
        "wall_s": round(wall, 3),
        "msgs_per_s": round(len(msgs) / wall, 1),
        "client_cpu_us_per_msg": round(cpu / len(msgs) * 1e6, 1),
        **common.summarize_ns(lat),
        "wrong": wrong,
        "wrong_examples": examples,
        "members": dict(members),
    }


async def check_state(
    app: Any, msgs: list[tuple[str, str, str]], total_sent: int, users: int
) -> list[str]:
    """The stored list is the exact rotation; each user's ``last`` is its final message's."""
    from tmy.engine.variables import variable_key
    from tmy.message import Message
    from tmy.store.base import MISSING

    problems = []
    rb = app.engine.rulebook
    store = app.store
    items = await store.get(variable_key(rb.variables["items"], Message("", platform="bench")))
    k = total_sent % len(ITEMS)
    want = ITEMS[k:] + ITEMS[:k]
    if items != want:
        problems.append(f"items after {total_sent} LOOPBACKs is {items}, expected {want}")
    for u in range(min(users, 8)):
        user = f"u{u}"
        mine = [m for m in msgs if m[1] == user]
        if not mine:
            continue
        last = await store.get(
            variable_key(rb.variables["last"], Message("", user=user, platform="bench"))
        )
        want_last = mine[-1][2]
        if last is MISSING or last != want_last:
            problems.append(f"last[{user}] = {last!r}, expected {want_last!r}")
    return problems


class Monitor:
    """``redis-cli MONITOR`` into a file, for counting client vs script commands."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Monitor:
        exe = shutil.which("redis-cli")
        if exe is None:
            return self
        self.file = self.path.open("w")
        self.proc = subprocess.Popen(
            [exe, "-h", common.REDIS_HOST, "-p", str(common.REDIS_PORT), "monitor"],
            stdout=self.file,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.3)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            time.sleep(0.3)
            common.stop_process(self.proc, 5)
            self.file.close()

    def count(self, prefix: str) -> dict[str, Any] | None:
        """Commands seen for this run: by connections that touched ``prefix``, and in Lua."""
        if self.proc is None:
            return None
        line_re = re.compile(r'^[\d.]+ \[(\d+) ([^\]]+)\] "([^"]+)"(.*)$')
        by_client: dict[str, Counter[str]] = {}
        ours: set[str] = set()
        lua: Counter[str] = Counter()
        for line in self.path.read_text(errors="replace").splitlines():
            m = line_re.match(line)
            if not m or m.group(1) != str(common.REDIS_DB):
                continue
            who, cmd, rest = m.group(2), m.group(3).upper(), m.group(4)
            if who == "lua":
                if prefix in rest:
                    lua[cmd] += 1
                continue
            by_client.setdefault(who, Counter())[cmd] += 1
            if prefix in rest:
                ours.add(who)
        client: Counter[str] = Counter()
        for who in ours:
            client.update(by_client[who])
        return {"client": dict(client), "lua": dict(lua)}


async def run_case(
    store_kind: str,
    concurrency: int,
    count: int,
    warmup: int,
    monitor_msgs: int,
    tmp: Path,
    profile: bool = False,
) -> dict[str, Any]:
    from tmy.app import App
    from tmy.builtins import extensions

    prefix = common.redis_prefix()
    store = (
        common.redis_url(prefix)
        if store_kind == "redis"
        else f"sqlite:///{tmp / f'chain-c{concurrency}.db'}"
    )
    users = max(concurrency, 8)
    settings = common.settings_for(tmp, rules=tmp / "rules", store=store)
    app = App(settings, extensions=extensions())
    await app.__aenter__()
    out: dict[str, Any] = {"store": store_kind, "concurrency": concurrency}
    try:
        warm = messages(warmup, users)
        await drive(app.engine, warm, concurrency)
        msgs = messages(count, users)
        gc.collect()
        before = common.redis_commandstats() if store_kind == "redis" else None
        others = common.redis_other_clients() if store_kind == "redis" else None
        if profile:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            prof.enable()
            res = await drive(app.engine, msgs, concurrency)
            prof.disable()
            stats = pstats.Stats(prof, stream=sys.stderr)
            stats.sort_stats("tottime").print_stats(30)
            stats.sort_stats("cumulative").print_stats(45)
        else:
            res = await drive(app.engine, msgs, concurrency)
        if before is not None:
            delta = common.stats_delta(before, common.redis_commandstats())
            total = sum(delta.values())
            res["redis_commandstats_per_msg"] = {k: round(v / count, 3) for k, v in delta.items()}
            res["redis_calls_per_msg"] = round(total / count, 3)
            res["redis_other_clients"] = others
        sent = warmup + count
        if monitor_msgs and store_kind == "redis":
            mon_msgs = messages(monitor_msgs, users)
            with Monitor(tmp / "monitor.txt") as mon:
                await drive(app.engine, mon_msgs, concurrency)
            counted = mon.count(prefix)
            if counted is not None:
                res["monitor_messages"] = monitor_msgs
                res["roundtrips_per_msg"] = round(sum(counted["client"].values()) / monitor_msgs, 3)
                res["lua_internal_per_msg"] = round(sum(counted["lua"].values()) / monitor_msgs, 3)
                res["monitor_client_commands"] = counted["client"]
                res["monitor_lua_commands"] = counted["lua"]
            sent += monitor_msgs
            msgs = mon_msgs
        res["state_problems"] = await check_state(app, msgs, sent, users)
        spread = set(res["members"].values())
        res["rotation_exact"] = len(spread) == 1 and sum(res["members"].values()) == count
        out.update(res)
    finally:
        await app.__aexit__(None, None, None)
        if store_kind == "redis":
            out["redis_keys_deleted"] = common.redis_cleanup(prefix)
    return out


def evaluate(rows: list[dict]) -> list[dict]:
    by = {(r["store"], r["concurrency"]): r for r in rows}
    t = []
    for (store, conc), need in ((("sqlite", 1), 3000), (("redis", 1), 2000), (("redis", 64), 5000)):
        r = by.get((store, conc))
        if r:
            t.append(
                {
                    "target": f"{store}, concurrency {conc}: >= {need:,} msgs/s",
                    "value": r["msgs_per_s"],
                    "ok": r["msgs_per_s"] >= need,
                }
            )
    r = by.get(("sqlite", 64))
    if r:
        t.append(
            {
                "target": "sqlite, concurrency 64 (no target; for reference)",
                "value": r["msgs_per_s"],
                "ok": None,
            }
        )
    for r in rows:
        if r["store"] == "redis" and "roundtrips_per_msg" in r:
            t.append(
                {
                    "target": f"redis c={r['concurrency']}: <= {PERSISTENT_OPS} round-trips/msg "
                    f"({PERSISTENT_OPS} persistent ops)",
                    "value": r["roundtrips_per_msg"],
                    "ok": r["roundtrips_per_msg"] <= PERSISTENT_OPS + 0.01,
                }
            )
    bad = sum(r["wrong"] + len(r["state_problems"]) + (not r["rotation_exact"]) for r in rows)
    t.append(
        {
            "target": "every reply right; exact LOOPBACK rotation; stored state right",
            "value": f"{bad} problems",
            "ok": bad == 0,
        }
    )
    return t


def report(rows: list[dict], targets: list[dict]) -> str:
    headers = [
        "store",
        "concurrency",
        "msgs/s",
        "p50 µs",
        "p99 µs",
        "wrong",
        "client CPU µs/msg",
        "redis calls/msg",
        "round-trips/msg",
        "lua-internal/msg",
    ]
    body = [
        [
            r["store"],
            r["concurrency"],
            r["msgs_per_s"],
            r["p50_us"],
            r["p99_us"],
            r["wrong"] + len(r["state_problems"]),
            r["client_cpu_us_per_msg"],
            r.get("redis_calls_per_msg"),
            r.get("roundtrips_per_msg"),
            r.get("lua_internal_per_msg"),
        ]
        for r in rows
    ]
    out = [
        common.table(
            f"5-step chain ({PERSISTENT_OPS} persistent operations per message)", headers, body
        )
    ]
    for r in rows:
        if r.get("redis_commandstats_per_msg"):
            out.append(
                f"  redis c={r['concurrency']}: INFO commandstats per message "
                f"{r['redis_commandstats_per_msg']} (other clients connected: "
                f"{r.get('redis_other_clients')}); MONITOR client-sent "
                f"{r.get('monitor_client_commands')} lua {r.get('monitor_lua_commands')} "
                f"over {r.get('monitor_messages')} messages"
            )
    out.append(
        common.table(
            "Chain targets",
            ["target", "measured", "verdict"],
            [[t["target"], t["value"], common.verdict(t["ok"])] for t in targets],
        )
    )
    return "\n".join(out)


async def amain(args: Any) -> list[dict]:
    count = args.messages or (600 if args.quick else 10_000)
    warmup = 100 if args.quick else 500
    monitor = 0 if args.no_monitor else (64 if args.quick else 320)
    stores = args.stores.split(",")
    if "redis" in stores and not common.redis_available():
        print("Redis at 127.0.0.1:6379 is not reachable: skipping the Redis cases", file=sys.stderr)
        stores.remove("redis")
    rows = []
    with common.temp_dir("chain") as tmp:
        common.configure_logs(tmp)
        common.write_rules(tmp / "rules", RULES)
        for store in stores:
            for conc in (1, 64):
                t = time.perf_counter()
                if args.profile and args.profile != f"{store}:{conc}":
                    continue
                r = await run_case(store, conc, count, warmup, monitor, tmp, bool(args.profile))
                rows.append(r)
                print(
                    f"  {store:6} c={conc:<3} {r['msgs_per_s']:>8,.0f} msgs/s "
                    f"p50 {r['p50_us']:.0f}µs p99 {r['p99_us']:.0f}µs "
                    f"cpu {r['client_cpu_us_per_msg']:.0f}µs/msg "
                    f"calls/msg {r.get('redis_calls_per_msg')} rt/msg {r.get('roundtrips_per_msg')}"
                    f" ({time.perf_counter() - t:.0f}s)",
                    file=sys.stderr,
                    flush=True,
                )
    return rows


def main() -> int:
    p = common.base_parser(__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, help="messages per case")
    p.add_argument("--stores", default="sqlite,redis")
    p.add_argument(
        "--profile",
        metavar="STORE:CONCURRENCY",
        help="cProfile only this case (e.g. redis:1), stats to stderr",
    )
    p.add_argument("--no-monitor", action="store_true", help="skip the MONITOR round-trip pass")
    args = p.parse_args()
    rows = asyncio.run(amain(args))
    targets = evaluate(rows)
    print(report(rows, targets))
    if not args.no_write:
        path = common.write_result(
            "chain",
            {
                "rules": RULES,
                "persistent_ops_per_msg": PERSISTENT_OPS,
                "rows": rows,
                "targets": targets,
            },
            quick=args.quick,
        )
        print(f"\nwritten: {path.relative_to(common.ROOT)}")
    return 0


if __name__ == "__main__":
    os.chdir(common.ROOT)
    sys.exit(main())
