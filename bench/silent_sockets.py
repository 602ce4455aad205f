"""Silent sockets against a real daemon: are authenticated requests still answered?

Starts ``python3 run.py serve`` under ``ulimit -n 1024`` (the common open-file
limit) with a temporary config (API keys, a SQLite store and a log file in a
temporary directory, loopback only), then holds ``--sockets`` (default 2,000)
connections that never send a byte — a connection the daemon closes is opened
again at once, as a persistent attacker would — while an authenticated client
posts a message ``--rate`` times a second, each on a fresh connection (the
worst case: it must get through the accept queue like the attacker).

Prints and writes to ``bench/results/silent_sockets.txt``: the probes' latency
(p50/p99/max) and failures before and during the attack, how many silent
sockets the daemon closed, the daemon's peak open descriptors, and how fast its
log (JSON log file + stderr, where libraries such as asyncio write) grew.
Everything it starts it stops. ``--root`` runs another checkout's ``run.py``
(e.g. a ``git worktree`` of an older commit, for a before/after figure).

    python3 bench/silent_sockets.py                      # 2,000 sockets, 60 s
    python3 bench/silent_sockets.py --seconds 20 --sockets 500
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
KEY = "sk-bench-silent-sockets"
RULES = """
rules:
  - id: ping
    triggers: [ping]
    steps:
      - {plugin: ADJUST, input: "pong"}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(tmp: Path, port: int) -> Path:
    (tmp / "rules").mkdir()
    (tmp / "rules" / "ping.yaml").write_text(RULES, encoding="utf-8")
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
    api_keys: [{KEY}]
""",
        encoding="utf-8",
    )
    return config


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def _size(*paths: Path) -> int:
    return sum(p.stat().st_size for p in paths if p.exists())


async def _probe(port: int, timeout: float) -> float | None:
    """One authenticated POST on a fresh connection: its latency in ms, None if it failed."""
    body = b'{"text": "ping"}'
    request = (
        f"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
    started = time.perf_counter()
    writer = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            await writer.drain()
            data = await reader.read()
    except (OSError, TimeoutError):
        return None
    finally:
        if writer is not None:
            writer.close()
    ok = data.startswith(b"HTTP/1.1 200") and b'"pong"' in data
    return (time.perf_counter() - started) * 1000 if ok else None


async def _probes(port: int, seconds: float, rate: float, timeout: float) -> dict[str, Any]:
    tasks = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        tasks.append(asyncio.create_task(_probe(port, timeout)))
        await asyncio.sleep(1 / rate)
    results = await asyncio.gather(*tasks)
    ok = [r for r in results if r is not None]
    return {
        "sent": len(results),
        "answered": len(ok),
        "failed": len(results) - len(ok),
        "p50_ms": _percentile(ok, 0.50),
        "p99_ms": _percentile(ok, 0.99),
        "max_ms": max(ok) if ok else float("nan"),
    }


async def _keepalive_probes(port: int, seconds: float, rate: float, timeout: float) -> dict:
    """The same POST at the same rate over one kept-alive connection (a pooled client).

    A connection the daemon closed is reopened and the request sent again; the
    latency then includes the reconnect, and ``reconnects`` counts them.
    """
    body = b'{"text": "ping"}'
    request = (
        f"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    latencies: list[float] = []
    sent = failed = reconnects = 0

    async def once() -> bool:
        nonlocal conn, reconnects
        if conn is None:
            conn = await asyncio.open_connection("127.0.0.1", port)
            reconnects += 1
        reader, writer = conn
        writer.write(request)
        await writer.drain()
        status = await reader.readline()
        if not status:
            raise ConnectionResetError("closed by the daemon")
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        data = await reader.readexactly(length)
        return status.startswith(b"HTTP/1.1 200") and b'"pong"' in data

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sent += 1
        started = time.perf_counter()
        ok = False
        for _ in range(2):  # once more on a fresh connection if the kept one was closed
            try:
                async with asyncio.timeout(timeout):
                    ok = await once()
                break
            except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError):
                if conn is not None:
                    conn[1].close()
                conn = None
        if ok:
            latencies.append((time.perf_counter() - started) * 1000)
        else:
            failed += 1
        await asyncio.sleep(max(0.0, 1 / rate - (time.perf_counter() - started)))
    if conn is not None:
        conn[1].close()
    return {
        "sent": sent,
        "answered": len(latencies),
        "failed": failed,
        "reconnects": max(0, reconnects - 1),
        "p50_ms": _percentile(latencies, 0.50),
        "p99_ms": _percentile(latencies, 0.99),
        "max_ms": max(latencies) if latencies else float("nan"),
    }


class Attack:
    """``n`` silent connections, each reopened as soon as the daemon closes it."""

    def __init__(self, port: int, n: int) -> None:
        self.port = port
        self.n = n
        self.held = 0
        self.opened = 0
        self.closed_by_server = 0
        self.connect_failed = 0
        self._tasks: list[asyncio.Task[None]] = []

    async def _hold(self) -> None:
        while True:
            writer = None
            try:
                async with asyncio.timeout(10):
                    reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except (OSError, TimeoutError):
                self.connect_failed += 1
                await asyncio.sleep(0.2)
                continue
            self.opened += 1
            self.held += 1
            try:
                await reader.read(1)  # nothing is ever sent: this returns when the daemon closes
            except OSError:
                pass
            finally:
                self.held -= 1
                writer.close()
            self.closed_by_server += 1

    async def start(self) -> None:
        for _ in range(self.n):
            self._tasks.append(asyncio.create_task(self._hold()))
            await asyncio.sleep(0)  # let the connects go out in order

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def stats(self) -> dict[str, int]:
        return {
            "held_at_end": self.held,
            "connections_opened": self.opened,
            "closed_by_daemon": self.closed_by_server,
            "connect_failed_or_timed_out": self.connect_failed,
        }


def attacker_main(port: int, n: int, out: str) -> None:
    """The attacker in its own process (its reconnect storm must not slow the probes down):
    hold ``n`` silent sockets until SIGTERM, then write its counts to ``out``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, n + 256)), hard))

    async def go() -> None:
        attack = Attack(port, n)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await attack.start()
        await stop.wait()
        stats = attack.stats()  # before stop(): how many were held at the end
        await attack.stop()
        Path(out).write_text(json.dumps(stats))

    asyncio.run(go())


