"""``run.py check`` on the knowledge bases LLM steps name: a configured base and one made
with ``kb add`` are fine; a name that is neither is a file:line warning with a hint (not an
error: the base may be added later), and check still exits 0."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.knowledge.test_commands import config, docs, run
from tmy import cli

RULES = """rules:
  - id: faq
    triggers: ["faq *"]
    steps: [{plugin: LLM, knowledge: faq}]
  - id: extra
    triggers: ["extra *"]
    steps: [{plugin: LLM, knowledge: {use: [extra], top: 2}}]
  - id: typo
    triggers: ["typo *"]
    steps: [{plugin: LLM, knowledge: [fqa]}]
  - id: computed
    triggers: ["c *"]
    steps: [{plugin: LLM, knowledge: "{QUESTION}"}]
"""


async def test_check_warns_only_of_bases_neither_configured_nor_added(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = docs(tmp_path)
    cfg = config(tmp_path, store_url)
    (tmp_path / "rules" / "r.yaml").write_text(RULES)
    code, out = await run(capsys, cfg, "add", "extra", str(folder / "returns.md"))
    assert code == 0, out
    capsys.readouterr()
    code = await asyncio.to_thread(cli.main, ["check", "--config", str(cfg)])
    err = capsys.readouterr().err
    assert code == 0
    warnings = [line for line in err.splitlines() if "knowledge base" in line]
    assert len(warnings) == 1, err
    assert "r.yaml:10: rule 'typo'" in warnings[0] and "'fqa'" in warnings[0]
    assert "did you mean 'faq'?" in warnings[0]


async def test_check_warns_of_a_configured_path_that_does_not_exist(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = config(tmp_path, store_url)  # knowledge: {faq: {paths: [docs]}}, and no docs/ made
    capsys.readouterr()
    code = await asyncio.to_thread(cli.main, ["check", "--config", str(cfg)])
    err = capsys.readouterr().err
    assert code == 0
    assert "warning: knowledge.faq.paths: 'docs' does not exist" in err
