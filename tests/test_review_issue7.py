"""Review of the issue 7 hardening: attacks that still got through after it landed.

Each test reproduces one gap against real parts (a ``serve`` process or the real
engine behind the real HTTP adapter, real loopback upstreams, real SQLite):

* a response body encoded twice (``Content-Encoding: gzip, gzip``): 1.8 KB on
  the wire inflate to 1 GiB inside httpx before the body cap is looked at
  (defect 6: the cap must bound what is decoded, not what was decoded);
* integers with equal hashes (multiples of 2**61 - 1) in a list: ``set()`` of
  them is one quadratic C call the expression budget does not charge and the
  wall-clock backstop cannot interrupt (defect 4);
* the ``on_error`` text of a rule is sent whatever its length, so
  ``limits.max_reply_chars`` does not bound the reply (defect 7);
* the HTTP adapter takes ``platform`` from the body, so ``platform: telegram``
  with ``user: 42`` is the ``telegram:42`` admin (defect 3). Decision: HTTP
  callers are integrations that relay other platforms' users, so they may name
  the platform; what keeps a stranger out is ``adapters.http.api_keys`` (README,
  Security and limits). The test proves a caller without the key runs nothing;
* a credential in the query string of a literal step URL is not registered as
  a secret and reaches the reply's ``error`` and the log (defect 11).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
import time
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from tests.support.log_helpers import read_log
from tmy.adapters.http import HttpAdapter
from tmy.testing import Bot

REPO = Path(__file__).resolve().parent.parent
PEAK_RSS_LIMIT_KB = 600 * 1024
HASH_MODULUS = 2**61 - 1  # hash(k * HASH_MODULUS) == 0 for every int k


def _gzip(chunks: list[bytes] | bytes) -> bytes:
    comp = zlib.compressobj(6, zlib.DEFLATED, 31)
    parts = [comp.compress(c) for c in ([chunks] if isinstance(chunks, bytes) else chunks)]
    return b"".join(parts) + comp.flush()


def _double_gzip_of_zeros(mib: int) -> bytes:
    block = b"\0" * (1 << 20)
    return _gzip(_gzip([block] * mib))


@pytest.fixture(scope="module")
def bomb() -> bytes:
    body = _double_gzip_of_zeros(1024)  # 1 GiB once decoded twice
    assert len(body) < 10_000
    return body


@pytest.fixture
async def hostile() -> AsyncIterator[dict[str, Any]]:
    """A loopback upstream: /bomb and /v1/chat/completions send the bomb (set by the
    test), /err echoes the URL it was asked for in a 500, /nums sends 40,000
    integers that all hash alike."""
    state: dict[str, Any] = {"bomb": b""}

    async def bomb(request: web.Request) -> web.Response:
        if request.method == "POST":
            await request.read()
        return web.Response(
            body=state["bomb"],
            headers={"Content-Encoding": "gzip, gzip", "Content-Type": "application/json"},
        )

    async def err(request: web.Request) -> web.Response:
        return web.Response(status=500, text=f"cannot serve {request.url}")

    async def nums(request: web.Request) -> web.Response:
        numbers = [k * HASH_MODULUS for k in range(1, 40_001)]  # 0.9 MB of JSON
        return web.json_response(numbers)

    app = web.Application()
    app.router.add_get("/bomb", bomb)
    app.router.add_post("/v1/chat/completions", bomb)
    app.router.add_get("/err", err)
    app.router.add_get("/nums", nums)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    state["url"] = f"http://127.0.0.1:{port}"
    try:
        yield state
    finally:
        await runner.cleanup()


def _peak_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _pings(base: str, stop: asyncio.Event) -> list[float]:
    """Latency of ``ping`` messages sent one after another until ``stop``."""
    took: list[float] = []
    async with httpx.AsyncClient(timeout=60) as client:
        while not stop.is_set():
            started = time.monotonic()
            r = await client.post(f"{base}/v1/messages", json={"text": "ping", "user": "p"})
            took.append(time.monotonic() - started)
            assert r.json()["answer"] == "pong"
            await asyncio.sleep(0.05)
    return took


PING_RULE = """
rules:
  - id: ping
    triggers: [ping]
    steps: [{plugin: ADJUST, input: pong}]