class AttackerProcess:
    """``bench/silent_sockets.py --attack PORT N OUT`` as a subprocess."""

    def __init__(self, port: int, n: int, tmp: Path) -> None:
        self.out = tmp / "attacker.json"
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--attack", str(port), str(n), str(self.out)],
            stdin=subprocess.DEVNULL,
        )

    def stop(self) -> dict[str, Any]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        try:
            return json.loads(self.out.read_text())
        except (OSError, ValueError):
            return {}


async def _wait_healthy(port: int, proc: subprocess.Popen[bytes], within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the daemon exited early with {proc.returncode}")
        with contextlib.suppress(OSError, TimeoutError):
            async with asyncio.timeout(1):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(
                    b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                )
                data = await reader.read()
                writer.close()
                if data.startswith(b"HTTP/1.1 200"):
                    return
        await asyncio.sleep(0.2)
    raise SystemExit("the daemon did not answer /healthz within 30 s")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(args.root).resolve()
    with tempfile.TemporaryDirectory(prefix="tmy-silent-") as tmp_name:
        tmp = Path(tmp_name)
        port = _free_port()
        config = _config(tmp, port)
        log, stderr_path = tmp / "tmy.log", tmp / "stderr.log"
        command = (
            f"ulimit -n {args.nofile} && exec {sys.executable} run.py serve "
            f"--config {config} --no-console"
        )
        with stderr_path.open("wb") as stderr:
            proc = subprocess.Popen(
                ["bash", "-c", command],
                cwd=root,
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=stderr,
                start_new_session=True,
            )
        attack: AttackerProcess | None = None
        attacker: dict[str, Any] = {}
        peak_fds = 0
        try:
            await _wait_healthy(port, proc, 30)
            baseline = await _probes(port, args.baseline, args.rate, args.timeout)
            size_before = _size(log, stderr_path)
            log_offset = _size(log)
            started = time.monotonic()
            attack = AttackerProcess(port, args.sockets, tmp)

            async def sample() -> None:
                nonlocal peak_fds
                while True:
                    peak_fds = max(peak_fds, _open_fds(proc.pid))
                    await asyncio.sleep(0.2)

            sampler = asyncio.create_task(sample())
            await asyncio.sleep(args.warmup)  # the flood is up before the probes start
            during, pooled = await asyncio.gather(
                _probes(port, args.seconds, args.rate, args.timeout),
                _keepalive_probes(port, args.seconds, args.rate, args.timeout),
            )
            attacker = attack.stop()
            elapsed = time.monotonic() - started
            await asyncio.sleep(0.5)  # the daemon flushes its log every 0.2 s
            grown = _size(log, stderr_path) - size_before
            with log.open("rb") as f:  # what the probes' own runs logged is not the attack's
                f.seek(log_offset)
                new_lines = f.read(max(0, grown)).splitlines(keepends=True)
            probe_bytes = sum(len(line) for line in new_lines if b'"event":"run.done"' in line)
            sampler.cancel()
            after = await _probes(port, 2, args.rate, args.timeout)
        finally:
            if attack is not None:
                attack.stop()
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        text = stderr_path.read_text(errors="replace") + log.read_text(errors="replace")
        events: dict[str, int] = {}
        for line in log.read_text(errors="replace").splitlines():
            try:
                name = json.loads(line).get("event", "?")
            except ValueError:
                name = "(not JSON)"
            events[name] = events.get(name, 0) + 1
        stderr_lines = stderr_path.read_text(errors="replace").splitlines()
        summaries = [
            json.loads(line)
            for line in log.read_text(errors="replace").splitlines()
            if '"http.refused"' in line
        ]
        closed_reported: dict[str, int] = {}
        for line in summaries:
            for reason, count in line.get("counts", {}).items():
                closed_reported[reason] = closed_reported.get(reason, 0) + count
    return {
        "sockets": args.sockets,
        "nofile": args.nofile,
        "attack_seconds": round(elapsed, 1),
        "baseline": baseline,
        "during": during,
        "during_keepalive": pooled,
        "after": after,
        "attacker": attacker,
        "daemon_peak_open_fds": peak_fds,
        "log_bytes_during_attack": grown,
        "log_bytes_per_minute": round(grown / elapsed * 60),
        "probe_run_lines_bytes": probe_bytes,
        "log_bytes_per_minute_without_probe_runs": round((grown - probe_bytes) / elapsed * 60),
        "emfile_lines": text.count("Too many open files"),
        "daemon_closed_connections": closed_reported,
        "log_events": events,
        "stderr_lines": len(stderr_lines),
        "stderr_head": stderr_lines[:5],
        "root": str(root),
    }


def _report(r: dict[str, Any]) -> str:
    def row(name: str, p: dict[str, Any]) -> str:
        return (
            f"{name:<9} sent {p['sent']:>5}  answered {p['answered']:>5}  failed {p['failed']:>4}"
            f"  p50 {p['p50_ms']:8.1f} ms  p99 {p['p99_ms']:8.1f} ms  max {p['max_ms']:8.1f} ms"
        )

    a = {"held_at_end": "?", "connections_opened": "?", "closed_by_daemon": "?",
         "connect_failed_or_timed_out": "?", **r["attacker"]}  # fmt: skip
    return "\n".join(
        [
            f"silent sockets: {r['sockets']} held against `run.py serve` under ulimit -n "
            f"{r['nofile']}, {r['attack_seconds']} s ({r['root']})",
            "authenticated POST /v1/messages at --rate/s, one fresh connection each:",
            row("before", r["baseline"]),
            row("during", r["during"]),
            "the same POSTs over one kept-alive connection during the attack "
            f"({r['during_keepalive']['reconnects']} reconnects):",
            row("pooled", r["during_keepalive"]),
            row("after", r["after"]),
            f"attacker: {a['held_at_end']} sockets open at the end, {a['connections_opened']} "
            f"opened, {a['closed_by_daemon']} closed by the daemon, "
            f"{a['connect_failed_or_timed_out']} connects failed/timed out",
            f"daemon: peak {r['daemon_peak_open_fds']} open descriptors; closed "
            f"{r['daemon_closed_connections'] or 'n/a (no summary lines)'}",
            f"log growth during the attack: {r['log_bytes_during_attack']:,} bytes "
            f"= {r['log_bytes_per_minute']:,} bytes/minute (JSON log + stderr), of which "
            f"{r['log_bytes_per_minute_without_probe_runs']:,} bytes/minute not the probes' own "
            f"run.done lines; 'Too many open files' lines: {r['emfile_lines']}",
        ]
    )


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--attack":
        attacker_main(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sockets", type=int, default=2000, help="silent sockets held")
    parser.add_argument("--seconds", type=float, default=60.0, help="probing under attack")
    parser.add_argument("--baseline", type=float, default=5.0, help="probing before it")
    parser.add_argument("--warmup", type=float, default=3.0, help="flood time before probing")
    parser.add_argument("--rate", type=float, default=10.0, help="probes per second")
    parser.add_argument("--timeout", type=float, default=10.0, help="a probe fails after this")
    parser.add_argument("--nofile", type=int, default=1024, help="the daemon's ulimit -n")
    parser.add_argument("--root", default=str(ROOT), help="checkout whose run.py to start")
    parser.add_argument("--out", default=str(RESULTS / "silent_sockets.txt"))
    args = parser.parse_args()
    result = asyncio.run(run(args))
    text = _report(result)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    command = "python3 bench/silent_sockets.py " + " ".join(sys.argv[1:])
    out.write_text(f"$ {command.strip()}\n{text}\n\n{json.dumps(result, indent=2)}\n")


if __name__ == "__main__":
    main()
