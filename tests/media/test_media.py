"""tmy.media against a real loopback image host and real files: downloads under a
limit (with the platform's headers), data: URLs, and reply sources confined to
``media/`` in the rules directory. The image host is on 127.0.0.1, so these
downloads name it in ``private_hosts`` (limits.media_private_hosts); the refusal
itself is tests/media/test_hosts.py's."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.support.llm_fake_provider import PNG, ImageServer
from tmy import media
from tmy.http_client import new_http_client
from tmy.media import Media, MediaError

LOCAL = ("127.0.0.1",)  # the loopback image host, allowed as limits.media_private_hosts does


@pytest.fixture
async def images() -> AsyncIterator[ImageServer]:
    async with ImageServer(size=5000) as server:
        yield server


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    client = new_http_client()
    try:
        yield client
    finally:
        await client.aclose()


async def test_download_reads_the_body_and_its_type(images, http) -> None:
    got = await media.download(http, images.url("/public/cat.png"), None, 1000, private_hosts=LOCAL)
    assert got == Media(PNG, "image/png")


async def test_download_sends_the_platforms_headers(images, http) -> None:
    url = images.url("/private/cat.png")
    with pytest.raises(MediaError, match=r"private/cat.png failed: HTTP 401"):
        await media.download(http, url, {}, 1000, private_hosts=LOCAL)
    got = await media.download(
        http, url, {"Authorization": "Bearer img-secret"}, 1000, private_hosts=LOCAL
    )
    assert got.data == PNG
    assert images.hits[-1]["headers"]["Authorization"] == "Bearer img-secret"


async def test_download_stops_at_the_limit_with_a_clear_error(images, http) -> None:
    with pytest.raises(MediaError, match=r"/big is larger than 4999 bytes; stopped reading"):
        await media.download(http, images.url("/big"), None, 4999, private_hosts=LOCAL)
    assert (
        len((await media.download(http, images.url("/big"), None, 5000, private_hosts=LOCAL)).data)
        == 5000
    )


async def test_a_compressed_body_counts_what_it_inflates_to(images, http) -> None:
    with pytest.raises(MediaError, match="larger than 1000 bytes"):
        await media.download(http, images.url("/gzip"), None, 1000, private_hosts=LOCAL)


async def test_download_errors_name_the_url_without_its_query(http) -> None:
    with pytest.raises(MediaError) as refused:
        await media.download(
            http, "http://127.0.0.1:9/x.png?token=SECRET", None, 10, private_hosts=LOCAL
        )
    assert "127.0.0.1:9/x.png" in str(refused.value) and "SECRET" not in str(refused.value)
    with pytest.raises(MediaError, match="only http"):
        await media.download(http, "file:///etc/passwd", None, 10, private_hosts=LOCAL)


def test_data_url_round_trip_and_limits() -> None:
    url = media.data_url(Media(PNG, "image/png"))
    assert url == "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert media.parse_data_url(url, 1000) == Media(PNG, "image/png")
    # no type given: told by the bytes
    bare = "data:;base64," + base64.b64encode(PNG).decode()
    assert media.parse_data_url(bare, 1000).mime == "image/png"
    with pytest.raises(MediaError, match="more than 10 bytes"):
        media.parse_data_url(url, 10)
    with pytest.raises(MediaError, match="not valid base64"):
        media.parse_data_url("data:image/png;base64,@@@@", 100)
    with pytest.raises(MediaError, match="not a data: URL"):
        media.parse_data_url("data:image/png", 100)
    assert media.parse_data_url("data:text/plain,a%20b", 100) == Media(b"a b", "text/plain")


async def test_load_takes_urls_data_urls_and_files_under_the_media_dir(
    images, http, tmp_path: Path
) -> None:
    rules = tmp_path / "rules"
    (rules / "media" / "img").mkdir(parents=True)
    (rules / "media" / "img" / "logo.png").write_bytes(PNG)
    assert (await media.load("media/img/logo.png", http, 1000, rules)).mime == "image/png"
    full = str(rules / "media/img/logo.png")
    assert (await media.load(full, http, 1000, rules)).data == PNG
    remote = await media.load(images.url("/public/a.png"), http, 1000, rules, private_hosts=LOCAL)
    assert remote.data == PNG
    inline = media.data_url(Media(PNG, "image/png"))
    assert (await media.load(inline, http, 1000, rules)).data == PNG
    with pytest.raises(MediaError, match=r"bytes \(the limit is 10\)"):
        await media.load("media/img/logo.png", http, 10, rules)
    with pytest.raises(MediaError, match="no such file"):
        await media.load("media/img/none.png", http, 1000, rules)
    with pytest.raises(MediaError, match="only http"):
        await media.load("ftp://example.com/a.png", http, 1000, rules)


async def test_load_refuses_anything_outside_the_media_dir(http, tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    (rules / "media").mkdir(parents=True)
    secret = tmp_path / "secret.txt"
    secret.write_text("token")
    (rules / "media" / "link.txt").symlink_to(secret)
    (rules / "media" / "dir").symlink_to(tmp_path)
    for source in (
        "../secret.txt",
        str(secret),
        "media/link.txt",
        "media/dir/secret.txt",
        "media/img/../../../secret.txt",
    ):
        with pytest.raises(MediaError, match="not in the media directory"):
            await media.load(source, http, 1000, rules)
