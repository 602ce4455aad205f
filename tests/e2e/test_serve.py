"""``run.py serve`` as a process: how it starts and stops."""

from __future__ import annotations

from pathlib import Path

import pytest

# -- from test_bughunt.py (a bug hunt: each failed before its fix)


@pytest.mark.slow
def test_serve_on_a_terminal_exits_on_sigterm(tmp_path: Path) -> None:
    import os
    import pty
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    repo = Path(__file__).resolve().parents[2]
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.yaml").write_text(
        "rules:\n  - id: r\n    triggers: [r]\n    steps:\n      - {plugin: ADJUST}\n",
        encoding="utf-8",
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMY_")}
    proc = subprocess.Popen(
        [sys.executable, str(repo / "run.py"), "--rules", str(rules),
         "--store", f"sqlite:///{tmp_path / 't.db'}", "serve", "--http", f"127.0.0.1:{port}"],
        stdin=slave, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except OSError:
                assert time.monotonic() < deadline, "serve did not come up"
                time.sleep(0.1)
        time.sleep(0.3)  # the console is waiting for a line
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=8)
        except subprocess.TimeoutExpired:
            pytest.fail("serve still running 8 s after SIGTERM (waiting for a line on stdin)")
    finally:
        if proc.poll() is None:
            os.write(master, b"\n")
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        os.close(master)
        os.close(slave)
