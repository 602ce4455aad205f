"""What ``run.py cron`` shows (tmy.cron.report): each job, its next fire times, its runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cron.scheduled import rule_with

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # run.py processes
def test_run_py_cron_lists_jobs_and_their_next_fire_times(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.yaml").write_text(rule_with("cron: '30 8 * * *'\ntimezone: Asia/Tokyo"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMY_")}
    base = [
        sys.executable,
        "run.py",
        "--rules",
        str(rules),
        "--store",
        f"sqlite:///{tmp_path / 'x.db'}",
    ]
    out = subprocess.run(
        [*base, "cron", "--json"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    jobs = json.loads(out.stdout)
    assert [j["rule"] for j in jobs] == ["job"]
    assert all(n.endswith("T08:30:00+09:00") for n in jobs[0]["next"])
    assert jobs[0]["last_runs"] == []
    text = subprocess.run([*base, "cron"], cwd=REPO, env=env, capture_output=True, text=True)
    assert "job  cron '30 8 * * *' (Asia/Tokyo)" in text.stdout and "no runs yet" in text.stdout
