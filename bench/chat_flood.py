"""One QQ group floods: are the other groups still answered promptly?

Starts ``python3 run.py serve`` with OneBot enabled (reverse WebSocket on a
loopback listener, an access token, every other setting at its shipped
default — ``send_interval`` 0.5 s, ``max_pending_per_chat`` 20), a SQLite
store and a log file in a temporary directory. A fake NapCat (this script)
connects to it like the real one does and answers every ``send_msg`` with a
message id. For ``--seconds`` (default 180) it posts ``--rate`` (default 10)
messages a second in one group (``echo f<i>``, from 50 different members)
and, every ``--probe-every`` seconds, one message in one of ten other groups
(``echo p<j>``). A probe's latency runs from the moment its event is sent to
the moment tmy's ``send_msg`` answering it arrives.

Prints and writes to ``bench/results/chat_flood.txt``: the probes' latency
(p50, p99, max), how many were answered within 2 s, the flooded group's
replies (sent, their latency, dropped or still waiting) with tmy's own
``tmy_chat_dropped_total`` counters and ``onebot.chat_dropped`` log lines,
and ``onebot.overloaded`` lines (the old adapter-wide refusal). Everything it
starts it stops. ``--root`` runs another checkout's ``run.py`` (a ``git
worktree`` of an older commit, for a before/after figure).

    python3 bench/chat_flood.py                  # 3 minutes
    python3 bench/chat_flood.py --seconds 20     # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
TOKEN = "bench-onebot-token"
SELF_ID = 10001
FLOOD_GROUP = 1
PROBE_GROUPS = range(2, 12)
PROMPT = 2.0  # seconds: the promise for other groups
RULES = """
rules:
  - id: echo
    triggers: ["echo *"]
    steps:
      - {plugin: ADJUST, input: "{QUESTION}"}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(tmp: Path, port: int) -> Path:
    (tmp / "rules").mkdir()
    (tmp / "rules" / "echo.yaml").write_text(RULES, encoding="utf-8")
    (tmp / "plugins").mkdir()
    config = tmp / "tmy.yaml"
    config.write_text(
        f"""rules: rules
plugins: plugins
store: sqlite:///{tmp / "tmy.db"}
watch: false
log: {{level: info, file: {tmp / "tmy.log"}, format: json}}
adapters:
  console: {{enabled: false}}
  http:
    listen: 127.0.0.1:{port}
  onebot:
    enabled: true
    access_token: {TOKEN}
""",
        encoding="utf-8",
    )
    return config


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(_percentile(values, 0.50) * 1000, 1),
        "p99_ms": round(_percentile(values, 0.99) * 1000, 1),
        "max_ms": round(max(values) * 1000, 1) if values else float("nan"),
    }


async def _wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"run.py serve exited with {proc.returncode}")
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with session.get(f"http://127.0.0.1:{port}/healthz") as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.1)
    raise TimeoutError("run.py serve did not answer /healthz")


def _event(group: int, user: int, message_id: int, text: str) -> str:
    return json.dumps(
        {
            "time": int(time.time()),
            "self_id": SELF_ID,
            "post_type": "message",
            "message_type": "group",
            "sub_type": "normal",
            "message_id": message_id,
            "group_id": group,
            "user_id": user,
            "anonymous": None,
            "message": [{"type": "text", "data": {"text": text}}],
            "raw_message": text,
            "font": 0,
            "sender": {"user_id": user, "nickname": f"u{user}", "card": "", "role": "member"},
        }
    )


async def _napcat(port: int, args: argparse.Namespace) -> dict[str, Any]:
    """Play NapCat: flood one group, probe the others, answer every send_msg."""
    sent_at: dict[str, float] = {}  # "f12" / "p3" -> when its event went out
    got_at: dict[str, float] = {}  # the same -> when tmy's send_msg answering it arrived
    url = f"ws://127.0.0.1:{port}/onebot/v11/ws"
    headers = {
        "X-Self-ID": str(SELF_ID),
        "X-Client-Role": "Universal",
        "Authorization": f"Bearer {TOKEN}",
    }
    async with aiohttp.ClientSession() as session:
        ws = await session.ws_connect(url, headers=headers, max_msg_size=0)
        next_id = iter(range(1, 10**9))

        async def read() -> None:
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue
                frame = json.loads(msg.data)
                if "action" not in frame:
                    continue
                now = time.monotonic()
                params = frame.get("params", {})
                text = "".join(
                    s["data"].get("text", "")
                    for s in params.get("message", [])
                    if s.get("type") == "text"
                ).strip()
                got_at.setdefault(text, now)
                answer = {
                    "status": "ok",
                    "retcode": 0,
                    "data": {"message_id": next(next_id)},
                    "echo": frame.get("echo"),
                }
                await ws.send_str(json.dumps(answer))

        reader = asyncio.create_task(read())
        await asyncio.sleep(0.5)  # the account registers
        start = time.monotonic()
        end = start + args.seconds
        i = j = 0
        next_probe = start + args.probe_every / 2
        while True:
            now = time.monotonic()
            if now >= end:
                break
            due_flood = start + i / args.rate
            if next_probe <= due_flood:
                await asyncio.sleep(max(0.0, next_probe - now))
                key = f"p{j}"
                group = PROBE_GROUPS[j % len(PROBE_GROUPS)]
                sent_at[key] = time.monotonic()
                await ws.send_str(_event(group, 30000 + j % 7, 10**7 + j, f"echo {key}"))
                j += 1
                next_probe += args.probe_every
            else:
                await asyncio.sleep(max(0.0, due_flood - now))
                key = f"f{i}"
                sent_at[key] = time.monotonic()
                await ws.send_str(_event(FLOOD_GROUP, 20000 + i % 50, i + 1, f"echo {key}"))
                i += 1
        flood_ended = time.monotonic()
        probes = [k for k in sent_at if k.startswith("p")]
        tail_end = time.monotonic() + args.tail
        while time.monotonic() < tail_end and any(k not in got_at for k in probes):
            await asyncio.sleep(0.1)
        waited_tail = time.monotonic() - flood_ended
        async with session.get(f"http://127.0.0.1:{port}/metrics") as r:
            metrics_text = await r.text()
        async with session.get(f"http://127.0.0.1:{port}/healthz") as r:
            health = await r.json()
        reader.cancel()
        await ws.close()
        with contextlib.suppress(asyncio.CancelledError):
            await reader

    probe_lat = [got_at[k] - sent_at[k] for k in probes if k in got_at]
    flood = [k for k in sent_at if k.startswith("f")]
    flood_lat = [got_at[k] - sent_at[k] for k in flood if k in got_at]
    dropped = {
        m.group(1): float(m.group(2))
        for m in re.finditer(
            r'tmy_chat_dropped_total\{adapter="onebot",what="(\w+)"\} ([0-9.e+]+)', metrics_text
        )
    }
    waiting = (health.get("adapters", {}).get("onebot", {}) or {}).get("waiting")
    return {
        "seconds": args.seconds,
        "rate_per_s": args.rate,
        "probes": {
            "sent": len(probes),
            "answered": len(probe_lat),
            f"within_{PROMPT:g}s": sum(1 for v in probe_lat if v <= PROMPT),
            **_stats(probe_lat),
        },
        "flooded_group": {
            "messages": len(flood),
            "replies_received": len(flood_lat),
            "not_answered": len(flood) - len(flood_lat),
            **_stats(flood_lat),
        },
        "tmy_chat_dropped_total": dropped,
        "waiting_at_end": waiting,
        "tail_waited_s": round(waited_tail, 1),
    }


