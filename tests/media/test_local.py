"""A reply's local files come only from ``media/`` in the rules directory: never the
rules YAML, a prompt template, or anything reached through ``..`` or a symlink."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.llm_fake_provider import PNG
from tmy import media
from tmy.media import MediaError


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    folder = tmp_path / "rules"
    (folder / "media" / "cats").mkdir(parents=True)
    (folder / "media" / "cats" / "tom.png").write_bytes(PNG)
    (folder / "bot.yaml").write_text("rules: []  # secrets live here")
    (folder / "prompts").mkdir()
    (folder / "prompts" / "system.j2").write_text("You are a secret system prompt")
    (tmp_path / "config.yaml").write_text("llm: {api_key: sk-secret}")
    return folder


def test_media_dir_is_inside_the_rules_dir_or_beside_a_rules_file(rules: Path) -> None:
    assert media.media_dir(rules) == rules / "media"
    assert media.media_dir(rules / "bot.yaml") == rules / "media"


def test_a_file_under_media_is_read(rules: Path) -> None:
    assert media.reply_file("media/cats/tom.png", rules, 1000) == media.Media(PNG, "image/png")
    assert media.reply_file(str(rules / "media/cats/tom.png"), rules, 1000).data == PNG
    # a rules path that is one file: media/ beside it
    assert media.reply_file("media/cats/tom.png", rules / "bot.yaml", 1000).data == PNG


@pytest.mark.parametrize(
    "source",
    [
        "bot.yaml",  # the rules themselves
        "prompts/system.j2",  # a prompt template
        "media/../bot.yaml",
        "media/cats/../../prompts/system.j2",
        "../config.yaml",
        "media",  # the directory itself
    ],
)
def test_rules_files_and_templates_are_refused_naming_the_media_dir(
    rules: Path, source: str
) -> None:
    with pytest.raises(MediaError) as refused:
        media.reply_file(source, rules, 1000)
    assert f"not in the media directory {rules / 'media'}" in str(refused.value)


def test_the_error_says_where_to_put_a_file(rules: Path) -> None:
    with pytest.raises(MediaError, match=r"put it there and write 'media/bot.yaml'"):
        media.reply_file("bot.yaml", rules, 1000)


def test_symlinks_out_of_media_are_refused(rules: Path, tmp_path: Path) -> None:
    (rules / "media" / "rules.yaml").symlink_to(rules / "bot.yaml")
    (rules / "media" / "up").symlink_to(tmp_path)
    for source in ("media/rules.yaml", "media/up/config.yaml", "media/up/rules/bot.yaml"):
        with pytest.raises(MediaError, match="not in the media directory"):
            media.reply_file(source, rules, 1000)


def test_a_symlink_inside_media_and_limits(rules: Path) -> None:
    (rules / "media" / "latest.png").symlink_to(rules / "media" / "cats" / "tom.png")
    assert media.reply_file("media/latest.png", rules, 1000).data == PNG
    with pytest.raises(MediaError, match=r"the limit is 10"):
        media.reply_file("media/cats/tom.png", rules, 10)
    with pytest.raises(MediaError, match="no such file"):
        media.reply_file("media/cats/none.png", rules, 1000)
