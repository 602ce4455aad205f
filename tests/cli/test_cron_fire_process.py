"""``python run.py cron fire RULE`` as a user runs it: a real process, beside a serving
daemon (found at the config's ``adapters.http.listen``) and without one."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tmy.testing import serving

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

RULES = """
variables:
  ticks: {scope: global, default: 0}
rules:
  - id: digest
    schedule:
      cron: "0 9 * * *"
      misfire_grace: 0  # on time only: a test daemon started at 09:00 does not run it too
      send_to: [{platform: onebot, chat: "group:5"}]
      input: daily digest
    steps:
      - {plugin: ADJUST, input: "?= ticks + 1", save: ticks}
      - {plugin: ADJUST, input: "{QUESTION} #{ticks}"}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _setup(tmp_path: Path, port: int) -> tuple[Path, str]:
    rules = tmp_path / "rules"
    rules.mkdir(exist_ok=True)
    (rules / "r.yaml").write_text(RULES, encoding="utf-8")
    store = f"sqlite:///{tmp_path / 'tmy.db'}"
    config = tmp_path / "tmy.yaml"
    config.write_text(
        f"rules: rules\nstore: {store}\ntimezone: UTC\n"
        f"adapters: {{http: {{listen: '127.0.0.1:{port}'}}}}\n",
        encoding="utf-8",
    )
    return config, store


def run_py(config: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMY_")}
    return subprocess.run(
        [sys.executable, "run.py", *argv, "--config", str(config), "--user", "ops"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.timeout(90)
async def test_cron_fire_asks_the_daemon_at_the_configs_listener(tmp_path: Path) -> None:
    config, store = _setup(tmp_path, 0)
    async with serving({"r.yaml": RULES}, store=store, platform="onebot",
                       timezone="UTC") as daemon:  # fmt: skip
        _setup(tmp_path, daemon.http.port)  # the CLI's config names the daemon's listener
        done = await asyncio.to_thread(run_py, config, "cron", "fire", "digest")
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""  # the daemon answered: no note about running here
        post = await daemon.pop()
        assert (post.target.platform, post.target.chat, post.text) == (
            "onebot",
            "group:5",
            "daily digest #1",
        )
        head, reply = done.stdout.strip().splitlines()
        assert " -> onebot:group:5: ok, sent ok (trace " in head and reply == "daily digest #1"

        dry = await asyncio.to_thread(run_py, config, "cron", "fire", "digest", "--dry-run")
        assert (
            dry.returncode == 0 and "would send to onebot:group:5:\ndaily digest #2" in dry.stdout
        )
        report = await asyncio.to_thread(run_py, config, "cron", "--json")
        [job] = json.loads(report.stdout)
        [run] = job["last_runs"]
        assert run["manual"] is True and run["by"] == "http console:ops" and run["sent"] == "ok"
        assert job["next"][0].endswith("T09:00:00+00:00")
        assert await daemon.var("ticks") == 1  # the dry run stored nothing

        # rules and a store of its own: the fire runs here, on them, as its --dry-run would
        own = tmp_path / "own"
        own.mkdir()
        (own / "r.yaml").write_text(RULES)
        mine = ["--rules", str(own), "--store", f"sqlite:///{own / 's.db'}"]
        here = await asyncio.to_thread(run_py, config, "cron", "fire", "digest", *mine)
        assert here.returncode == 0, here.stderr
        assert "note: --rules and --store given: cron runs in this process" in here.stderr
        assert "not sent: no onebot adapter in this process" in here.stdout
        assert await daemon.var("ticks") == 1  # the daemon's store and chats untouched
    assert daemon.sent == []


def test_cron_fire_without_a_daemon_runs_here_and_prints_the_reply(tmp_path: Path) -> None:
    config, _ = _setup(tmp_path, _free_port())
    done = run_py(config, "cron", "fire", "digest")
    assert done.returncode == 0, done.stderr
    assert "note: no daemon answered at http://127.0.0.1:" in done.stderr
    head, reply = done.stdout.strip().splitlines()
    assert " -> onebot:group:5: ok, not sent: no onebot adapter in this process" in head
    assert reply == "daily digest #1"
    got = run_py(config, "vars", "get", "ticks")
    assert got.stdout.strip() == "1"
    report = run_py(config, "cron")
    assert "(fired now by cli console:ops)" in report.stdout

    wrong = run_py(config, "cron", "fire", "digets")
    assert wrong.returncode == 2
    assert "error: no rule 'digets' (did you mean 'digest'?) (scheduled rules: digest)" in (
        wrong.stderr
    )