def _log_counts(log: Path) -> dict[str, Any]:
    counts = {"onebot.chat_dropped": 0, "onebot.overloaded": 0}
    dropped_in_lines = 0
    if log.exists():
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            for event in counts:
                if f'"event":"{event}"' in line or f'"event": "{event}"' in line:
                    counts[event] += 1
                    if event == "onebot.chat_dropped":
                        with contextlib.suppress(ValueError, KeyError):
                            dropped_in_lines += int(json.loads(line)["dropped"])
    return {
        "lines": counts,
        "dropped_named_in_lines": dropped_in_lines,
        "log_mb": round(log.stat().st_size / 1e6, 2) if log.exists() else 0,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(args.root)
    with tempfile.TemporaryDirectory(prefix="tmy-bench-flood-") as name:
        tmp = Path(name)
        port = _free_port()
        config = _config(tmp, port)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TMY_", "OPENAI_"))}
        env.update(TMY_CONFIG=str(config), PYTHONUNBUFFERED="1")
        with (tmp / "serve.stderr").open("w") as stderr:
            proc = subprocess.Popen(
                [sys.executable, str(root / "run.py"), "serve", "--no-console"],
                cwd=root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
            try:
                await _wait_ready(port, proc)
                result = await _napcat(port, args)
            finally:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        result["log"] = _log_counts(tmp / "tmy.log")
        result["root"] = str(root)
        return result


def _report(r: dict[str, Any]) -> str:
    p, f, log = r["probes"], r["flooded_group"], r["log"]
    drops = r["tmy_chat_dropped_total"]
    within = p[f"within_{PROMPT:g}s"]
    lines = [
        f"one group at {r['rate_per_s']:g} msgs/s for {r['seconds']:g} s, a probe in another "
        f"group every {r.get('probe_every', 1):g} s (run.py serve, OneBot reverse, defaults)",
        f"probes in other groups: {p['answered']}/{p['sent']} answered, {within} within "
        f"{PROMPT:g} s; latency p50 {p['p50_ms']} ms, p99 {p['p99_ms']} ms, max {p['max_ms']} ms",
        f"flooded group: {f['messages']} messages, {f['replies_received']} replies received "
        f"(p50 {f['p50_ms']} ms, max {f['max_ms']} ms after the message), "
        f"{f['not_answered']} not answered",
        f"tmy_chat_dropped_total: messages {drops.get('message', 0):g}, replies "
        f"{drops.get('reply', 0):g}; still waiting at the end: {r['waiting_at_end']}",
        f"log: {log['lines']['onebot.chat_dropped']} onebot.chat_dropped lines (naming "
        f"{log['dropped_named_in_lines']} drops), {log['lines']['onebot.overloaded']} "
        f"onebot.overloaded lines, {log['log_mb']} MB",
        "verdict: "
        + ("OK" if p["sent"] and within == p["sent"] else "NOT MET")
        + f" (every probe answered within {PROMPT:g} s)",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=180.0, help="how long the group floods")
    parser.add_argument("--rate", type=float, default=10.0, help="flood messages per second")
    parser.add_argument("--probe-every", type=float, default=1.0, help="seconds between probes")
    parser.add_argument("--tail", type=float, default=15.0, help="wait for late probes after")
    parser.add_argument("--root", default=str(ROOT), help="checkout whose run.py to start")
    parser.add_argument("--out", default=str(RESULTS / "chat_flood.txt"))
    args = parser.parse_args()
    result = asyncio.run(run(args))
    result["probe_every"] = args.probe_every
    text = _report(result)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    command = "python3 bench/chat_flood.py " + " ".join(sys.argv[1:])
    out.write_text(f"$ {command.strip()}\n{text}\n\n{json.dumps(result, indent=2)}\n")


if __name__ == "__main__":
    main()
