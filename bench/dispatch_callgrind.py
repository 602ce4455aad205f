"""Dispatch in instructions: callgrind's count per matched message, and the floor's.

Wall time on a shared 2-core VM swings ±15%; the instructions a message costs do
not. For the floor and for N = 10 and 10,000 prefix rules (``kw<i>*``, one ADJUST
step each, as :mod:`dispatch` generates them), a child process runs under
``valgrind --tool=callgrind``: after loading and a warm-up it sends M1 messages,
then M2 more, each batch between two markers (``os.getppid()`` zeroes callgrind's
counters, ``os.getpgrp()`` dumps them), so only the batches are counted — loading,
start-up and exit (whose instruction counts vary by millions from run to run)
are not. Per-message instructions = (Ir(M2) − Ir(M1)) / (M2 − M1): what a batch
costs beyond its messages cancels out too.

- **tmy**: the real :class:`tmy.app.App` on the rules, logging at the shipped
  level ``info`` into a file; each message (the last rule's trigger) goes
  through ``Engine.handle(Message) -> Reply``, the entry every adapter calls.
- **tmy, template rules** (``--template``, run beside by default): the same rules but
  each answers ``ok-r<i> {USER_NAME}`` — a template that reads a local, so the run
  is the general one (locals, the step's coroutine, ``log_run``'s line), not the
  constant-rule plan (:mod:`tmy.engine.plans`). Replies are checked the same way.
- **floor**: the same driver loop awaiting a handler that does ``text.split()``,
  one dict lookup (first word → rule id) and builds the reply string.

Every reply is checked (rule and text; a wrong one fails the run, exit 1).

    python bench/dispatch_callgrind.py             # floor, N = 10 and 10,000, both rule shapes
    python bench/dispatch.py --callgrind           # the same, from dispatch.py
    python bench/dispatch_callgrind.py --quick     # N = 10 only, fewer messages
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common

VALGRIND = "/usr/bin/valgrind"
GOAL = 40_000  # issue 24, goal 5: instructions per matched message at info


# -- inside valgrind ---------------------------------------------------------------------------


USER = "bench-user"
TEMPLATE_TAIL = " {USER_NAME}"  # the template rules' answer: "ok-r<i> " + the user's name


def _answer(rule: str, template: bool) -> str:
    return common.answer_for(rule) + (" " + USER if template else "")


def template_rules_yaml(n: int) -> str:
    """:func:`common.dispatch_rules_yaml`'s ``kw<i>*`` rules, each answering a template."""
    parts = ["rules:\n"]
    for i in range(n):
        rid = f"r{i}"
        parts.append(
            f"  - id: {rid}\n    triggers: ['{common.trigger_for(i, 'prefix')}']\n"
            f"    steps:\n      - plugin: ADJUST\n"
            f'        input: "{common.answer_for(rid)}{TEMPLATE_TAIL}"\n'
        )
    return "".join(parts)


async def _drive(handle: Any, msgs: list[tuple[str, str, str]], message: Any = None) -> int:
    """Send every message, return how many replies were wrong (rule or text).

    ``message``: what tmy's messages are built with, in the loop as an adapter builds
    one per event (keywords and all: ``Message.new``); None (the floor): the text itself."""
    wrong = 0
    if message is None:
        for text, expected, answer in msgs:
            reply = await handle(text)
            if reply.rule != expected or reply.text != answer:
                wrong += 1
        return wrong
    for text, expected, answer in msgs:
        reply = await handle(message(text, user=USER, platform="bench"))
        if reply.rule != expected or reply.text != answer:
            wrong += 1
    return wrong


async def _batches(
    handle: Any, message: Any, msgs: list[tuple[str, Any]], sizes: list[int], template: bool = False
) -> int:
    """The warm-up (the first ``sizes[0]`` messages), then each batch between markers.

    Each message's expected answer is made here, outside the measured batches."""
    msgs = [(text, rule, _answer(rule, template)) for text, rule in msgs]
    wrong = await _drive(handle, msgs[: sizes[0]], message)
    at = sizes[0]
    for size in sizes[1:]:
        batch = msgs[at : at + size]
        at += size
        os.getppid()  # callgrind: --zero-before=os_getppid
        wrong += await _drive(handle, batch, message)
        os.getpgrp()  # callgrind: --dump-before=os_getpgrp
    return wrong


class _FloorReply:
    __slots__ = ("rule", "text")

    def __init__(self, rule: str | None, text: str) -> None:
        self.rule = rule
        self.text = text


async def _floor(n: int, sizes: list[int]) -> int:
    table = {f"kw{i}": f"r{i}" for i in range(n)}

    async def handle(text: str) -> _FloorReply:
        rule = table.get(text.split()[0])
        return _FloorReply(rule, "" if rule is None else "ok-" + rule)

    msgs = common.dispatch_messages(n, "last", sum(sizes), mix=False)
    return await _batches(handle, None, msgs, sizes)


async def _tmy(n: int, sizes: list[int], template: bool = False) -> int:
    from tmy import logs
    from tmy.app import App
    from tmy.builtins import extensions
    from tmy.message import Message

    with common.temp_dir(f"dispatch-cg-{n}") as tmp:
        common.configure_logs(tmp)
        if template:
            common.write_rules(tmp / "rules", template_rules_yaml(n))
        else:
            common.write_dispatch_rules(tmp / "rules", n, mix=False)
        msgs = common.dispatch_messages(n, "last", sum(sizes), mix=False)
        settings = common.settings_for(tmp, rules=tmp / "rules")
        async with App(settings, extensions=extensions()) as app:
            wrong = await _batches(app.engine.handle, Message.new, msgs, sizes, template)
        logs.configure(common.LOG_LEVEL, stream=io.StringIO())  # its file goes with tmp
        return wrong


