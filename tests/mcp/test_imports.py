"""Importing tmy does not import the MCP SDK: it is ~0.5 s that every CLI start would pay.

The SDK (``mcp``, ``mcp_types``) and what it stands on (anyio, httpx2, pydantic, the
starlette/uvicorn server side) are imported where an MCP server is connected, where
``mcp-serve`` runs and where ``/mcp`` is served — not by the modules that define those.
A fresh interpreter is the only place to see it: this test process has the SDK loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SDK = ("mcp", "mcp_types", "anyio", "httpx2", "pydantic", "starlette", "uvicorn", "sse_starlette")

# every module of tmy.mcp and tmy.mcpserve, beside what a CLI start imports
MODULES = (
    "tmy.cli",
    "tmy.builtins",
    "tmy.mcp.connection",
    "tmy.mcp.results",
    "tmy.mcp.servers",
    "tmy.mcpserve.http",
    "tmy.mcpserve.server",
    "tmy.mcpserve.stdio",
)

PROBE = f"""
import importlib, json, sys
for name in {MODULES!r}:
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {SDK!r})))
"""


@pytest.mark.slow
def test_importing_tmy_leaves_the_sdk_unloaded():
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded == [], f"imported at module level: {loaded[:20]}"
