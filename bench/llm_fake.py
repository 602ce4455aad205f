"""The loopback pieces of ``bench/llm_fanout.py`` (not a benchmark of its own).

* ``python bench/llm_fake.py provider --port P --latency S``: a fake
  chat-completions server, an aiohttp server on 127.0.0.1 speaking ``POST
  /v1/chat/completions`` (JSON, or SSE when the request asks to stream) that
  sleeps ``S`` seconds and then answers ``A:q<i>z`` for a question containing
  ``q<i>z``. It counts the requests it saw and the most it held at once
  (``GET /stats``).
* ``python bench/llm_fake.py load --url U --key K --start I --n N``: N concurrent
  ``POST /v1/messages`` (``ask q<i>z`` from user ``u<i>``) through one aiohttp
  session, every answer checked; prints one JSON line (wall time, wrong answers,
  its own CPU).

It also holds :func:`compare`, the ``--compare CHECKOUT`` of ``llm_fanout.py``
and ``llm_step.py``: the same script, run against another checkout of tmy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
_Q = re.compile(r"q(\d+)z")


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


async def load(url: str, key: str, start: int, n: int) -> dict[str, Any]:
    """``n`` concurrent conversations over HTTP, each answer checked."""
    import aiohttp

    cpu0 = time.process_time()
    headers = {"Authorization": f"Bearer {key}"}
    conn = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:

        async def one(i: int) -> str | None:
            body = {"text": f"ask q{i}z", "user": f"u{i}", "platform": "bench"}
            try:
                async with session.post(url, json=body, headers=headers) as resp:
                    doc = await resp.json()
                    status = resp.status
            except Exception as exc:  # counted as a wrong answer
                return f"u{i}: {type(exc).__name__}: {exc}"
            ok = (
                status == 200
                and doc.get("rule") == "ask"
                and doc.get("error") is None
                and f"A:q{i}z" in str(doc.get("answer"))
            )
            return None if ok else f"u{i}: {status} {json.dumps(doc)[:200]}"

        t0 = time.perf_counter()
        problems = await asyncio.gather(*(one(i) for i in range(start, start + n)))
        wall = time.perf_counter() - t0
    wrong = [p for p in problems if p]
    return {
        "all_replies_s": round(wall, 3),
        "wrong": len(wrong),
        "wrong_examples": wrong[:5],
        "load_cpu_s": round(time.process_time() - cpu0, 3),
    }


def compare(checkout: str, script: str, argv: list[str]) -> dict[str, Any]:
    """Run ``bench/<script>`` of this tree against the tmy of ``checkout`` (e.g. a
    ``git worktree`` of the commit before a change): the script and its helpers are
    copied into ``checkout/bench`` (an older tree may lack them or hold older
    ones), run there with ``argv`` (no ``--compare``), and its result JSON read back.
    Prints its report. Returns ``{"checkout", "commit", "result"}``."""
    here, there = Path(__file__).resolve().parent, Path(checkout).resolve() / "bench"
    if not (there.parent / "tmy").is_dir():
        raise SystemExit(f"--compare {checkout}: not a tmy checkout (no tmy/ package)")
    there.mkdir(exist_ok=True)
    for name in (script, "llm_fake.py", "llm_fanout.py", "common.py"):
        shutil.copyfile(here / name, there / name)
    done = subprocess.run(
        [sys.executable, str(there / script), *argv],
        cwd=there.parent,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    print(f"\n## the same run against {checkout}\n{done.stdout}", end="")
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
    commit = subprocess.run(
        ["git", "-C", str(there.parent), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    written = re.findall(r"written: (\S+)", done.stdout)
    result = json.loads((there.parent / written[-1]).read_text()) if written else None
    return {"checkout": str(checkout), "commit": commit, "exit": done.returncode, "result": result}


def without_compare(argv: list[str]) -> list[str]:
    """``argv`` without ``--compare X`` / ``--compare=X``."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--compare":
            skip = True
        elif not arg.startswith("--compare="):
            out.append(arg)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("role", choices=("provider", "load"))
    p.add_argument("--port", type=int)
    p.add_argument("--latency", type=float, default=0.5)
    p.add_argument("--url")
    p.add_argument("--key", default="")
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--n", type=int, default=1000)
    args = p.parse_args()
    if args.role == "provider":
        fake_server(args.port, args.latency)
        return 0
    print(json.dumps(asyncio.run(load(args.url, args.key, args.start, args.n))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
