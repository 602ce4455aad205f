"""Backup of a running daemon under load, and restore into the other kind of store.

A real ``python run.py serve`` process (SQLite or Redis) answers 1,000 (300 on Redis) concurrent
``hit`` messages over its HTTP adapter, each incrementing one global counter and
answering the new value, while ``python run.py backup`` runs as a process of its
own. The counter in the file must be a value the counter really had while the
backup ran: at least every increment acknowledged before the backup started, at
most every increment sent before it finished. The file is then restored with
``python run.py restore`` into an empty store of the other kind (SQLite → Redis,
Redis → SQLite) and every key — variables, memory entries, LLM histories,
sessions, leaderboards — must be equal to the file's. Once the daemon stopped, a
second backup restored with ``--replace`` makes the target equal to the source.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from tmy.backup.reader import read_file
from tmy.store import open_store

REPO = Path(__file__).resolve().parents[2]
INCREMENTS = 1000
IN_FLIGHT = 50

RULES = textwrap.dedent("""
    variables:
      hits: {scope: global, default: 0}
      points: {scope: user, default: 0, rank: true}
    rules:
      - id: hit
        triggers: ["hit"]
        steps:
          - {plugin: ADJUST, input: "?= hits + 1", save: hits}
      - id: point
        triggers: ["point"]
        steps:
          - {plugin: ADJUST, input: "?= points + 1", save: points}
      - id: remember
        triggers: ["remember *"]
        steps:
          - {plugin: REMEMBER}
      - id: chat
        triggers: ["chat *"]
        session: 600
        steps:
          - {plugin: LLM, history: 10, memory: 6}
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMY_", "OPENAI_"))}
    config = tmp_path / "tmy.yaml"
    config.write_text("timezone: UTC\n")
    env.update(TMY_CONFIG=str(config), TMY_WATCH="0", TMY_LOG_FILE=str(tmp_path / "tmy.log"))
    return env


def _serve(tmp_path: Path, store: str, port: int) -> subprocess.Popen[bytes]:
    rules = tmp_path / "rules"
    rules.mkdir(exist_ok=True)
    (rules / "r.yaml").write_text(RULES)
    return subprocess.Popen(
        [sys.executable, "run.py", "serve", "--no-console", "--rules", str(rules),
         "--store", store, "--http", f"127.0.0.1:{port}"],
        cwd=REPO, env=_env(tmp_path), stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


async def _tmy(tmp_path: Path, *argv: str) -> tuple[int, str]:
    """``python run.py ARGV`` as a process; (exit status, stdout + stderr)."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "run.py", *argv, cwd=REPO, env=_env(tmp_path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await child.communicate()
    assert child.returncode is not None
    return child.returncode, out.decode()


async def _ready(client: httpx.AsyncClient, daemon: subprocess.Popen[bytes]) -> None:
    async with asyncio.timeout(30):
        while True:
            assert daemon.poll() is None, "the daemon exited"
            try:
                if (await client.get("/healthz")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)


async def _say(client: httpx.AsyncClient, text: str, user: str = "ann") -> str:
    answer = await client.post("/v1/messages", json={"text": text, "user": user, "chat": "room"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert not body.get("error"), body
    return str(body["answer"])


async def _snapshot(url: str) -> Any:
    store = open_store(url)
    await store.open()
    try:
        return await store.snapshot()
    finally:
        await store.close()


def _values(entries: Any) -> dict[str, Any]:
    return {key: value for key, value, _ in entries}


def _stop(daemon: subprocess.Popen[bytes]) -> None:
    if daemon.poll() is None:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(20)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


async def _backup_under_load_then_restore(
    tmp_path: Path, source: str, target: str, increments: int = INCREMENTS
) -> None:
    port = _free_port()
    daemon = _serve(tmp_path, source, port)
    limits = httpx.Limits(max_connections=IN_FLIGHT, max_keepalive_connections=IN_FLIGHT)
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", timeout=60, limits=limits
        ) as client:
            await _ready(client, daemon)
            # a little of everything tmy keeps besides the counter
            assert (await _say(client, "remember my cat is called Mimi")).startswith("OK")
            recalled = await _say(client, "chat what is my cat called")
            assert "- my cat is called Mimi\n" in recalled
            await _say(client, "chat and my dog", user="bob")
            for user, times in (("ann", 3), ("bob", 5), ("cy", 1)):
                for _ in range(times):
                    await _say(client, "point", user=user)

            acked: list[int] = []
            sent = 0
            gate = asyncio.Semaphore(IN_FLIGHT)

            async def hit(n: int) -> None:
                nonlocal sent
                async with gate:
                    sent += 1
                    acked.append(int(await _say(client, "hit", user=f"u{n % 40}")))

            load = [asyncio.create_task(hit(n)) for n in range(increments)]
            async with asyncio.timeout(60):
                while len(acked) < 100:
                    await asyncio.sleep(0.005)
            before = max(acked)  # every value up to it is committed
            file = tmp_path / "under-load.jsonl.gz"
            code, out = await _tmy(tmp_path, "backup", str(file), "--store", source)
            sent_by_end = sent
            await asyncio.gather(*load)
    finally:
        _stop(daemon)
    assert code == 0, out
    assert before < increments, "the backup ran while the increments were still running"
    assert sorted(acked) == list(range(1, increments + 1))  # none lost, none doubled

    taken = read_file(file)
    counter = _values(taken.entries)["var/global/hits"]
    assert before <= counter <= sent_by_end, (before, counter, sent_by_end)
    families = {key.split("/")[0] for key, _, _ in taken.entries}
    assert {"var", "mem", "llmhist", "session"} <= families, families
    assert len(taken.ranks) == 3

    code, out = await _tmy(tmp_path, "restore", str(file), "--store", target)
    assert code == 0, out
    restored = await _snapshot(target)
    assert _values(restored.entries) == _values(taken.entries)
    assert restored.ranks == taken.ranks

    # the daemon stopped: a second backup, restored over the first, equals the source whole
    quiet = tmp_path / "after.jsonl"
    assert (await _tmy(tmp_path, "backup", str(quiet), "--store", source))[0] == 0
    code, out = await _tmy(tmp_path, "restore", str(quiet), "--store", target, "--replace")
    assert code == 0, out
    source_now, target_now = await _snapshot(source), await _snapshot(target)
    assert _values(target_now.entries) == _values(source_now.entries)
    assert _values(target_now.entries)["var/global/hits"] == increments
    assert target_now.ranks == source_now.ranks


@pytest.mark.timeout(180)
async def test_sqlite_daemon_under_load_backs_up_and_restores_into_redis(
    tmp_path: Path, redis_store_url: str
) -> None:
    await _backup_under_load_then_restore(
        tmp_path, f"sqlite:///{tmp_path / 'tmy.db'}", redis_store_url
    )


@pytest.mark.timeout(180)
async def test_redis_daemon_under_load_backs_up_and_restores_into_sqlite(
    tmp_path: Path, redis_store_url: str
) -> None:
    """The way back; the 1,000-increment consistency is the SQLite test's, 300 here."""
    await _backup_under_load_then_restore(
        tmp_path, redis_store_url, f"sqlite:///{tmp_path / 'to.db'}", increments=300
    )
