"""The LLM call: CPU per call and 1,000 concurrent conversations, in-process and over HTTP.

A fake chat-completions provider runs in its own process (``bench/llm_fake.py
provider``): it sleeps ``--latency`` (0.5 s) and answers ``A:q<i>z`` to a
question containing ``q<i>z``, counting the requests it saw. tmy is configured
the documented way — only ``OPENAI_API_KEY=x OPENAI_BASE_URL=http://127.0.0.1:PORT/v1``
— with one rule ``ask *`` whose single step is ``plugin: LLM`` (``history: 4``,
so each conversation's history is read and written in the store).

Three things, all in one run, each against the floor measured beside it:

1. **In-process** (this process, the real ``App`` lifespan): ``--conversations``
   (1,000) conversations — fresh users ``u<i>`` each round — send ``ask q<i>z``
   at once through ``Engine.handle``. Measured: the time until every reply is in,
   and this process's CPU over the burst (plus the usage flush it leads to) per
   call. The **floor**: the same number of bare concurrent POSTs of the same
   request from one raw aiohttp ``ClientSession`` (``limit=0``), parsed, in this
   process. Rounds alternate tmy / floor (``--rounds``, 3); best of each.
2. **Over HTTP**: ``python run.py serve --http 127.0.0.1:PORT`` with an API key
   (``TMY_HTTP_API_KEYS``; ``adapters.http.max_requests_in_flight`` and
   ``max_connections`` raised to 4,000), loaded from a separate process
   (``bench/llm_fake.py load``: as many concurrent ``POST /v1/messages``).
   Measured: wall time until every answer is in, and the daemon's CPU per call.
3. Every answer is checked (rule ``ask``, its own ``A:q<i>z``, no error), and the
   provider must see exactly one request per conversation.

Targets (issue 24, goal 2): CPU per call ≤ 0.4 ms and ≤ 1.6× the floor; 1,000
conversations in ≤ 0.9 s in-process and ≤ 1.1 s over HTTP.

    python bench/llm_fanout.py                     # 1,000 conversations, 0.5 s, 3 rounds
    python bench/llm_fanout.py --quick             # 100 conversations, 1 round
    python bench/llm_fanout.py --store redis       # on Redis (db 15): llm_fanout_redis.json
    python bench/llm_fanout.py --compare /tmp/before   # then the same against another checkout
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import common

HOST = "127.0.0.1"
FAKE = Path(__file__).resolve().with_name("llm_fake.py")
API_KEY = "bench-llm-key"
RULES = """\
rules:
  - id: ask
    triggers: ["ask *"]
    on_error: "LLM failed: {STEP_ERROR}"
    steps:
      - plugin: LLM
        system: "Answer in one short sentence."
        history: 4
"""
SERVE_CONFIG = """\
adapters:
  http:
    max_connections: 4000
    max_requests_in_flight: 4000
