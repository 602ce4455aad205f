"""The LLM call in instructions: callgrind's count per call, tmy's and raw aiohttp's.

CPU time on a shared 2-core VM swings by tens of percent from run to run; the
instructions a call costs barely move. Each measurement is a child process under
``valgrind --tool=callgrind``: after the app started and a warm-up burst, it runs
a burst of N1 calls and then one of N2, each between two markers (``os.getppid()``
zeroes callgrind's counters, ``os.getpgrp()`` dumps them), so start-up and exit are
not counted; per call = (Ir(N2) − Ir(N1)) / (N2 − N1).

- **mock**: ``--concurrency`` (300) conversations at a time, each a new user, send
  ``ask q<i>z`` to the rule of ``bench/llm_fanout.py`` (one ``LLM`` step,
  ``history: 4``) through ``Engine.handle``, the model being the TESTONLY mock (no
  network): what tmy does around a model call. The usage flush the calls lead to is
  counted with them.
- **tmy** and **floor**: ``bench/llm_fanout.py``'s in-process burst and its raw
  aiohttp floor, against its fake provider (``bench/llm_fake.py provider``, run
  outside valgrind, 0.2 s latency), N calls at once.

Under valgrind a burst takes some fifty times longer, so the usage flush that runs
every ``llm.budget.flush_interval`` (1 s, the default kept here) carries fewer calls
each time than in a real run: its fixed cost (the lease, two transactions) weighs a
little more per call here than it does in ``bench/llm_fanout.py``.

Every answer is checked (wrong = 0 or exit 1). Redis is the one at 127.0.0.1:6379 db 15
(keys under a random prefix, deleted after).

    python bench/llm_callgrind.py                      # SQLite: mock, tmy, floor
    python bench/llm_callgrind.py --store redis
    python bench/llm_callgrind.py --only mock          # or tmy,floor
    python bench/llm_callgrind.py --compare /tmp/before   # also the same against a checkout
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import common

VALGRIND = "/usr/bin/valgrind"
HERE = Path(__file__).resolve()
KINDS = ("mock", "tmy", "floor")
SIZES = {"mock": (600, 300, 900), "tmy": (300, 300, 600), "floor": (300, 300, 600)}


# -- inside valgrind ---------------------------------------------------------------------------


def _check(replies: list[Any], start: int) -> int:
    wrong = 0
    for i, reply in enumerate(replies, start):
        wrong += reply.rule != "ask" or reply.error is not None or f"q{i}z" not in reply.text
    return wrong


async def _mock(store: str | None, concurrency: int, sizes: list[int]) -> int:
    import llm_fanout

    from tmy.app import App
    from tmy.builtins import extensions
    from tmy.llm import runtime_of
    from tmy.message import Message

    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TMY_LLM_API_KEY", "TMY_LLM_BASE_URL"):
        os.environ.pop(var, None)  # the default model is the TESTONLY mock
    wrong, at = 0, 0
    with common.temp_dir("llm-cg") as tmp:
        common.configure_logs(tmp)
        common.write_rules(tmp / "rules", llm_fanout.RULES)
        settings = common.settings_for(tmp, rules=tmp / "rules", store=store)
        async with App(settings, extensions=extensions()) as app:
            tally = runtime_of(app.engine.services).tally

            async def burst(n: int) -> None:
                nonlocal wrong, at
                for first in range(at, at + n, concurrency):
                    last = min(first + concurrency, at + n)
                    msgs = [
                        Message(f"ask q{i}z", user=f"u{i}", platform="bench")
                        for i in range(first, last)
                    ]
                    wrong += _check(
                        await asyncio.gather(*(app.engine.handle(m) for m in msgs)), first
                    )
                at += n
                await tally.flush()

            await _marked(burst, sizes)
        _quiet()
    return wrong


async def _fanout(kind: str, store: str | None, sizes: list[int]) -> int:
    import aiohttp
    import llm_fanout

    from tmy.app import App
    from tmy.builtins import extensions

    port = common.free_port()
    argv = [sys.executable, str(llm_fanout.FAKE), "provider", "--port", str(port)]
    provider = subprocess.Popen(
        [*argv, "--latency", "0.2"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.environ["OPENAI_API_KEY"] = "x"
    os.environ["OPENAI_BASE_URL"] = f"http://{llm_fanout.HOST}:{port}/v1"
    wrong, at = 0, 0
    try:
        common.wait_http(llm_fanout.HOST, port, proc=provider, timeout=60)
        url = f"http://{llm_fanout.HOST}:{port}/v1/chat/completions"
        with common.temp_dir("llm-cg") as tmp:
            common.configure_logs(tmp)
            common.write_rules(tmp / "rules", llm_fanout.RULES)
            settings = common.settings_for(tmp, rules=tmp / "rules", store=store)
            async with App(settings, extensions=extensions()) as app:
                session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
                try:

                    async def burst(n: int) -> None:
                        nonlocal wrong, at
                        if kind == "tmy":
                            got = await llm_fanout.tmy_burst(app, at, n)
                        else:
                            got = await llm_fanout.floor_burst(session, url, at, n)
                        wrong += got["wrong"]
                        at += n

                    await _marked(burst, sizes)
                finally:
                    await session.close()
            _quiet()
    finally:
        common.stop_process(provider)
    return wrong


async def _marked(burst: Any, sizes: list[int]) -> None:
    await burst(sizes[0])  # the warm-up: imports, connections, caches
    for size in sizes[1:]:
        os.getppid()  # callgrind: --zero-before=os_getppid
        await burst(size)
        os.getpgrp()  # callgrind: --dump-before=os_getpgrp


def _quiet() -> None:
    from tmy import logs

    logs.configure("warning", stream=io.StringIO())  # the log file goes with its folder


def inner(kind: str, store: str | None, concurrency: int, sizes: list[int]) -> int:
    if kind == "mock":
        wrong = asyncio.run(_mock(store, concurrency, sizes))
    else:
        wrong = asyncio.run(_fanout(kind, store, sizes))
    print(json.dumps({"wrong": wrong}))
    return 0


# -- outside -----------------------------------------------------------------------------------


def measure(kind: str, store_name: str, concurrency: int) -> dict[str, Any]:
    """Per-call instructions of ``kind``: the difference of the two measured bursts."""
    sizes = list(SIZES[kind])
    prefix = common.redis_prefix() if store_name == "redis" else ""
    with tempfile.TemporaryDirectory(prefix="tmy-llm-cg-") as tmp:
        out = Path(tmp) / "callgrind.out"
        cmd = [VALGRIND, "--tool=callgrind", f"--callgrind-out-file={out}"]
        cmd += ["--zero-before=os_getppid", "--dump-before=os_getpgrp"]
        cmd += [sys.executable, str(HERE), "--inner", kind, "--concurrency", str(concurrency)]
        cmd += ["--sizes", ",".join(map(str, sizes)), "--store", store_name]
        if prefix:
            cmd += ["--prefix", prefix]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
        finally:
            if prefix:
                common.redis_cleanup(prefix)
        if proc.returncode != 0:
            raise RuntimeError(f"callgrind {kind} failed:\n{proc.stderr[-3000:]}")
        irs = common.callgrind_dumps(Path(tmp))
        if len(irs) != 2:
            raise RuntimeError(f"{len(irs)} burst dumps, not 2")
        wrong = json.loads(proc.stdout.strip().splitlines()[-1])["wrong"]
    per_call = (irs[1] - irs[0]) / (sizes[2] - sizes[1])
    return {"per_call": round(per_call), "bursts": irs, "sizes": sizes, "wrong": wrong}


def main() -> int:
    p = common.base_parser(__doc__.split("\n")[0])
    p.add_argument("--store", choices=("sqlite", "redis"), default="sqlite")
    p.add_argument("--only", help="comma-separated: mock, tmy, floor (default: all)")
    p.add_argument("--concurrency", type=int, default=300, help="mock: conversations at once")
    p.add_argument("--compare", metavar="CHECKOUT", help="also run against this tmy checkout")
    p.add_argument("--inner", choices=KINDS, help=argparse.SUPPRESS)
    p.add_argument("--sizes", help=argparse.SUPPRESS)
    p.add_argument("--prefix", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.inner:
        store = common.redis_url(args.prefix) if args.store == "redis" else None
        sizes = [int(s) for s in args.sizes.split(",")]
        return inner(args.inner, store, args.concurrency, sizes)
    kinds = [k for k in (args.only or ",".join(KINDS)).split(",") if k]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        p.error(f"--only: unknown {', '.join(sorted(unknown))} (mock, tmy, floor)")
    res = {k: measure(k, args.store, args.concurrency) for k in kinds}
    rows = [[k, res[k]["per_call"], res[k]["wrong"]] for k in kinds]
    if "tmy" in res and "floor" in res:
        ratio = res["tmy"]["per_call"] / res["floor"]["per_call"]
        rows.append(["tmy ÷ floor", round(ratio, 2), ""])
    print(
        common.table(
            f"LLM call in instructions (callgrind), store {args.store}",
            ["what", "instructions per call", "wrong"],
            rows,
        )
    )
    compared = None
    if args.compare:
        import llm_fake

        compared = llm_fake.compare(
            args.compare, "llm_callgrind.py", llm_fake.without_compare(sys.argv[1:])
        )
    if not args.no_write:
        name = "llm_callgrind" if args.store == "sqlite" else f"llm_callgrind_{args.store}"
        payload = {"store": args.store, **res}
        if compared is not None:
            payload["compare"] = compared
        path = common.write_result(name, payload, quick=args.quick)
        print(f"\nwritten: {path.relative_to(common.ROOT)}")
    return 0 if all(r["wrong"] == 0 for r in res.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
