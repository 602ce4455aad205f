"""tmy.adapters.replymedia: the upload's file name (Matrix and Discord name uploads alike).
The loader's guards are shown against a real server in test_discord_media."""

from __future__ import annotations

from tmy.adapters.discord_adapter.parts import MediaLoader as DiscordLoader
from tmy.adapters.matrix.compose import MediaLoader as MatrixLoader
from tmy.adapters.replymedia import file_name


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