"""
TARGET_CPU_MS, TARGET_RATIO, TARGET_INPROC_S, TARGET_HTTP_S = 0.4, 1.6, 0.9, 1.1


def _stats(port: int) -> dict[str, Any]:
    import http.client

    conn = http.client.HTTPConnection(HOST, port, timeout=5)
    try:
        conn.request("GET", "/stats")
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


# -- in-process ---------------------------------------------------------------------------------


async def tmy_burst(app: Any, start: int, n: int) -> dict[str, Any]:
    """``n`` conversations at once through ``Engine.handle``; CPU includes the usage flush."""
    from tmy.llm import runtime_of
    from tmy.message import Message

    msgs = [Message(f"ask q{i}z", user=f"u{i}", platform="bench") for i in range(start, start + n)]
    cpu0, t0 = time.process_time(), time.perf_counter()
    replies = await asyncio.gather(*(app.engine.handle(m) for m in msgs))
    wall = time.perf_counter() - t0
    tally = getattr(runtime_of(app.engine.services), "tally", None)  # None: a checkout before it
    if tally is not None:
        await tally.flush()  # what these calls still owe the store
    cpu = time.process_time() - cpu0
    wrong, examples = 0, []
    for i, reply in zip(range(start, start + n), replies, strict=True):
        if reply.rule != "ask" or reply.error is not None or f"A:q{i}z" not in reply.text:
            wrong += 1
            if len(examples) < 5:
                examples.append(f"u{i}: rule={reply.rule} text={reply.text[:150]!r} {reply.error}")
    return {"wall_s": wall, "cpu_ms_per_call": cpu / n * 1000, "wrong": wrong, "examples": examples}


async def floor_burst(session: Any, url: str, start: int, n: int) -> dict[str, Any]:
    """The floor: ``n`` bare concurrent POSTs of the same request from raw aiohttp."""
    import orjson

    system = {"role": "system", "content": "Answer in one short sentence."}

    async def one(i: int) -> str:
        body = {"model": "m", "messages": [system, {"role": "user", "content": f"ask q{i}z"}]}
        async with session.post(url, data=orjson.dumps(body), headers=HEADERS) as r:
            return str(orjson.loads(await r.read())["choices"][0]["message"]["content"])

    cpu0, t0 = time.process_time(), time.perf_counter()
    answers = await asyncio.gather(*(one(i) for i in range(start, start + n)))
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    wrong = sum(a != f"A:q{i}z" for i, a in zip(range(start, start + n), answers, strict=True))
    return {"wall_s": wall, "cpu_ms_per_call": cpu / n * 1000, "wrong": wrong, "examples": []}


HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer x"}


async def in_process(n: int, rounds: int, port: int, tmp: Path, store: str | None) -> dict:
    """Rounds of tmy and the floor, alternating; every round's figures and the best."""
    import aiohttp

    from tmy.app import App
    from tmy.builtins import extensions

    os.environ["OPENAI_API_KEY"] = "x"
    os.environ["OPENAI_BASE_URL"] = f"http://{HOST}:{port}/v1"
    for var in ("TMY_LLM_API_KEY", "TMY_LLM_BASE_URL", "TMY_LLM_MODEL"):
        os.environ.pop(var, None)
    tmp.mkdir(parents=True, exist_ok=True)
    common.configure_logs(tmp)
    common.write_rules(tmp / "rules", RULES)
    settings = common.settings_for(tmp, rules=tmp / "rules", store=store)
    url = f"http://{HOST}:{port}/v1/chat/completions"
    out: dict[str, Any] = {"tmy": [], "floor": [], "provider_requests": []}
    async with App(settings, extensions=extensions()) as app:
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        try:
            warm = await tmy_burst(app, 10_000_000, 5)
            if warm["wrong"]:
                raise RuntimeError(f"the warm-up failed: {warm['examples'][0]}")
            await floor_burst(session, url, 10_000_000, 5)
            for r in range(rounds):
                seen = _stats(port)["requests"]
                out["tmy"].append(await tmy_burst(app, r * n, n))
                out["provider_requests"].append(_stats(port)["requests"] - seen)
                out["floor"].append(await floor_burst(session, url, r * n, n))
        finally:
            await session.close()
    from tmy import logs

    logs.configure("warning")  # off the log file: its folder goes when the run ends
    return out


# -- over HTTP ----------------------------------------------------------------------------------


