"""knowledge.config: the knowledge: section parsed into frozen bases; bad keys named."""

from __future__ import annotations

from pathlib import Path

import pytest

from tmy.config import Settings
from tmy.errors import ConfigError
from tmy.knowledge.config import (
    DEFAULT_INCLUDE,
    ChunkConfig,
    KbEmbeddings,
    check_name,
    parse,
    roots_of,
)


def test_a_base_with_every_key() -> None:
    bases = parse(
        {
            "faq": {
                "paths": ["docs/faq/"],
                "include": ["*.md"],
                "chunk": {"chars": 500, "overlap": 50},
                "embeddings": {"model": "emb", "id": "bge-m3"},
                "watch": False,
            }
        }
    )
    faq = bases["faq"]
    assert faq.paths == ("docs/faq/",) and faq.include == ("*.md",)
    assert faq.chunk == ChunkConfig(500, 50) and faq.watch is False
    assert faq.embeddings == KbEmbeddings("emb", "bge-m3")
    assert faq.embeddings.identity == "emb/bge-m3"


def test_defaults() -> None:
    faq = parse({"faq": {"paths": ["a"]}})["faq"]
    assert faq.include == DEFAULT_INCLUDE and faq.chunk == ChunkConfig(800, 100)
    assert faq.embeddings is None and faq.watch is True
    assert parse({}) == {}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"faq": {"pathz": []}}, r"unknown key 'knowledge\.faq\.pathz' \(did you mean 'paths'"),
        ({"faq": {"paths": "docs"}}, r"'knowledge\.faq\.paths' has the wrong type"),
        ({"faq": {"paths": [""]}}, r"'knowledge\.faq\.paths\[0\]' must be a non-empty string"),
        ({"faq": {"chunk": {"chars": 50}}}, r"'knowledge\.faq\.chunk\.chars' must be 100 to"),
        ({"faq": {"chunk": {"chars": 200, "overlap": 150}}}, r"chunk\.overlap' must be at most"),
        ({"faq": {"embeddings": {"id": "x"}}}, r"'knowledge\.faq\.embeddings\.model' is required"),
        ({"a/b": {}}, r"'knowledge\.a/b': knowledge base name 'a/b' is not allowed"),
        ({"a{b}": {}}, r"name 'a\{b\}' is not allowed"),
        ({"faq": []}, r"'knowledge\.faq' must be a mapping"),
    ],
)
def test_bad_config_names_the_key(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse(raw)


def test_names() -> None:
    assert check_name("faq_2.zh-CN") == "faq_2.zh-CN"
    assert check_name("常见问题") == "常见问题"
    for bad in ("", "-x", "a b", "a}", "x" * 65):
        with pytest.raises(ValueError, match="not allowed"):
            check_name(bad)


def test_relative_paths_are_read_from_the_config_files_folder(tmp_path: Path) -> None:
    config = tmp_path / "conf" / "tmy.yaml"
    config.parent.mkdir()
    config.write_text("knowledge:\n  faq: {paths: [docs/faq, /abs/x]}\n")
    settings = Settings(source=str(config))
    faq = parse({"faq": {"paths": ["docs/faq", "/abs/x"]}})["faq"]
    assert roots_of(settings, faq) == [tmp_path / "conf" / "docs/faq", Path("/abs/x")]
    assert roots_of(Settings(), faq)[0] == Path.cwd() / "docs/faq"


def test_the_section_loads_from_the_config_file(tmp_path: Path) -> None:
    from tmy.config import load_settings
    from tmy.knowledge import EXTENSION

    config = tmp_path / "tmy.yaml"
    config.write_text("knowledge:\n  faq:\n    paths: [docs]\n    chunk: {chars: 50}\n")
    with pytest.raises(ConfigError, match=r"tmy\.yaml:\d+: .*knowledge\.faq\.chunk\.chars"):
        load_settings(str(config), env={}, extensions=[EXTENSION])
    config.write_text("knowledge:\n  faq:\n    paths: [docs]\n")
    settings = load_settings(str(config), env={}, extensions=[EXTENSION])
    assert settings.sections["knowledge"]["faq"].paths == ("docs",)
