"""``run.py check`` / ``ask`` / a daemon as processes whose peak memory is read back: small
inputs built to amplify (format widths, aliases, templates, endless bodies) stay bounded."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import peak_kb, rules_file, run_tmy
from tests.support.upstream import Upstream

# -- from test_hardening_io.py (issue 7 hardening, defects 6, 9, 11: bounded bodies, encoded URLs,
#    redacted secrets)


REPO = Path(__file__).resolve().parents[2]


PEAK_RSS_LIMIT_KB = 600 * 1024


def _llm(up: Upstream, model: str, **extra: Any) -> dict[str, Any]:
    spec = {"base_url": f"{up.url}/v1", "model": model, **extra.pop("spec", {})}
    return {"models": {"m": spec}, "default": "m", "retries": 0, **extra}


@pytest.mark.timeout(120)
async def test_daemon_memory_stays_bounded_against_endless_bodies(
    upstream: Upstream, tmp_path: Path
) -> None:
    """``run.py ask`` against endless bodies (HTTP step, LLM SSE): peak RSS < 600 MB."""
    upstream.limit = None  # truly endless: only the client can stop it
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.yaml").write_text(
        textwrap.dedent(f"""
        rules:
          - id: fetch
            triggers: ["fetch"]
            steps:
              - {{plugin: HTTP, url: "{upstream.url}/forever", timeout: 50}}
          - id: talk
            triggers: ["talk"]
            steps:
              - {{plugin: LLM, deadline: 50}}
        """)
    )
    config = tmp_path / "tmy.yaml"
    config.write_text(
        json.dumps(
            {
                "rules": str(rules),
                "plugins": str(tmp_path / "plugins"),
                "store": f"sqlite:///{tmp_path / 'tmy.db'}",
                "limits": {"step_timeout": 55},
                "llm": _llm(upstream, "endless-sse", spec={"stream": True}),
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMY_", "OPENAI_"))}
    for text in ("fetch", "talk"):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "run.py", "--config", str(config), "ask", text, "--json",
            cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        peak = 0
        deadline = time.monotonic() + 90
        while proc.returncode is None:
            peak = max(peak, peak_kb(proc.pid))
            if peak > PEAK_RSS_LIMIT_KB or time.monotonic() > deadline:
                proc.kill()
                break
            try:
                await asyncio.wait_for(proc.wait(), 0.05)
            except TimeoutError:
                pass
        out, err = await proc.communicate()
        assert peak < PEAK_RSS_LIMIT_KB, f"{text}: peak RSS {peak // 1024} MB"
        result = json.loads(out)
        assert "too large" in (result["error"] or ""), (text, result["error"], err[-2000:])


# -- from test_hardening_values.py (issue 7 hardening, defects 4, 7, 10: expression cost,
#    amplification, deep YAML)


MAX_RSS_MB = 600


def _one_step(input_text: str) -> str:
    return (
        "rules:\n  - id: r\n    triggers: [go]\n    steps:\n"
        f"      - {{plugin: ADJUST, input: {json.dumps(input_text)}}}\n"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "spec", [">999999999", ">99999999999", ".999999999f", "0999999999"], ids=str
)
def test_check_refuses_a_huge_format_width_with_file_and_line(tmp_path: Path, spec: str) -> None:
    path = rules_file(tmp_path, "wide.yaml", _one_step("{QUESTION:" + spec + "}"))
    got = run_tmy(tmp_path, "check", str(path))
    assert got["rc"] == 1, got
    assert f"{path}:5" in got["err"] and "Traceback" not in got["err"], got["err"]
    assert got["rss_mb"] < MAX_RSS_MB, got


@pytest.mark.slow
def test_check_refuses_a_long_string_aliased_many_times(tmp_path: Path) -> None:
    # 220 KB of YAML: one 50 KB string, aliased 40,000 times (2 GB once expanded)
    text = "variables:\n  big:\n    default:\n      text: &s " + "x" * 50_000 + "\n"
    text += "      many: [" + ", ".join(["*s"] * 40_000) + "]\n"
    path = rules_file(tmp_path, "aliases.yaml", text)
    got = run_tmy(tmp_path, "check", str(path))
    assert got["rc"] == 1, got
    assert f"{path}:5" in got["err"] and "Traceback" not in got["err"], got["err"]
    assert "alias" in got["err"], got["err"]
    assert got["rss_mb"] < MAX_RSS_MB, got


@pytest.mark.slow
def test_ask_with_a_template_that_would_render_a_gigabyte_stays_small(tmp_path: Path) -> None:
    mega, giga = "{big}" * 10, "{mega}" * 1000  # 1,000,000 then 1,000,000,000 characters
    text = (
        "rules:\n  - id: r\n    triggers: [go]\n    steps:\n"
        "      - {plugin: ADJUST, input: \"?= 'x' * 100000\", save: big}\n"
        f'      - {{plugin: ADJUST, input: "{mega}", save: mega}}\n'
        f'      - {{plugin: ADJUST, input: "{giga}", save: giga}}\n'
        "      - {plugin: ADJUST, input: done}\n"
    )
    rules = tmp_path / "rules"
    rules.mkdir()
    rules_file(rules, "amp.yaml", text)
    got = run_tmy(tmp_path, "ask", "--rules", str(rules), "go")
    assert got["rc"] == 1, got
    assert "too large" in got["err"] and "Traceback" not in got["err"], got["err"]
    assert got["rss_mb"] < MAX_RSS_MB, got
