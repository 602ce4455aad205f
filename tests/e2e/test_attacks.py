"""Attacks on a served bot: hostile expressions and upstream bodies must not freeze the daemon
nor blow up its memory, while ``ping`` messages in parallel are still answered."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.processes import peak_kb
from tmy.testing import serving

pytestmark = pytest.mark.xdist_group("attacks")  # one worker builds the gzip bomb

# -- from test_hardening_values.py (issue 7 hardening, defects 4, 7, 10: expression cost,
#    amplification, deep YAML)


# Each blocked the event loop for seconds before the fix. The cost model that ends them is
# tested without a server, on these and seventeen more (tests/values/test_cost.py); here three
# go through a served bot: a size bound, a big-integer cost, a deep walk.
ATTACKS: list[tuple[str, str]] = [
    ("round(5, -int(QUESTION))", "20000000"),
    ("[sum([(2 ** 9999) ** 10] * 9999) > 0 for c in QUESTION]", "x" * 300),
    (
        "[x == y for x in [[[1] * 1000 for i in QUESTION]] "
        "for y in [[[1] * 1000 for i in QUESTION]] for c in QUESTION * 7]",
        "x" * 1000,
    ),
]

# A ping sent while an attack runs must be answered within this long (an HTTP timeout, so a
# frozen daemon fails the test; the attacks above froze it for seconds to minutes).
PING_TIMEOUT = 5.0


def _attack_rules() -> str:
    lines = [
        "rules:",
        "  - id: ping",
        "    triggers: [ping]",
        "    steps: [{plugin: ADJUST, input: pong}]",
    ]
    for i, (expr, _) in enumerate(ATTACKS):
        lines += [
            f"  - id: a{i}",
            f'    triggers: ["a{i} *"]',
            f"    steps: [{{plugin: ADJUST, input: {json.dumps('?= ' + expr)}}}]",
        ]
    return "\n".join(lines) + "\n"


def _race(base: str, text: str) -> tuple[dict[str, Any], list[str]]:
    """Post ``text`` and, from other threads while it runs, three pings (each bounded by
    :data:`PING_TIMEOUT`); the attack's reply and the pings' answers."""

    def post(body: str, timeout: float) -> dict[str, Any]:
        with httpx.Client(base_url=base, timeout=timeout) as client:
            return client.post("/v1/messages", json={"text": body}).json()

    def ping(delay: float) -> str:
        time.sleep(delay)  # spread over the attack's run
        return post("ping", PING_TIMEOUT)["answer"]

    with ThreadPoolExecutor(max_workers=4) as pool:
        attack = pool.submit(post, text, 60)
        pings = [pool.submit(ping, delay) for delay in (0.05, 0.2, 0.5)]
        return attack.result(), [p.result() for p in pings]


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_an_expensive_expression_never_freezes_the_daemon() -> None:
    async with serving({"attacks.yaml": _attack_rules()}) as daemon:
        for index, (expr, arg) in enumerate(ATTACKS):
            reply, pongs = await asyncio.to_thread(_race, daemon.url, f"a{index} {arg}")
            assert pongs == ["pong"] * 3, expr
            assert reply["rule"] == f"a{index}"
            error = reply["error"] or ""
            assert expr in error and ("too costly" in error or "too large" in error), error


# -- from test_review_issue7.py (review of the issue 7 hardening: attacks that still got through)


REPO = Path(__file__).resolve().parents[2]


PEAK_RSS_LIMIT_KB = 600 * 1024


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _pings(base: str, stop: asyncio.Event) -> int:
    """``ping`` messages one after another until ``stop``, each answered within
    :data:`PING_TIMEOUT` (else the HTTP timeout fails the test); how many were answered."""
    answered = 0
    async with httpx.AsyncClient(timeout=PING_TIMEOUT) as client:
        while not stop.is_set():
            r = await client.post(f"{base}/v1/messages", json={"text": "ping", "user": "p"})
            assert r.json()["answer"] == "pong"
            answered += 1
            await asyncio.sleep(0.05)
    return answered


PING_RULE = """
rules:
  - id: ping
    triggers: [ping]
    steps: [{plugin: ADJUST, input: pong}]
"""


async def _attack_served(
    tmp_path: Path, rules: str, text: str, config: dict[str, Any] | None = None
) -> tuple[dict[str, Any], int, int]:
    """Run ``serve`` (its own process: a frozen loop cannot hide its own freeze), send
    ``text`` while pings go on in parallel; (the reply, pings answered, peak RSS in kB)."""
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    (rules_dir / "r.yaml").write_text(PING_RULE + textwrap.indent(textwrap.dedent(rules), "  "))
    config_file = tmp_path / "tmy.yaml"
    config_file.write_text(json.dumps({"plugins": str(tmp_path / "plugins"), **(config or {})}))
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMY_", "OPENAI_"))}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "run.py", "--config", str(config_file), "serve", "--http",
        f"127.0.0.1:{port}", "--no-console", "--rules", str(rules_dir),
        "--store", f"sqlite:///{tmp_path / 'x.db'}",
        cwd=REPO, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(timeout=100) as client:
            for _ in range(400):
                try:
                    await client.get(f"{base}/healthz")
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.05)
            stop = asyncio.Event()
            pinger = asyncio.create_task(_pings(base, stop))
            await asyncio.sleep(0.3)
            attack = await client.post(f"{base}/v1/messages", json={"text": text, "user": "a"})
            await asyncio.sleep(0.3)
            stop.set()
            pinged = await pinger
        return attack.json(), pinged, peak_kb(proc.pid)
    finally:
        proc.kill()
        await proc.wait()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("text", ["fetch", "talk"])
async def test_a_doubly_gzipped_body_cannot_blow_up_the_daemon(
    hostile: dict[str, Any], bomb: bytes, tmp_path: Path, text: str
) -> None:
    """1.8 KB of ``gzip, gzip`` inflated to 1 GiB in one httpx decode call: the
    daemon went to 2.1 GB and froze every chat for ~4 s before saying "too large"."""
    hostile["bomb"] = bomb
    rules = f"""
    - id: fetch
      triggers: [fetch]
      steps: [{{plugin: HTTP, url: "{hostile["url"]}/bomb", result: text}}]
    - id: talk
      triggers: [talk]
      steps: [{{plugin: LLM, deadline: 50}}]
    """
    llm = {"models": {"m": {"base_url": f"{hostile['url']}/v1", "model": "m"}},
           "default": "m", "retries": 0}  # fmt: skip
    reply, pinged, peak = await _attack_served(tmp_path, rules, text, {"llm": llm})
    error = reply["error"] or ""
    assert "too large" in error or "encod" in error, error
    assert peak < PEAK_RSS_LIMIT_KB, f"peak RSS {peak // 1024} MB"
    assert pinged > 0


@pytest.mark.timeout(120)
async def test_integers_with_equal_hashes_do_not_freeze_the_daemon(
    hostile: dict[str, Any], tmp_path: Path
) -> None:
    """An upstream's JSON list of 40,000 integers that all hash alike (0.9 MB, well
    under the body cap): ``set()`` of it held the event loop for ~6 s (quadratic in
    C: uncharged by the budget, beyond the reach of the wall-clock backstop)."""
    rules = f"""
    - id: uniq
      triggers: [uniq]
      steps:
        - {{plugin: HTTP, url: "{hostile["url"]}/nums"}}
        - {{plugin: ADJUST, input: "?= len(set(STEP_RESULT))"}}
    """
    reply, pinged, _ = await _attack_served(tmp_path, rules, "uniq")
    assert "too costly" in (reply["error"] or ""), reply
    assert pinged > 0