def over_http(n: int, rounds: int, port: int, tmp: Path, store: str | None) -> dict[str, Any]:
    """A served daemon, loaded from another process; wall time and the daemon's CPU per call."""
    tmp.mkdir(parents=True, exist_ok=True)
    common.write_rules(tmp / "rules", RULES)
    serve_port = common.free_port()
    config = tmp / "tmy.yaml"
    config.write_text(SERVE_CONFIG)
    env = common.serve_env(
        tmp,
        tmp / "rules",
        store,
        OPENAI_API_KEY="x",
        OPENAI_BASE_URL=f"http://{HOST}:{port}/v1",
        TMY_HTTP_API_KEYS=API_KEY,
    )
    argv = [sys.executable, str(common.RUN_PY), "serve", "--http", f"{HOST}:{serve_port}"]
    server = subprocess.Popen(
        [*argv, "--no-console"],
        cwd=common.ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=(tmp / "serve.stderr").open("w"),
    )
    url = f"http://{HOST}:{serve_port}/v1/messages"
    out: dict[str, Any] = {"rounds": [], "provider_requests": []}
    try:
        common.wait_http(HOST, serve_port, proc=server, timeout=60)
        _load(url, 20_000_000, 5)  # warm-up: imports, the first connections
        for r in range(rounds):
            seen = _stats(port)["requests"]
            cpu0 = common.proc_cpu_s(server.pid)
            got = _load(url, 30_000_000 + r * n, n)
            got["server_cpu_ms_per_call"] = (common.proc_cpu_s(server.pid) - cpu0) / n * 1000
            out["provider_requests"].append(_stats(port)["requests"] - seen)
            out["rounds"].append(got)
    finally:
        out["server_exit_code"] = common.stop_process(server)
    if out["server_exit_code"] != 0:
        out["server_stderr"] = (tmp / "serve.stderr").read_text()[-2000:]
    return out


