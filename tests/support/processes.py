"""Processes the store and memory tests start: a lock holder in a process of its own, and
``run.py`` under a memory cap with its peak RSS read back."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import tmy

REPO = Path(__file__).resolve().parents[2]

TMY_ROOT = str(Path(tmy.__file__).resolve().parent.parent)  # children import the same tmy


LOCK_HOLDER = """
import asyncio, sys
from tmy.store import open_store

async def main(url, ttl):
    store = open_store(url)
    await store.open()
    kwargs = {} if ttl == "default" else {"ttl": float(ttl)}
    async with store.lock("job", **kwargs):
        print("held", flush=True)
        await asyncio.sleep(600)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def spawn_holder(url: str, ttl: str) -> asyncio.subprocess.Process:
    """A separate process that takes the lock ``job`` with the real store and keeps it."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([TMY_ROOT, os.environ.get("PYTHONPATH", "")]),
    }
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LOCK_HOLDER, url, ttl, stdout=asyncio.subprocess.PIPE, env=env
    )
    async with asyncio.timeout(30):
        assert await child.stdout.readline() == b"held\n"  # type: ignore[union-attr]
    return child


async def reap(child: asyncio.subprocess.Process) -> None:
    if child.returncode is None:
        child.kill()
        await child.wait()


def peak_kb(pid: int) -> int:
    """The peak resident memory (VmHWM, kB) of a live process; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


MEASURE = textwrap.dedent(
    """
    import json, resource, subprocess, sys
    def cap():
        limit = 2 << 30  # a safety net: without the fix these would take the machine's memory
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    done = subprocess.run(sys.argv[1:], capture_output=True, text=True, preexec_fn=cap)
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
    print(json.dumps({"rc": done.returncode, "out": done.stdout[-4000:],
                      "err": done.stderr[-4000:], "rss_mb": rss}))
    """
)


def run_tmy(tmp: Path, *args: str, timeout: float = 50) -> dict[str, Any]:
    """``run.py <args>`` in a process of its own; its exit code, output and peak RSS (MB)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMY_")}
    env["TMY_STORE"] = f"sqlite:///{tmp / 'm.db'}"
    cmd = [sys.executable, "-c", MEASURE, sys.executable, "run.py", *args]
    done = subprocess.run(
        cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=True
    )
    return json.loads(done.stdout)


def rules_file(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text, encoding="utf-8")
    return path
