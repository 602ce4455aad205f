"""log.rotate in the daemon: `serve` with log.file and log.rotate rotates as it logs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_daemon_rotates_its_log_file(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "tmy.yaml"
    config.write_text(
        f"rules: {REPO / 'rules'}\nstore: 'sqlite:///:memory:'\n"
        "log:\n  file: tmy.log\n  rotate: {max_bytes: 4000, backups: 2}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMY_", "OPENAI_"))}
    env["TMY_CONFIG"] = str(config)
    proc = subprocess.Popen(
        [sys.executable, "run.py", "serve", "--no-console", "--http", f"127.0.0.1:{port}"],
        cwd=REPO, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).is_success:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        with httpx.Client() as client:  # one connection for every message
            for i in range(60):  # one message.unmatched / run.done line each, ~250 bytes: 4 files
                client.post(f"http://127.0.0.1:{port}/v1/messages",
                            json={"text": f".ping {i}", "user": "ann"}, timeout=10)  # fmt: skip
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    names = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("tmy.log"))
    assert names == ["tmy.log", "tmy.log.1", "tmy.log.2"]
    assert all((tmp_path / n).stat().st_size <= 4000 for n in names)
