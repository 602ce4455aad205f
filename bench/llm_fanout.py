"""Around the LLM: 1,000 concurrent conversations against a fake provider that answers in 500 ms.

The fake provider is a separate process (this script with ``--fake-server``):
an aiohttp server on 127.0.0.1 speaking ``POST /v1/chat/completions`` (JSON,
or SSE when the request asks to stream) that sleeps ``--latency`` seconds and
then answers ``A:q<i>z`` for a question containing ``q<i>z``. It counts the
requests it saw and the most it held at once (``GET /stats``).

tmy runs in this process, configured the documented way — only the
environment: ``OPENAI_API_KEY=x OPENAI_BASE_URL=http://127.0.0.1:PORT/v1`` —
with one rule ``ask *`` whose single step is ``plugin: LLM`` (``history: 4``, so
each conversation's history is kept in the SQLite store). 1,000 conversations
(users ``u0 … u999``) each send ``ask q<i>z`` at the same moment through
``Engine.handle``.

Measured: time until every reply is in (ideal: the provider latency), tmy's
CPU time per LLM call (this process's user+sys over the burst / calls), peak
RSS, and the requests the provider saw (must be exactly 1,000: no retries).
Checked: every reply comes from rule ``ask``, contains its own ``A:q<i>z`` and
has no error.

    python bench/llm_fanout.py            # 1,000 conversations, 500 ms
    python bench/llm_fanout.py --quick    # 100 conversations
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import common

HOST = "127.0.0.1"
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
_Q = re.compile(r"q(\d+)z")


# -- the fake provider (its own process) ----------------------------------------------------------


def fake_server(port: int, latency: float) -> None:
    from aiohttp import web

    state = {"requests": 0, "inflight": 0, "max_inflight": 0, "streamed": 0}

    def question(body: dict) -> str:
        for msg in reversed(body.get("messages") or []):
            if msg.get("role") == "user":
                content = msg.get("content")
                if isinstance(content, list):
                    content = " ".join(
                        str(p.get("text", "")) for p in content if isinstance(p, dict)
                    )
                m = _Q.search(str(content))
                if m:
                    return m.group(0)
        return "unknown"

    async def completions(request: web.Request) -> web.StreamResponse:
        state["requests"] += 1
        state["inflight"] += 1
        state["max_inflight"] = max(state["max_inflight"], state["inflight"])
        try:
            body = await request.json()
            await asyncio.sleep(latency)
            answer = f"A:{question(body)}"
            model = body.get("model", "fake")
            usage = {"prompt_tokens": 20, "completion_tokens": 3, "total_tokens": 23}
            if body.get("stream"):
                state["streamed"] += 1
                resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await resp.prepare(request)
                chunk = {
                    "id": "c1",
                    "object": "chat.completion.chunk",
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"role": "assistant", "content": answer},
                            "finish_reason": None,
                        }
                    ],
                }
                end = {
                    "id": "c1",
                    "object": "chat.completion.chunk",
                    "model": model,
                    "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                }
                tail = {
                    "id": "c1",
                    "object": "chat.completion.chunk",
                    "model": model,
                    "choices": [],
                    "usage": usage,
                }
                for part in (chunk, end, tail):
                    await resp.write(f"data: {json.dumps(part)}\n\n".encode())
                await resp.write(b"data: [DONE]\n\n")
                await resp.write_eof()
                return resp
            return web.json_response(
                {
                    "id": "chatcmpl-bench",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "usage": usage,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": answer},
                            "finish_reason": "stop",
                        }
                    ],
                }
            )
        finally:
            state["inflight"] -= 1

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(state)

    app = web.Application(client_max_size=8 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", completions)
    app.router.add_get("/stats", stats)
    app.router.add_get("/healthz", stats)
    web.run_app(
        app, host=HOST, port=port, access_log=None, print=None, backlog=4096, handle_signals=True
    )


def _stats(port: int) -> dict[str, Any]:
    import http.client

    conn = http.client.HTTPConnection(HOST, port, timeout=5)
    try:
        conn.request("GET", "/stats")
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


# -- tmy side -----------------------------------------------------------------------------------


async def burst(engine: Any, start: int, n: int) -> tuple[list[Any], float]:
    from tmy.message import Message

    msgs = [Message(f"ask q{i}z", user=f"u{i}", platform="bench") for i in range(start, start + n)]
    t0 = time.perf_counter()
    replies = await asyncio.gather(*(engine.handle(m) for m in msgs))
    return list(replies), time.perf_counter() - t0


async def transport_baseline(kind: str, n: int, port: int) -> dict[str, Any]:
    """``n`` concurrent bare POSTs to the fake provider without tmy: the transport's own cost.

    ``httpx``: an AsyncClient with the limits of tmy's shared client
    (``Services.http``: 200 connections, 50 kept alive), given up after 15 s;
    ``aiohttp``: a ClientSession without a connection cap. Run after the tmy
    burst, for reference.
    """
    url = f"http://{HOST}:{port}/v1/chat/completions"
    bodies = [{"model": "m", "messages": [{"role": "user", "content": f"q{i}z"}]} for i in range(n)]
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    if kind == "httpx":
        import httpx

        limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
        async with httpx.AsyncClient(timeout=httpx.Timeout(30.0), limits=limits) as client:

            async def one(b: dict) -> str:
                r = await client.post(url, json=b)
                return r.json()["choices"][0]["message"]["content"]

            answers = await asyncio.wait_for(asyncio.gather(*(one(b) for b in bodies)), 15)
    else:
        import aiohttp

        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=conn) as session:

            async def one(b: dict) -> str:
                async with session.post(url, json=b) as r:
                    return (await r.json())["choices"][0]["message"]["content"]

            answers = await asyncio.gather(*(one(b) for b in bodies))
    wall = time.perf_counter() - t0
    ok = all(a == f"A:q{i}z" for i, a in enumerate(answers))
    return {
        "client": kind,
        "requests": n,
        "all_replies_s": round(wall, 3),
        "cpu_ms_per_call": round((time.process_time() - cpu0) / n * 1000, 3),
        "ok": ok,
    }


def check(replies: list[Any], start: int) -> tuple[int, list[str]]:
    wrong, examples = 0, []
    for k, reply in enumerate(replies):
        want = f"A:q{start + k}z"
        if reply.rule != "ask" or reply.error is not None or want not in reply.text:
            wrong += 1
            if len(examples) < 5:
                examples.append(
                    f"u{start + k}: rule={reply.rule} text={reply.text[:150]!r} "
                    f"error={reply.error!r}"
                )
    return wrong, examples


async def amain(
    conversations: int,
    latency: float,
    port: int,
    tmp: Path,
    baselines: bool = True,
    server_pid: int | None = None,
) -> dict[str, Any]:
    from tmy.app import App
    from tmy.builtins import extensions

    os.environ["OPENAI_API_KEY"] = "x"
    os.environ["OPENAI_BASE_URL"] = f"http://{HOST}:{port}/v1"
    for var in ("TMY_LLM_API_KEY", "TMY_LLM_BASE_URL", "TMY_LLM_MODEL"):
        os.environ.pop(var, None)
    common.configure_logs(tmp)
    common.write_rules(tmp / "rules", RULES)
    settings = common.settings_for(tmp, rules=tmp / "rules")
    out: dict[str, Any] = {"conversations": conversations, "provider_latency_s": latency}
    async with App(settings, extensions=extensions()) as app:
        spec = app.registry.get("LLM") if app.registry else None
        out["llm_executor"] = f"{spec.run.__module__}.{spec.run.__name__}" if spec else None
        # warm-up: imports, the first pooled connection, the store's tables
        warm, _ = await burst(app.engine, 1_000_000, 5)
        wrong, examples = check(warm, 1_000_000)
        if wrong:
            out["could_not_run"] = f"the warm-up failed: {examples[0]}"
            return out
        seen0 = _stats(port)["requests"]
        rss0 = common.current_rss_mb()
        cpu0 = time.process_time()
        srv0 = common.proc_cpu_s(server_pid) if server_pid else 0.0
        replies, wall = await burst(app.engine, 0, conversations)
        cpu = time.process_time() - cpu0
        srv = common.proc_cpu_s(server_pid) - srv0 if server_pid else None
        stats = _stats(port)
        wrong, examples = check(replies, 0)
        out.update(
            {
                "all_replies_s": round(wall, 3),
                "cpu_s": round(cpu, 3),
                "cpu_ms_per_call": round(cpu / conversations * 1000, 3),
                "provider_cpu_s": round(srv, 2) if srv is not None else None,
                "provider_requests": stats["requests"] - seen0,
                "provider_max_inflight": stats["max_inflight"],
                "provider_streamed": stats["streamed"],
                "rss_before_mb": rss0,
                "rss_after_mb": common.current_rss_mb(),
                "wrong": wrong,
                "wrong_examples": examples,
            }
        )
    out["peak_rss_mb"] = max(common.peak_rss_mb(), common.proc_peak_rss_mb(os.getpid()))
    if baselines:
        out["transport_baselines"] = []
        for kind in ("httpx", "aiohttp"):
            t0 = time.perf_counter()
            try:
                srv0 = common.proc_cpu_s(server_pid) if server_pid else 0.0
                got = await transport_baseline(kind, conversations, port)
                if server_pid:
                    got["provider_cpu_s"] = round(common.proc_cpu_s(server_pid) - srv0, 2)
            except Exception as exc:
                got = {
                    "client": kind,
                    "requests": conversations,
                    "all_replies_s": round(time.perf_counter() - t0, 3),
                    "cpu_ms_per_call": None,
                    "ok": False,
                    "error": f"{type(exc).__name__}: {exc}",
                }
            out["transport_baselines"].append(got)
    return out


def evaluate(res: dict[str, Any]) -> list[dict]:
    if "all_replies_s" not in res:
        return [
            {
                "target": "1,000 concurrent LLM conversations in < 2 s",
                "value": res.get("could_not_run", "did not run"),
                "ok": False,
            }
        ]
    n = res["conversations"]
    return [
        {
            "target": f"{n:,} concurrent LLM conversations done in < 2 s "
            f"({res['provider_latency_s']:g} s provider latency)",
            "value": res["all_replies_s"],
            "ok": res["all_replies_s"] < 2.0,
        },
        {
            "target": f"provider saw exactly {n:,} requests (no retries)",
            "value": res["provider_requests"],
            "ok": res["provider_requests"] == n,
        },
        {
            "target": "every reply right (rule, its own answer, no error)",
            "value": f"{res['wrong']} wrong",
            "ok": res["wrong"] == 0,
        },
    ]


def report(res: dict[str, Any], targets: list[dict]) -> str:
    out = []
    if "all_replies_s" in res:
        headers = [
            "conversations",
            "provider latency s",
            "all replies s",
            "CPU ms/call",
            "peak RSS MB",
            "requests seen",
            "max in flight",
            "provider CPU s",
            "wrong",
        ]
        out.append(
            common.table(
                "LLM fan-out (tmy in-process, fake provider in its own process)",
                headers,
                [
                    [
                        res["conversations"],
                        res["provider_latency_s"],
                        res["all_replies_s"],
                        res["cpu_ms_per_call"],
                        res["peak_rss_mb"],
                        res["provider_requests"],
                        res["provider_max_inflight"],
                        res["provider_cpu_s"],
                        res["wrong"],
                    ]
                ],
            )
        )
        for e in res["wrong_examples"]:
            out.append(f"  wrong: {e}")
        if res.get("transport_baselines"):
            out.append(
                common.table(
                    "Reference: as many bare concurrent POSTs to the fake provider, no tmy",
                    [
                        "client",
                        "requests",
                        "all replies s",
                        "CPU ms/call",
                        "provider CPU s",
                        "answers ok",
                    ],
                    [
                        [
                            b["client"],
                            b["requests"],
                            b["all_replies_s"],
                            b["cpu_ms_per_call"],
                            b.get("provider_cpu_s"),
                            b.get("error") or b["ok"],
                        ]
                        for b in res["transport_baselines"]
                    ],
                )
            )
    else:
        out.append(f"\nLLM fan-out could not run: {res.get('could_not_run')}")
    out.append(
        common.table(
            "LLM targets",
            ["target", "measured", "verdict"],
            [[t["target"], t["value"], common.verdict(t["ok"])] for t in targets],
        )
    )
    return "\n".join(out)


def main() -> int:
    p = common.base_parser(__doc__.split("\n")[0])
    p.add_argument("--fake-server", action="store_true", help="internal: be the fake provider")
    p.add_argument("--port", type=int)
    p.add_argument("--latency", type=float, default=0.5)
    p.add_argument("--conversations", type=int)
    p.add_argument("--no-baselines", action="store_true", help="skip the bare-client references")
    args = p.parse_args()
    if args.fake_server:
        fake_server(args.port, args.latency)
        return 0
    n = args.conversations or (100 if args.quick else 1_000)
    port = common.free_port()
    with common.temp_dir("llm") as tmp:
        server = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "--fake-server",
                "--port",
                str(port),
                "--latency",
                str(args.latency),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=(tmp / "fake.stderr").open("w"),
        )
        try:
            common.wait_http(HOST, port, proc=server, timeout=30)
            try:
                res = asyncio.run(
                    amain(n, args.latency, port, tmp, not args.no_baselines, server.pid)
                )
            except Exception as exc:  # the LLM executor may not be usable yet
                res = {
                    "conversations": n,
                    "provider_latency_s": args.latency,
                    "could_not_run": f"{type(exc).__name__}: {exc}",
                }
        finally:
            common.stop_process(server)
    targets = evaluate(res)
    print(report(res, targets))
    if not args.no_write:
        path = common.write_result(
            "llm_fanout", {**res, "rules": RULES, "targets": targets}, quick=args.quick
        )
        print(f"\nwritten: {path.relative_to(common.ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
