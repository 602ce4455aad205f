"""The knowledge extension: its provider plugged into the LLM runtime, an LLM step's knowledge:
end to end, hybrid search through a configured embeddings model on a loopback server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.knowledge.support import EmbeddingServer
from tests.support.llm_fake_provider import FakeProvider
from tmy.errors import ConfigError
from tmy.knowledge import KnowledgeBases, knowledge_of
from tmy.knowledge.config import parse
from tmy.llm.knowledge import KnowledgeSpec
from tmy.llm.runtime import runtime_of
from tmy.testing import Bot

RULES = """
rules:
  - id: ask
    triggers: ["ask *"]
    steps:
      - plugin: LLM
        knowledge: {use: [faq], top: 2}
"""
DOCS = {
    "returns.md": "Returns: you may return any item within 30 days of delivery for a refund.",
    "pets.md": "Our office cat is called Mimi and sleeps on the printer.",
    "zh.txt": "退货政策：收到商品后三十天内可以退货。",
}


def folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in DOCS.items():
        (docs / name).write_text(text)
    return docs


def llm(base_url: str) -> dict[str, Any]:
    return {
        "models": {
            "fake": {"base_url": base_url, "model": "fake"},
            "emb": {"base_url": base_url, "model": "emb"},
        },
        "default": "fake",
    }


async def test_an_llm_step_gets_the_passages_in_its_tail(
    provider: FakeProvider, tmp_path: Path
) -> None:
    bases = parse({"faq": {"paths": [str(folder(tmp_path))]}})
    async with Bot({"r.yaml": RULES}, llm=llm(provider.base_url),
                   sections={"knowledge": bases}) as bot:  # fmt: skip
        kb = knowledge_of(bot.engine.services)
        assert runtime_of(bot.engine.services).knowledge is kb
        assert list(kb.names()) == ["faq"]
        await kb.ingest("faq")
        reply = await bot.ask("ask how many days to return an item?")
        assert reply.error is None, reply.error
        sent = provider.seen("fake")[-1]["messages"]
        tail = sent[-1]["content"]
        assert "[1] returns.md (chars 0–73; base faq)" in tail
        assert "<knowledge>" not in sent[0]["content"]  # never in the stable prefix
        chosen = reply.steps[0].extra["knowledge"]["passages"]
        assert chosen[0]["why"]["lexical_rank"] == 1


async def test_hybrid_through_the_configured_embeddings_model(tmp_path: Path) -> None:
    docs = folder(tmp_path)
    async with EmbeddingServer() as server:
        bases = parse(
            {"faq": {"paths": [str(docs)],
                     "embeddings": {"model": "emb", "id": "hash", "min_similarity": 0.2}}}
        )  # fmt: skip
        async with Bot({"r.yaml": "rules: []"}, llm=llm(server.base_url),
                       sections={"knowledge": bases}) as bot:  # fmt: skip
            kb = knowledge_of(bot.engine.services)
            report = await kb.ingest("faq")
            assert len(report.added) == 3
            assert server.requests[0]["model"] == "hash"
            services = bot.engine.services
            found = await kb.search(services, KnowledgeSpec(("faq",)), "what is the kitty named")
            assert found[0].source == "pets.md" and found[0].why["vector_rank"] == 1
            server.fail = True  # the endpoint down: the search goes on lexically
            found = await kb.search(services, KnowledgeSpec(("faq",)), "return an item")
            assert found[0].source == "returns.md" and "vector_error" in found[0].why


async def test_an_unknown_embeddings_model_is_a_config_error(tmp_path: Path) -> None:
    bases = parse({"faq": {"paths": ["docs"], "embeddings": {"model": "nope"}}})
    bot = Bot({"r.yaml": "rules: []"}, sections={"knowledge": bases})
    with pytest.raises(ConfigError, match=r"'knowledge\.faq\.embeddings\.model' names unknown"):
        await bot.__aenter__()
    bot._tmp.cleanup()


async def test_an_unknown_base_is_an_error_naming_the_known_ones(tmp_path: Path) -> None:
    bases = parse({"faq": {"paths": [str(folder(tmp_path))]}})
    async with Bot({"r.yaml": "rules: []"}, sections={"knowledge": bases}) as bot:
        kb: KnowledgeBases = knowledge_of(bot.engine.services)
        with pytest.raises(Exception, match=r"no knowledge base named 'fq' \(did you mean 'faq'"):
            await kb.search(bot.engine.services, KnowledgeSpec(("fq",)), "x")
