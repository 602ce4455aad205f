"""The kb command on the CLI (text and --json), in chat and over HTTP-shaped args, both stores."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tmy import cli
from tmy.knowledge.config import parse
from tmy.testing import Bot

RULES = "rules:\n  - {id: ping, triggers: [ping], steps: [{plugin: ADJUST, input: pong}]}\n"


def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "returns.md").write_text("Returns: return any item within 30 days for a refund.")
    (folder / "zh.txt").write_text("退货政策：收到商品后三十天内可以退货。")
    return folder


def config(tmp_path: Path, store_url: str) -> Path:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "r.yaml").write_text(RULES)
    path = tmp_path / "tmy.yaml"
    path.write_text(
        f"rules: rules\nstore: {store_url}\n"
        "knowledge:\n  faq:\n    paths: [docs]\n    chunk: {chars: 200, overlap: 20}\n"
    )
    return path


async def run(capsys: pytest.CaptureFixture[str], cfg: Path, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = await asyncio.to_thread(cli.main, ["kb", *argv, "--config", str(cfg)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


async def run_json(capsys: pytest.CaptureFixture[str], cfg: Path, *argv: str) -> Any:
    code, out = await run(capsys, cfg, *argv, "--json")
    assert code == 0, out
    return json.loads(out)


async def test_kb_on_the_cli(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = docs(tmp_path)
    cfg = config(tmp_path, store_url)
    code, out = await run(capsys, cfg, "add", "faq", str(folder))
    assert code == 0 and "faq: 2 added, 0 replaced, 0 unchanged" in out
    code, out = await run(capsys, cfg, "list")
    assert out.strip() == "faq: 2 documents, 2 chunks — paths: docs (watched)"
    listed = await run_json(capsys, cfg, "list", "faq")
    assert [d["source"] for d in listed["documents"]] == ["returns.md", "zh.txt"]
    assert listed["chunks"] == 2 and listed["documents"][0]["kind"] == "text"

    found = await run_json(
        capsys, cfg, "search", "faq", "how long can I return an item", "--top", "1"
    )
    assert found["query"] == "how long can I return an item" and found["top"] == 1
    (best,) = found["passages"]
    assert best["source"] == "returns.md" and best["position"] == "chars 0–53"
    assert best["text"].startswith("Returns:") and best["why"]["lexical_rank"] == 1
    code, out = await run(capsys, cfg, "search", "faq", "三十天内退货")
    assert code == 0 and out.startswith("1. zh.txt (chars 0–19) score ")
    code, out = await run(capsys, cfg, "search", "faq", "zebra")
    assert "faq: nothing found for 'zebra'" in out

    code, out = await run(capsys, cfg, "del", "faq", "zh.txt")
    assert code == 0 and "faq: removed zh.txt" in out
    code, out = await run(capsys, cfg, "del", "faq", "nope.md")
    assert code == 1 and "faq has no document 'nope.md'" in out
    rebuilt = await run_json(capsys, cfg, "rebuild", "faq")  # from the configured paths
    assert sorted(rebuilt["added"]) == ["returns.md", "zh.txt"]
    code, out = await run(capsys, cfg, "del", "faq")
    assert "knowledge base faq deleted (2 documents)" in out
    code, out = await run(capsys, cfg, "search", "nope", "x")
    assert code != 0 and "no knowledge base named 'nope'" in out


async def test_kb_add_makes_a_base_that_is_not_configured(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = docs(tmp_path)
    cfg = config(tmp_path, store_url)
    code, out = await run(capsys, cfg, "add", "extra", str(folder / "returns.md"))
    assert code == 0 and "extra: 1 added" in out
    code, out = await run(capsys, cfg, "list")
    assert "extra: 1 document, 1 chunk — added with kb add" in out
    rebuilt = await run_json(capsys, cfg, "rebuild", "extra")  # from where it was added
    assert rebuilt["added"] == ["returns.md"]
    code, out = await run(capsys, cfg, "add", "bad/name", str(folder))
    assert code == 2 and "name 'bad/name' is not allowed" in out


async def test_kb_in_chat_is_for_admins_and_does_not_read_server_files(tmp_path: Path) -> None:
    folder = docs(tmp_path)
    bases = parse({"faq": {"paths": [str(folder)]}})
    async with Bot({"r.yaml": RULES}, admins=["test:root"], sections={"knowledge": bases}) as bot:
        refused = await bot.ask(".tmy kb list", user="ann")
        assert refused.text == "" and refused.rule is None  # a non-admin is not answered
        reply = await bot.say(f".tmy kb add faq {folder}", user="root")
        assert "kb add reads files on the server" in reply
        reply = await bot.say(".tmy kb rebuild faq", user="root")
        assert "faq: 2 added" in reply
        reply = await bot.say(".tmy kb search faq return an item within days", user="root")
        assert reply.startswith("1. returns.md (chars 0–53) score")
        reply = await bot.say(".tmy kb", user="root")
        assert reply == f"faq: 2 documents, 2 chunks — paths: {folder} (watched)"


async def test_kb_add_takes_several_paths_given_as_words(tmp_path: Path) -> None:
    from tmy.command import Invocation
    from tmy.knowledge.commands import KB
    from tmy.message import Message

    folder = docs(tmp_path)
    async with Bot({"r.yaml": RULES}) as bot:
        args = {"action": "add", "name": "x", "target": [str(folder / "returns.md"),
                str(folder / "zh.txt")], "top": None, "json": False}  # fmt: skip
        result = await KB.run(Invocation(args, Message("", user="op"), "cli", bot.app))
        assert result.ok and sorted(result.data["added"]) == ["returns.md", "zh.txt"]
        args = {"action": "search", "name": "x", "target": ["return", "item"], "top": None}
        result = await KB.run(Invocation(args, Message("", user="op"), "cli", bot.app))
        assert result.data["query"] == "return item" and result.data["passages"]


async def test_kb_answers_read_well(tmp_path: Path) -> None:
    from tmy.command import Invocation
    from tmy.knowledge.commands import KB
    from tmy.message import Message

    folder = docs(tmp_path)
    async with Bot({"r.yaml": RULES}) as bot:

        async def kb(**args: object) -> str:
            given = {"name": "x", "target": None, "top": None, **args}
            return (await KB.run(Invocation(given, Message("", user="op"), "cli", bot.app))).text

        await kb(action="add", target=[str(folder / "returns.md")])
        assert "  returns.md: 1 chunk, 53 B" in await kb(action="list")
        assert (await kb(action="rebuild")).endswith("(1 chunk written)")
        long = "退" * 20_000  # the question is not echoed whole
        assert await kb(action="search", target=long) == f"x: nothing found for '{'退' * 80}…'"
        assert await kb(action="del") == "knowledge base x deleted (1 document)"
