"""Shared helpers of the benchmarks: rule generators, timing, percentiles, RSS, results.

Every benchmark script imports this module (``python bench/<name>.py`` puts
``bench/`` on ``sys.path``). Nothing here changes what the engine does: the
benchmarks build the same :class:`tmy.app.App` the daemon builds, from rule
files on disk, with logging configured exactly as ``serve`` does it (level
``info``, JSON lines) except that the lines go to a file in a temporary
directory instead of the terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import math
import os
import platform
import random
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
RUN_PY = ROOT / "run.py"
if str(ROOT) not in sys.path:  # run from anywhere, even without `pip install -e .`
    sys.path.insert(0, str(ROOT))

REDIS_HOST = "127.0.0.1"
REDIS_PORT = 6379
REDIS_DB = 15
LOG_LEVEL = "info"  # the default logging level as shipped (Settings.log_level)


# -- machine, results -----------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=5)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine_info() -> dict[str, Any]:
    """What the figures were measured on (stored with every result)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count()
    dirty = _git("status", "--porcelain", "--", "tmy")
    tree = hashlib.sha1()
    for path in sorted((ROOT / "tmy").rglob("*.py")):
        tree.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return {
        "cpu": _cpu_model(),
        "cores": cores,
        "mem_gb": _mem_total_gb(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "tmy_commit": _git("rev-parse", "--short", "HEAD"),
        "tmy_dirty": bool(dirty),
        "tmy_tree_sha1": tree.hexdigest()[:12],  # the exact engine code measured
        "loadavg_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def _system_busy_s() -> float:
    """CPU seconds all processes have used (all cores), from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            vals = [int(v) for v in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return 0.0
    return (sum(vals) - vals[3] - vals[4]) / os.sysconf("SC_CLK_TCK")  # minus idle, iowait


def _own_cpu_s() -> float:
    """CPU seconds of this process and of its children that have been waited for."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


_START = (time.perf_counter(), _system_busy_s(), _own_cpu_s())


def contention() -> dict[str, float]:
    """How busy the machine was with OTHER work since this benchmark started.

    ``others_cores`` = (CPU used by every process − CPU used by this benchmark and
    its finished children) / wall time. Redis (for the chain benchmark) counts as
    "other". Figures taken while others_cores is well above 0 are pessimistic.
    """
    wall = time.perf_counter() - _START[0]
    busy = _system_busy_s() - _START[1]
    own = _own_cpu_s() - _START[2]
    return {
        "wall_s": round(wall, 1),
        "machine_busy_cores": round(busy / wall, 2) if wall > 0 else 0.0,
        "benchmark_cores": round(own / wall, 2) if wall > 0 else 0.0,
        "others_cores": round(max(0.0, busy - own) / wall, 2) if wall > 0 else 0.0,
    }


def others_busy_now(seconds: float = 1.0) -> float:
    """Cores used by other processes over the next ``seconds`` (this process sleeps)."""
    b0, o0 = _system_busy_s(), _own_cpu_s()
    time.sleep(seconds)
    return round(max(0.0, (_system_busy_s() - b0) - (_own_cpu_s() - o0)) / seconds, 2)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def write_result(name: str, payload: dict[str, Any], *, quick: bool = False) -> Path:
    """``bench/results/<name>.json`` (``<name>.quick.json`` for smoke runs)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / (f"{name}.quick.json" if quick else f"{name}.json")
    doc = {
        "benchmark": name,
        "timestamp": now_iso(),
        "quick": quick,
        "argv": sys.argv[1:],
        "machine": machine_info(),
        "contention": contention(),
        **payload,
    }
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n")
    c = doc["contention"]
    if c["others_cores"] > 0.25:
        print(
            f"WARNING: other processes used {c['others_cores']} of "
            f"{doc['machine']['cores']} cores during this benchmark: figures are pessimistic",
            file=sys.stderr,
        )
    return path


# -- timing -----------------------------------------------------------------------------------


def summarize_ns(samples_ns: Sequence[int]) -> dict[str, float]:
    """p50 / p99 / mean / max in microseconds of per-message timings."""
    if not samples_ns:
        return {"p50_us": 0.0, "p99_us": 0.0, "mean_us": 0.0, "max_us": 0.0}
    s = sorted(samples_ns)
    return {
        "p50_us": round(percentile(s, 50) / 1000, 1),
        "p99_us": round(percentile(s, 99) / 1000, 1),
        "mean_us": round(statistics.fmean(s) / 1000, 1),
        "max_us": round(s[-1] / 1000, 1),
    }


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_values:
        return 0.0
    k = max(0, min(len(sorted_values) - 1, math.ceil(p / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


@contextlib.contextmanager
def cpu_timer() -> Iterator[dict[str, float]]:
    """Wall and CPU (user+sys) seconds of this process over a block."""
    out: dict[str, float] = {}
    w0, c0 = time.perf_counter(), time.process_time()
    try:
        yield out
    finally:
        out["wall_s"] = time.perf_counter() - w0
        out["cpu_s"] = time.process_time() - c0


# -- memory -----------------------------------------------------------------------------------


def peak_rss_mb(children: bool = False) -> float:
    """Peak resident set size (ru_maxrss) of this process, or of its waited-for children."""
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    kb = resource.getrusage(who).ru_maxrss  # kilobytes on Linux
    return round(kb / 1024, 1)


def current_rss_mb(pid: int | str = "self") -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0


def proc_peak_rss_mb(pid: int) -> float:
    """VmHWM (peak RSS) of a running process, from /proc."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0


def proc_cpu_s(pid: int) -> float:
    """user+sys CPU seconds of a running process (and its waited-for children), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime


# -- printing ---------------------------------------------------------------------------------


def fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        if value >= 1000:
            return f"{value:,.0f}"
        if value >= 100:
            return f"{value:.0f}"
        if value >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return "" if value is None else str(value)


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table (also valid Markdown)."""
    cells = [[fmt(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(items: Sequence[str]) -> str:
        return "| " + " | ".join(s.rjust(w) for s, w in zip(items, widths, strict=True)) + " |"

    out = [f"\n### {title}\n", line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in cells]
    return "\n".join(out)


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "MISS")


# -- rules ------------------------------------------------------------------------------------

_HEADER = "rules:\n"
KINDS = ("exact", "prefix", "suffix", "contains")
N_REGEX = 5


def rule_kind(i: int, mix: bool) -> str:
    return KINDS[i % 4] if mix else "prefix"


def trigger_for(i: int, kind: str) -> str:
    return {
        "exact": f"kw{i}",
        "prefix": f"kw{i}*",
        "suffix": f"*sx{i}",
        "contains": f"*ct{i}x*",
    }[kind]


def message_for(i: int, kind: str) -> str:
    """A message that fires rule ``r<i>`` (and no rule that would outrank it)."""
    return {
        "exact": f"kw{i}",
        "prefix": f"kw{i} hello there",
        "suffix": f"hello there sx{i}",
        "contains": f"please ct{i}x now",
        "regex": f"rx{i}-abc",
    }[kind]


NO_MATCH_TEXT = "hello there, nothing to see"


def answer_for(rule_id: str) -> str:
    return f"ok-{rule_id}"


def dispatch_rules_yaml(n: int, *, mix: bool, start: int = 0, regex: bool = True) -> str:
    """``n`` rules ``r0 … r<n-1>``, one ADJUST step each returning the constant ``ok-r<i>``.

    ``mix=False``: every trigger is the prefix ``kw<i>*``. ``mix=True``: the
    kinds rotate exact / prefix / suffix / contains, and 5 regex rules
    ``rx0 … rx4`` (``re:^rx<j>-(?P<word>\\w+)$``) come first in the file.
    """
    parts = [_HEADER]
    if mix and regex:
        for j in range(N_REGEX):
            rid = f"rx{j}"
            parts.append(
                f"  - id: {rid}\n    triggers: ['re:^rx{j}-(?P<word>\\w+)$']\n"
                f"    steps:\n      - plugin: ADJUST\n        input: {answer_for(rid)}\n"
            )
    for i in range(start, start + n):
        rid = f"r{i}"
        trig = trigger_for(i, rule_kind(i, mix))
        parts.append(
            f"  - id: {rid}\n    triggers: ['{trig}']\n"
            f"    steps:\n      - plugin: ADJUST\n        input: {answer_for(rid)}\n"
        )
    return "".join(parts)


def write_dispatch_rules(directory: Path, n: int, *, mix: bool, files: int = 1) -> int:
    """The rules of :func:`dispatch_rules_yaml` in ``files`` files; returns the bytes written."""
    size = 0
    per = -(-n // files)
    for k in range(files):
        start = k * per
        count = max(0, min(per, n - start))
        text = dispatch_rules_yaml(count, mix=mix, start=start, regex=k == 0)
        write_rules(directory, text, f"bench-{k:04d}.yaml")
        size += len(text.encode())
    return size


def dispatch_messages(
    n: int, scenario: str, count: int, *, mix: bool, seed: int = 7
) -> list[tuple[str, str | None]]:
    """(text, expected rule id or None) for one scenario: last | none | random."""
    if scenario == "last":
        i = n - 1
        return [(message_for(i, rule_kind(i, mix)), f"r{i}")] * count
    if scenario == "none":
        return [(NO_MATCH_TEXT, None)] * count
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        if mix and rng.random() < N_REGEX / (n + N_REGEX):
            j = rng.randrange(N_REGEX)
            out.append((message_for(j, "regex"), f"rx{j}"))
        else:
            i = rng.randrange(n)
            out.append((message_for(i, rule_kind(i, mix)), f"r{i}"))
    return out


def write_rules(directory: Path, text: str, name: str = "bench.yaml") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


# -- the app ----------------------------------------------------------------------------------


@contextlib.contextmanager
def temp_dir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=f"tmy-bench-{prefix}-"))
    try:
        yield path
    finally:
        _stop_logging_into(path)
        shutil.rmtree(path, ignore_errors=True)


def _stop_logging_into(folder: Path) -> None:
    """Log elsewhere before ``folder`` goes: the log file's next flush would find its name
    gone, open it anew and warn that its directory is missing."""
    logs = sys.modules.get("tmy.logs")
    sink = getattr(logs, "SINK", None)
    log_path = getattr(getattr(sink, "stream", None), "path", None)
    if logs is not None and log_path is not None and folder in Path(log_path).parents:
        logs.configure(LOG_LEVEL, stream=io.BytesIO())  # type: ignore[arg-type]


def configure_logs(tmp: Path) -> Path:
    """Logging as ``serve`` configures it (level ``info``), into a file under ``tmp``."""
    from tmy import logs

    path = tmp / "tmy.log"
    logs.configure(LOG_LEVEL, path)
    return path


def settings_for(tmp: Path, *, rules: Path, store: str | None = None, **extra: Any) -> Any:
    """Settings like the daemon's defaults, with rules/store/plugins under ``tmp``."""
    from tmy.config import Settings

    (tmp / "no-plugins").mkdir(exist_ok=True)
    return Settings(
        rules=rules,
        plugins=tmp / "no-plugins",
        store=store or f"sqlite:///{tmp / 'tmy.db'}",
        log_level=LOG_LEVEL,
        log_file=str(tmp / "tmy.log"),
        console=False,
        http_enabled=False,
        **extra,
    )


def spawn_serve(tmp: Path, host: str, port: int) -> subprocess.Popen[bytes]:
    """``python run.py serve --http HOST:PORT --no-console`` on the rules under ``tmp/rules``."""
    return subprocess.Popen(
        [sys.executable, str(RUN_PY), "serve", "--http", f"{host}:{port}", "--no-console"],
        cwd=ROOT,
        env=serve_env(tmp, tmp / "rules"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=(tmp / "serve.stderr").open("w"),
    )


def serve_env(tmp: Path, rules: Path, store: str | None = None, **more: str) -> dict[str, str]:
    """Environment for a ``python run.py serve`` subprocess with everything under ``tmp``."""
    (tmp / "no-plugins").mkdir(exist_ok=True)
    config = tmp / "tmy.yaml"
    if not config.exists():
        config.write_text("# empty: every setting at its shipped default except the env below\n")
    env = dict(os.environ)
    for var in list(env):
        if var.startswith("TMY_") or var.startswith("OPENAI_"):
            del env[var]
    env.update(
        TMY_CONFIG=str(config),
        TMY_RULES=str(rules),
        TMY_PLUGINS=str(tmp / "no-plugins"),
        TMY_STORE=store or f"sqlite:///{tmp / 'tmy.db'}",
        TMY_LOG_FILE=str(tmp / "serve.log"),
        TMY_LOG_LEVEL=LOG_LEVEL,
        PYTHONUNBUFFERED="1",
        **more,
    )
    return env


# -- network ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get_status(host: str, port: int, path: str, timeout: float = 0.5) -> int | None:
    """Status of a plain ``GET`` (None when nothing answers)."""
    import http.client

    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def wait_http(
    host: str,
    port: int,
    path: str = "/healthz",
    timeout: float = 60.0,
    proc: subprocess.Popen | None = None,
    interval: float = 0.005,
) -> float:
    """Poll until ``GET path`` answers 200; returns the seconds waited. Raises on timeout."""
    start = time.perf_counter()
    deadline = start + timeout
    while time.perf_counter() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before answering")
        if http_get_status(host, port, path) == 200:
            return time.perf_counter() - start
        time.sleep(interval)
    raise TimeoutError(f"{host}:{port}{path} did not answer within {timeout:g}s")


def stop_process(proc: subprocess.Popen, timeout: float = 15.0) -> int | None:
    """SIGTERM, then SIGKILL after ``timeout``; returns the exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode


# -- redis ------------------------------------------------------------------------------------


def redis_prefix() -> str:
    return f"bench-{uuid.uuid4().hex[:12]}"


def redis_url(prefix: str) -> str:
    return f"redis://{REDIS_HOST}:{REDIS_PORT}/{REDIS_DB}?prefix={prefix}"


def redis_client() -> Any:
    import redis

    return redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=REDIS_DB, socket_timeout=5)


def redis_available() -> bool:
    try:
        return bool(redis_client().ping())
    except Exception:
        return False


def redis_cleanup(prefix: str) -> int:
    """Delete every key of this run (``<prefix>:*``); returns how many."""
    r = redis_client()
    removed = 0
    batch: list[bytes] = []
    for key in r.scan_iter(match=f"{prefix}:*", count=1000):
        batch.append(key)
        if len(batch) >= 500:
            removed += r.delete(*batch)
            batch.clear()
    if batch:
        removed += r.delete(*batch)
    return removed


def redis_commandstats() -> dict[str, int]:
    """``INFO commandstats`` as command -> calls (server-wide, all databases)."""
    info = redis_client().info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in info.items()}


def redis_other_clients() -> int:
    """Clients connected to Redis other than the caller (a hint that stats are shared)."""
    try:
        return max(0, len(redis_client().client_list()) - 1)
    except Exception:
        return -1


def stats_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    out = {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)}
    return {k: v for k, v in sorted(out.items()) if v and not k.startswith("info")}


# -- argument parsing -------------------------------------------------------------------------


def base_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="a small, fast smoke run")
    p.add_argument("--no-write", action="store_true", help="do not write bench/results/*.json")
    return p


def log_size_mb(path: Path) -> float:
    try:
        return round(path.stat().st_size / 1024 / 1024, 1)
    except OSError:
        return 0.0


def callgrind_dumps(folder: Path, name: str = "callgrind.out") -> list[int]:
    """The instruction totals of the dumps ``--dump-before=os_getpgrp`` wrote into
    ``folder`` (``name``.1, .2 …), in order: one per measured batch of a child run with
    ``--zero-before=os_getppid`` (the batch between its ``os.getppid()`` and
    ``os.getpgrp()``; dumps with another trigger are left out)."""
    totals = []
    for part in sorted(folder.glob(f"{name}.*"), key=lambda p: int(p.suffix[1:])):
        text = part.read_text()
        if "os_getpgrp" not in text.split("\nevents:", 1)[0]:
            continue  # a dump with another trigger
        found = re.search(r"^(?:summary|totals):\s*(\d+)", text, re.M)
        if found is None:
            raise RuntimeError(f"no instruction total in {part}")
        totals.append(int(found.group(1)))
    return totals