"""


async def _attack_served(
    tmp_path: Path, rules: str, text: str, config: dict[str, Any] | None = None
) -> tuple[dict[str, Any], list[float], int]:
    """Run ``serve`` (its own process: a frozen loop cannot hide its own freeze), send
    ``text`` while pings go on in parallel; (the reply, ping latencies, peak RSS in kB)."""
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
            took = await pinger
        return attack.json(), took, _peak_kb(proc.pid)
    finally:
        proc.kill()
        await proc.wait()


# -- defect 6: a body encoded twice is inflated before the cap applies ----------------------


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
    reply, took, peak = await _attack_served(tmp_path, rules, text, {"llm": llm})
    error = reply["error"] or ""
    assert "too large" in error or "encod" in error, error
    assert peak < PEAK_RSS_LIMIT_KB, f"peak RSS {peak // 1024} MB"
    assert max(took) < 1.0, f"a ping waited {max(took):.2f} s"


# -- defect 4: colliding integer hashes --------------------------------------------------------


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
    reply, took, _ = await _attack_served(tmp_path, rules, "uniq")
    assert "too costly" in (reply["error"] or ""), reply
    assert max(took) < 1.0, f"a ping waited {max(took):.2f} s"


# -- defect 7: the on_error text escapes limits.max_reply_chars --------------------------------

ON_ERROR_RULES = """
rules:
  - id: big
    triggers: ["big *"]
    on_error: "Could not answer: {STEP_RESULT}"
    steps:
      - {plugin: ADJUST, input: "{QUESTION}{QUESTION}{QUESTION}{QUESTION}{QUESTION}"}
"""


async def test_an_on_error_text_is_bounded_like_the_reply() -> None:
    async with Bot({"b.yaml": ON_ERROR_RULES}, max_reply_chars=50_000) as bot:
        reply = await bot.ask("big " + "x" * 19_000)
    assert reply.error is not None and "max_reply_chars" in reply.error
    assert len(reply.text) <= 50_000, f"a {len(reply.text):,}-character reply went out"


# -- defect 3: the HTTP caller picks the platform ---------------------------------------------

ADMIN_RULES = """
rules:
  - id: wipe
    triggers: [wipe]
    admin_only: true
    steps: [{plugin: ADJUST, input: "wiped"}]
"""


async def test_an_http_caller_cannot_become_the_admin_of_another_platform() -> None:
    async with Bot({"a.yaml": ADMIN_RULES}, admins=frozenset({"telegram:42"})) as bot:
        adapter = HttpAdapter("127.0.0.1:0", api_keys=["bridge-key-0123"])
        await adapter.start(bot.engine.handle)
        body = {"text": "wipe", "user": "42", "platform": "telegram"}
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{adapter.port}") as client:
                spoof = await client.post("/v1/messages", json=body)
                wrong = await client.post(
                    "/v1/messages", json=body, headers={"Authorization": "Bearer guess"}
                )
                bridge = await client.post(
                    "/v1/messages", json=body, headers={"Authorization": "Bearer bridge-key-0123"}
                )
        finally:
            await adapter.stop()
    assert (spoof.status_code, wrong.status_code) == (401, 401)
    assert spoof.json()["rule"] is None and wrong.json()["rule"] is None
    assert bridge.json()["answer"] == "wiped"  # the keyed bridge relays Telegram's admin


# -- defect 11: a key in the query string of a literal URL -------------------------------------


async def test_a_secret_in_a_literal_url_query_is_redacted(
    hostile: dict[str, Any], log_file: Path
) -> None:
    key = "k3y-LIVE-0123456789"
    rules = f"""
rules:
  - id: w
    triggers: ["w *"]
    steps:
      - plugin: HTTP
        url: "{hostile["url"]}/err?q={{QUESTION}}&api_key={key}"
"""
    async with Bot({"w.yaml": rules}) as bot:
        reply = await bot.ask("w paris")
    assert reply.error is not None and "cannot serve" in reply.error
    assert key not in reply.error
    assert not [e for e in read_log(log_file) if key in json.dumps(e)]
