"""The package's shape: the layer contract holds, and nothing hides a registry or a cycle.

The layer order lives in pyproject.toml ([tool.importlinter]); this runs import-linter
on it, so the README's test command (and CI) checks it. The counts come from
tools/codecount.py, the script the README's Development section quotes.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import sys
from pathlib import Path

import pytest
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]


def _codecount():  # tools/ is not a package: load the script by path
    spec = importlib.util.spec_from_file_location("codecount", ROOT / "tools" / "codecount.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_layer_contract_holds(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # import-linter reads ./pyproject.toml
    monkeypatch.syspath_prepend(os.fspath(ROOT))
    # import-linter configures logging with disable_existing_loggers: put every logger
    # back as it was, or later tests in this process lose asyncio's log records
    loggers = [
        lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]
    disabled = {lg: lg.disabled for lg in loggers}
    try:
        code = lint_imports(no_cache=True, no_logo=True)
    finally:
        for lg, was in disabled.items():
            lg.disabled = was
    out = capsys.readouterr().out
    assert code == 0, out[-4000:]
    assert "1 kept, 0 broken" in out


@functools.cache
def _scan_of_tmy():
    """tmy/ scanned once per process (a second of parsing every module): the two tests
    below read different findings of the same scan; one xdist group keeps them together."""
    return _codecount().scan(ROOT / "tmy")


@pytest.mark.xdist_group("layers-scan")
def test_no_module_level_registry_is_left():
    found = _scan_of_tmy()
    assert found["mutable_registries"] == []


@pytest.mark.xdist_group("layers-scan")
def test_every_function_level_import_of_tmy_says_why():
    found = _scan_of_tmy()
    unexplained = [f"{f.where} {f.name}" for f in found["function_level_imports"] if not f.note]
    assert unexplained == []


def test_the_counter_finds_what_it_counts(tmp_path):
    """The script is not vacuous: a registry, a hidden import and long code are found."""
    pkg = tmp_path / "tmy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "hub.py").write_text("HOOKS: list = []\nTABLE = {}\n")
    (pkg / "plugin.py").write_text(
        "from tmy.hub import TABLE\n\n\ndef install():\n    from tmy import hub\n"
        "    TABLE['x'] = 1\n" + "    x = 1\n" * 90
    )
    found = _codecount().scan(pkg)
    assert {f.name for f in found["mutable_registries"]} == {"HOOKS", "TABLE"}
    assert [f.name for f in found["function_level_imports"]] == ["tmy"]
    assert [f.name for f in found["long_functions"]] == ["install"]