def inner(kind: str, n: int, sizes: list[int]) -> int:
    if kind == "floor":
        wrong = asyncio.run(_floor(n, sizes))
    else:
        wrong = asyncio.run(_tmy(n, sizes, kind == "template"))
    print(json.dumps({"wrong": wrong}))
    return 0


# -- outside -----------------------------------------------------------------------------------


def _batch_irs(kind: str, n: int, sizes: list[int]) -> tuple[list[int], int]:
    """(instructions of each batch, wrong replies) for one child under callgrind."""
    with tempfile.TemporaryDirectory(prefix="tmy-cg-") as tmp:
        out = Path(tmp) / "callgrind.out"
        cmd = [
            VALGRIND,
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            "--zero-before=os_getppid",
            "--dump-before=os_getpgrp",
            sys.executable,
            str(Path(__file__).resolve()),
            "--inner",
            kind,
            "--n",
            str(n),
            "--sizes",
            ",".join(map(str, sizes)),
        ]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
        if proc.returncode != 0:
            raise RuntimeError(f"callgrind {kind} n={n} failed:\n{proc.stderr[-3000:]}")
        irs = common.callgrind_dumps(Path(tmp))
        if len(irs) != len(sizes) - 1:
            raise RuntimeError(f"{len(irs)} batch dumps for {len(sizes) - 1} batches in {tmp}")
        wrong = json.loads(proc.stdout.strip().splitlines()[-1])["wrong"]
        return irs, wrong


def measure(kind: str, n: int, warmup: int, m1: int, m2: int) -> dict[str, Any]:
    """Per-message instructions of ``kind`` at ``n`` rules: the M2 − M1 difference."""
    t = time.perf_counter()
    (ir1, ir2), wrong = _batch_irs(kind, n, [warmup, m1, m2])
    per = (ir2 - ir1) / (m2 - m1)
    print(
        f"  {kind:8} N={n:>6,}: {per:,.0f} instructions/msg ({time.perf_counter() - t:.0f}s)",
        file=sys.stderr,
        flush=True,
    )
    return {
        "kind": kind,
        "n": n,
        "ir_m1": ir1,
        "ir_m2": ir2,
        "m1": m1,
        "m2": m2,
        "per_message": round(per),
        "wrong": wrong,
    }


_WHAT = {
    "tmy": "tmy Engine.handle, constant rules, info to a file",
    "template": "tmy Engine.handle, template rules, info to a file",
}


def run(ns: tuple[int, ...], warmup: int, m1: int, m2: int, write: bool, quick: bool) -> int:
    floor = measure("floor", max(ns), warmup, m1, m2)
    rows = [measure(kind, n, warmup, m1, m2) for kind in ("tmy", "template") for n in ns]
    body = [["floor (split + dict + reply)", floor["n"], floor["per_message"], 1.0, floor["wrong"]]]
    body += [
        [_WHAT[r["kind"]], r["n"], r["per_message"],
         round(r["per_message"] / floor["per_message"], 1), r["wrong"]]
        for r in rows
    ]  # fmt: skip
    print(
        common.table(
            f"Dispatch in instructions per matched message (callgrind, M{m2}−M{m1})",
            ["what", "rules", "instructions/msg", "× floor", "wrong"],
            body,
        )
    )
    wrong = floor["wrong"] + sum(r["wrong"] for r in rows)
    # goal 5 is the constant (FAQ) rules' dispatch, the shape its 104,633 was measured on;
    # template rules are reported beside it, not as a goal of their own
    worst = max(r["per_message"] for r in rows if r["kind"] == "tmy")
    targets = [
        {
            "target": f"<= {GOAL:,} instructions per matched message at info, constant rules",
            "value": worst,
            "ok": worst <= GOAL,
        },
        {"target": "every reply right", "value": f"{wrong} wrong", "ok": wrong == 0},
    ]
    templates = [r["per_message"] for r in rows if r["kind"] == "template"]
    if templates:
        print(f"template rules (beside the goal): {max(templates):,.0f} instructions/msg at most")
    print(
        common.table(
            "Dispatch callgrind targets",
            ["target", "measured", "verdict"],
            [[t["target"], t["value"], common.verdict(t["ok"])] for t in targets],
        )
    )
    if write:
        path = common.write_result(
            "dispatch_callgrind",
            {"warmup": warmup, "floor": floor, "rows": rows, "targets": targets},
            quick=quick,
        )
        print(f"\nwritten: {path.relative_to(common.ROOT)}")
    return 0 if wrong == 0 else 1


def main(argv: list[str] | None = None) -> int:
    p = common.base_parser(__doc__.split("\n")[0])
    p.add_argument(
        "--inner", choices=("tmy", "template", "floor"), help="internal: the measured child"
    )
    p.add_argument("--n", type=int, action="append", help="rule counts (repeatable)")
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--sizes", help="child: warm-up,batch,batch… message counts")
    p.add_argument("--m1", type=int, default=200)
    p.add_argument("--m2", type=int, help="the larger run's messages (default 1,200)")
    args = p.parse_args(argv)
    if args.inner:
        sizes = [int(x) for x in (args.sizes or f"{args.warmup},0").split(",")]
        return inner(args.inner, (args.n or [10])[0], sizes)
    ns = tuple(args.n) if args.n else ((10,) if args.quick else (10, 10_000))
    m2 = args.m2 or (600 if args.quick else 1_200)
    return run(ns, args.warmup, args.m1, m2, not args.no_write, args.quick)


if __name__ == "__main__":
    sys.exit(main())
