"""A hostile loopback upstream: a doubly gzipped bomb, an error page echoing the URL asked for,
and integers that all hash alike. The ``hostile`` and ``bomb`` fixtures are available to every
test (imported by tests/conftest.py)."""

from __future__ import annotations

import functools
import os
import zlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

HASH_MODULUS = 2**61 - 1  # hash(k * HASH_MODULUS) == 0 for every int k


def _gzip(chunks: list[bytes] | bytes) -> bytes:
    comp = zlib.compressobj(6, zlib.DEFLATED, 31)
    parts = [comp.compress(c) for c in ([chunks] if isinstance(chunks, bytes) else chunks)]
    return b"".join(parts) + comp.flush()


def _double_gzip_of_zeros(mib: int) -> bytes:
    block = b"\0" * (1 << 20)
    return _gzip(_gzip([block] * mib))


@functools.cache  # seconds of zlib work: once per process, not per module set-up
def _bomb() -> bytes:
    body = _double_gzip_of_zeros(1024)  # 1 GiB once decoded twice
    assert len(body) < 10_000
    return body


@pytest.fixture
def bomb(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The bomb, built once per run: xdist's workers share one file in the run's temporary
    root (whoever comes first writes it whole, by rename), one process its cache."""
    worker_id = os.environ.get("PYTEST_XDIST_WORKER")
    if worker_id is None:  # no xdist: the temporary root's parent outlives the run
        return _bomb()
    shared = tmp_path_factory.getbasetemp().parent / "gzip-bomb.gz"
    if shared.is_file():
        return shared.read_bytes()
    body = _bomb()
    partial = shared.with_name(f"{shared.name}.{worker_id}")
    partial.write_bytes(body)
    partial.replace(shared)
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
