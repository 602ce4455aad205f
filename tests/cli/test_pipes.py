"""``run.py … | head -1``: a reader that stops early ends any command quietly (exit 141).

Real processes writing into real pipes: one whose reading end is closed before the
command writes anything (the failure is certain, not a race), for a command of each
kind, and a shell pipeline into ``head -1`` with more output than a pipe holds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

RULES = """
variables:
  n: {scope: global, default: 0}
rules:
  - id: hi
    triggers: [hi, hello]
    steps: [{plugin: ADJUST, input: hey}]
  - id: tick
    schedule: {every: 1h}
    steps: [{plugin: ADJUST, input: tick}]
tests:
  - {send: hi, expect: hey}
"""


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "r.yaml").write_text(RULES, encoding="utf-8")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "o.yaml").write_text(  # a second file claiming 'hello': a warning
        "rules:\n  - {id: o, triggers: [hello], steps: [{plugin: ADJUST, input: o}]}\n"
    )
    config = tmp_path / "tmy.yaml"
    config.write_text(
        f"rules: rules\nstore: sqlite:///{tmp_path / 't.db'}\n"
        "adapters: {http: {enabled: false}}\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMY_")}
    env["TMY_CONFIG"] = str(config)
    return tmp_path, env


def _into_closed_pipe(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes a byte
    try:
        return subprocess.run(
            [sys.executable, "run.py", *argv],
            cwd=REPO,
            env=env,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["check"], id="check"),
        pytest.param(["check", "{tmp}"], id="check-with-warnings"),
        pytest.param(["ask", "hi"], id="ask"),
        pytest.param(["test"], id="test"),
        pytest.param(["rules"], id="rules"),
        pytest.param(["vars", "list"], id="vars"),
        pytest.param(["cron", "--json"], id="cron"),
        pytest.param(["cron", "fire", "tick"], id="cron-fire"),
        pytest.param(["explain", "hi"], id="explain"),
        pytest.param(["help"], id="help"),
    ],
)
def test_a_closed_pipe_ends_the_command_quietly(
    argv: list[str], setup: tuple[Path, dict[str, str]]
) -> None:
    tmp, env = setup
    argv = [a.replace("{tmp}", str(tmp / "rules")) for a in argv]
    if argv == ["check", str(tmp / "rules")]:
        (tmp / "rules" / "o.yaml").write_text((tmp / "other" / "o.yaml").read_text())
    done = _into_closed_pipe(argv, env)
    assert done.returncode == 141, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    if argv[0] == "check" and len(argv) > 1:  # warnings (stderr) still reach the terminal
        assert "warning: " in done.stderr and "collides with trigger 'hello'" in done.stderr


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("head") is None,
                    reason="needs bash and head")  # fmt: skip
def test_head_1_after_more_output_than_a_pipe_holds(setup: tuple[Path, dict[str, str]]) -> None:
    tmp, env = setup
    many = "variables:\n" + "".join(
        f"  v{i:05d}: {{scope: global, default: {'x' * 40!r}}}\n" for i in range(4000)
    )
    (tmp / "rules" / "many.yaml").write_text(many, encoding="utf-8")
    script = f'{sys.executable} run.py vars list | head -1; echo "status=${{PIPESTATUS[0]}}"'
    done = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    first, status = done.stdout.strip().splitlines()  # ~250 kB were to follow the first line
    assert first == "n\tglobal\t(default) 0"
    assert status == "status=141"
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