def _load(url: str, start: int, n: int) -> dict[str, Any]:
    argv = [sys.executable, str(FAKE), "load", "--url", url, "--key", API_KEY]
    done = subprocess.run(
        [*argv, "--start", str(start), "--n", str(n)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the load process failed: {done.stderr[-1000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


# -- the report ---------------------------------------------------------------------------------


def summarize(n: int, inproc: dict[str, Any], http: dict[str, Any]) -> dict[str, Any]:
    """Best of the rounds (the machine is shared: the least disturbed round)."""
    tmy, floor, rounds = inproc["tmy"], inproc["floor"], http["rounds"]
    best = {
        "tmy_cpu_ms_per_call": min(r["cpu_ms_per_call"] for r in tmy),
        "floor_cpu_ms_per_call": min(r["cpu_ms_per_call"] for r in floor),
        "tmy_wall_s": min(r["wall_s"] for r in tmy),
        "floor_wall_s": min(r["wall_s"] for r in floor),
        "http_wall_s": min(r["all_replies_s"] for r in rounds),
        "http_server_cpu_ms_per_call": min(r["server_cpu_ms_per_call"] for r in rounds),
    }
    best = {k: round(v, 3) for k, v in best.items()}
    best["cpu_ratio"] = round(best["tmy_cpu_ms_per_call"] / best["floor_cpu_ms_per_call"], 2)
    best["wrong"] = sum(r["wrong"] for r in (*tmy, *floor, *rounds))
    best["provider_requests_ok"] = all(
        k == n for k in (*inproc["provider_requests"], *http["provider_requests"])
    )
    return best


def targets(n: int, best: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "target": f"tmy CPU per call ≤ {TARGET_CPU_MS} ms in-process",
            "value": best["tmy_cpu_ms_per_call"],
            "ok": best["tmy_cpu_ms_per_call"] <= TARGET_CPU_MS,
        },
        {
            "target": f"tmy CPU per call ≤ {TARGET_RATIO}× raw aiohttp",
            "value": f"{best['cpu_ratio']}×",
            "ok": best["cpu_ratio"] <= TARGET_RATIO,
        },
        {
            "target": f"{n:,} concurrent conversations in-process ≤ {TARGET_INPROC_S} s",
            "value": best["tmy_wall_s"],
            "ok": best["tmy_wall_s"] <= TARGET_INPROC_S,
        },
        {
            "target": f"{n:,} concurrent conversations over HTTP ≤ {TARGET_HTTP_S} s",
            "value": best["http_wall_s"],
            "ok": best["http_wall_s"] <= TARGET_HTTP_S,
        },
        {
            "target": "every answer right, exactly one provider request per conversation",
            "value": f"{best['wrong']} wrong",
            "ok": best["wrong"] == 0 and best["provider_requests_ok"],
        },
    ]


def report(n: int, res: dict[str, Any]) -> str:
    inproc, http, best = res["in_process"], res["http"], res["best"]
    rows = []
    for r, (t, f) in enumerate(zip(inproc["tmy"], inproc["floor"], strict=True)):
        h = http["rounds"][r] if r < len(http["rounds"]) else {}
        rows.append(
            [
                r + 1,
                t["cpu_ms_per_call"],
                f["cpu_ms_per_call"],
                t["cpu_ms_per_call"] / f["cpu_ms_per_call"],
                t["wall_s"],
                f["wall_s"],
                h.get("all_replies_s"),
                h.get("server_cpu_ms_per_call"),
                t["wrong"] + f["wrong"] + h.get("wrong", 0),
            ]
        )
    rows.append(
        [
            "best",
            best["tmy_cpu_ms_per_call"],
            best["floor_cpu_ms_per_call"],
            best["cpu_ratio"],
            best["tmy_wall_s"],
            best["floor_wall_s"],
            best["http_wall_s"],
            best["http_server_cpu_ms_per_call"],
            best["wrong"],
        ]
    )
    out = [
        common.table(
            f"LLM call, {n:,} concurrent conversations, provider latency "
            f"{res['provider_latency_s']:g} s, store {res['store']}",
            [
                "round",
                "tmy CPU ms/call",
                "floor CPU ms/call",
                "ratio",
                "tmy in-process s",
                "floor s",
                "tmy over HTTP s",
                "daemon CPU ms/call (HTTP)",
                "wrong",
            ],
            rows,
        ),
        common.table(
            "LLM targets (issue 24, goal 2)",
            ["target", "measured", "verdict"],
            [[t["target"], t["value"], common.verdict(t["ok"])] for t in res["targets"]],
        ),
    ]
    for r in (*inproc["tmy"], *http["rounds"]):
        out += [f"  wrong: {e}" for e in r.get("examples") or r.get("wrong_examples") or []]
    return "\n".join(out)


def main() -> int:
    p = common.base_parser(__doc__.split("\n")[0])
    p.add_argument("--latency", type=float, default=0.5)
    p.add_argument("--conversations", type=int)
    p.add_argument("--rounds", type=int)
    p.add_argument("--store", choices=("sqlite", "redis"), default="sqlite")
    p.add_argument("--compare", metavar="CHECKOUT", help="also run against this tmy checkout")
    args = p.parse_args()
    n = args.conversations or (100 if args.quick else 1_000)
    rounds = args.rounds or (1 if args.quick else 3)
    prefix = common.redis_prefix() if args.store == "redis" else ""
    store = common.redis_url(prefix) if prefix else None
    port = common.free_port()
    with common.temp_dir("llm") as tmp:
        argv = [sys.executable, str(FAKE), "provider", "--port", str(port)]
        provider = subprocess.Popen(
            [*argv, "--latency", str(args.latency)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=(tmp / "fake.stderr").open("w"),
        )
        try:
            common.wait_http(HOST, port, proc=provider, timeout=30)
            inproc = asyncio.run(in_process(n, rounds, port, tmp / "in", store))
            http = over_http(n, rounds, port, tmp / "http", store)
        finally:
            common.stop_process(provider)
            if prefix:
                common.redis_cleanup(prefix)
    best = summarize(n, inproc, http)
    res = {
        "conversations": n,
        "rounds": rounds,
        "provider_latency_s": args.latency,
        "store": args.store,
        "in_process": inproc,
        "http": http,
        "best": best,
    }
    res["targets"] = targets(n, best)
    print(report(n, res))
    if args.compare:
        import llm_fake

        res["compare"] = llm_fake.compare(
            args.compare, "llm_fanout.py", llm_fake.without_compare(sys.argv[1:])
        )
    if not args.no_write:
        name = "llm_fanout" if args.store == "sqlite" else f"llm_fanout_{args.store}"
        path = common.write_result(name, {**res, "rules": RULES}, quick=args.quick)
        print(f"\nwritten: {path.relative_to(common.ROOT)}")
    return 0 if best["wrong"] == 0 and best["provider_requests_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
