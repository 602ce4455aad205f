"""The serving daemon ingests its configured bases at start and re-ingests changed files."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from tmy.knowledge import knowledge_of
from tmy.knowledge.config import parse
from tmy.knowledge.watch import _affected, _folders
from tmy.llm.knowledge import KnowledgeSpec
from tmy.testing import serving

WAIT = 20.0  # seconds a change may take to show (debounce, inotify), at most


async def eventually(check: Callable[[], Awaitable[bool]]) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not await check():
        assert loop.time() < deadline, "the change was not ingested"
        await asyncio.sleep(0.05)


@pytest.mark.slow
async def test_changed_files_are_re_ingested(tmp_path: Path, store_url: str) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "returns.md").write_text("Returns: any item within 30 days.")
    bases = parse({"faq": {"paths": [str(docs)], "include": ["*.md"]}})
    async with serving({"r.yaml": "rules: []"}, store=store_url,
                       sections={"knowledge": bases}) as daemon:  # fmt: skip
        services = daemon.engine.services
        kb = knowledge_of(services)

        async def sources(query: str) -> list[str]:
            return [p.source for p in await kb.search(services, KnowledgeSpec(("faq",)), query)]

        async def found(query: str, source: str) -> bool:
            return source in await sources(query)

        await eventually(lambda: found("return an item", "returns.md"))  # ingested at start
        async with httpx.AsyncClient(base_url=daemon.url) as client:
            health = (await client.get("/healthz")).json()
        assert health["knowledge"]["bases"]["faq"]["documents"] == 1
        await asyncio.sleep(0.3)  # the watcher is being set up beside the first ingestion
        (docs / "hours.md").write_text("We open at nine on weekdays.")
        await eventually(lambda: found("when do you open", "hours.md"))
        (docs / "returns.md").write_text("Returns: any item within 14 days, receipt needed.")
        await eventually(lambda: found("receipt", "returns.md"))
        (docs / "hours.md").unlink()

        async def gone() -> bool:
            return await sources("when do you open") == []

        await eventually(gone)
        (docs / "ignored.txt").write_text("We open at nine.")  # not included: never ingested
        await asyncio.sleep(0.5)
        assert await sources("open nine") == []


def test_affected_bases() -> None:
    roots = {"a": [Path("/x/docs")], "b": [Path("/x/other.md")]}
    assert _affected({"/x/docs/sub/f.md"}, roots) == ["a"]
    assert _affected({"/x/other.md", "/x/docs2/f.md"}, roots) == ["b"]


@pytest.mark.slow
async def test_a_folder_removed_and_made_again_is_watched_again(
    tmp_path: Path, store_url: str
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "returns.md").write_text("Returns: any item within 30 days.")
    bases = parse({"faq": {"paths": [str(docs)], "include": ["*.md"]}})
    async with serving({"r.yaml": "rules: []"}, store=store_url,
                       sections={"knowledge": bases}) as daemon:  # fmt: skip
        services = daemon.engine.services
        kb = knowledge_of(services)

        async def found(query: str, source: str) -> bool:
            passages = await kb.search(services, KnowledgeSpec(("faq",)), query)
            return source in [p.source for p in passages]

        await eventually(lambda: found("return an item", "returns.md"))
        await asyncio.sleep(0.3)  # the watcher is being set up beside the first ingestion
        shutil.rmtree(docs)  # a deploy swaps the folder for a new copy
        await asyncio.sleep(0.6)  # the removal is seen (its documents are kept: a missing root)
        docs.mkdir()
        (docs / "hours.md").write_text("We open at nine on weekdays.")
        await eventually(lambda: found("when do you open", "hours.md"))
        await asyncio.sleep(0.6)
        (docs / "later.md").write_text("Parking is free behind the shop.")
        await eventually(lambda: found("is parking free", "later.md"))


def test_a_missing_path_is_looked_for_not_watched_through_its_parent(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "terms.md").write_text("terms")
    roots = {"a": [tmp_path / "docs", tmp_path / "gone"], "b": [tmp_path / "terms.md"]}
    # the parent of a missing folder may be a home folder or /: thousands of watches
    assert _folders({"a": [tmp_path / "gone"]}) == []
    assert _folders(roots) == sorted([str(tmp_path / "docs"), str(tmp_path)])
