"""tmy.adapters.replymedia: the upload's file name (Matrix and Discord name uploads alike).
The loader's guards are shown against a real server in test_discord_media."""

from __future__ import annotations

from pathlib import Path

import pytest

from tmy.adapters.discord_adapter.parts import MediaLoader as DiscordLoader
from tmy.adapters.matrix.compose import MediaLoader as MatrixLoader
from tmy.adapters.replymedia import file_name, read_local
from tmy.media import MediaError


def test_an_upload_keeps_its_sources_name_else_is_named_by_its_type() -> None:
    assert file_name("https://example.org/a/cat%20photo.jpg?x=1", "image/jpeg", "image") == (
        "cat photo.jpg"
    )
    assert file_name("media/report.pdf", "application/pdf", "file") == "report.pdf"
    assert file_name("data:image/png;base64,AAAA", "image/png", "image") == "image.png"
    assert file_name("https://example.org/download", "", "file") == "file.bin"
    assert len(file_name("https://example.org/" + "n" * 300 + ".txt", "", "file")) == 100


def test_each_platform_loads_at_most_its_own_upload_limit() -> None:
    assert DiscordLoader(None).limit == 10 * 1024 * 1024
    assert MatrixLoader(None).limit == 50 * 1024 * 1024
    assert MatrixLoader(None, 5).limit == 5


def test_read_local_takes_a_data_url_or_a_media_file_and_refuses_anything_else(
    tmp_path: Path,
) -> None:
    (tmp_path / "media").mkdir()
    (tmp_path / "media" / "note.txt").write_bytes(b"hello")
    found, name = read_local("data:image/png;base64,iVBORw0KGgo=", None, 1000, "image")
    assert name == "image.png" and found.data.startswith(b"\x89PNG")
    found, name = read_local("media/note.txt", tmp_path, 1000, "file")
    assert (found.data, name) == (b"hello", "note.txt")
    for source, rules in (("ftp://example.org/x", tmp_path), ("media/note.txt", None), ("", None)):
        with pytest.raises(MediaError):
            read_local(source, rules, 1000, "file")
