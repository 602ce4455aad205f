"""Where Slack's bot token may go when a file is downloaded (``Message.api.media_source``)."""

from __future__ import annotations

import pytest

from tests.support.slack_fake import BOT_TOKEN
from tmy.adapters.slack.media import SlackApi
from tmy.message import Attachment, Message

BEARER = {"Authorization": f"Bearer {BOT_TOKEN}"}


async def _no_quote(message: Message) -> None:
    return None


@pytest.mark.parametrize(
    "url",
    [
        "https://files.slack.com/files-pri/T0-F0/download/a.png",
        "https://files.slack-gov.com/files-pri/T0-F0/a.png",
        "https://slack.com/files/a.png",
    ],
)
async def test_slacks_own_file_hosts_get_the_token(url: str) -> None:
    api = SlackApi(BOT_TOKEN, "https://slack.com/api/", _no_quote)
    assert await api.media_source(Attachment("image", url=url)) == (url, BEARER)


@pytest.mark.parametrize(
    "url",
    [
        "https://docs.google.com/document/d/1/edit",  # a remote file's external_url
        "http://files.slack.com/files-pri/T0-F0/a.png",  # not https
        "https://files.slack.com.evil.example/a.png",
        "https://evil.example/files.slack.com/a.png",
        "https://files.slack.com@evil.example/a.png",
        "https://evilslack.com/a.png",
        "https://[::1/a.png",
    ],
)
async def test_other_hosts_get_no_token(url: str) -> None:
    api = SlackApi(BOT_TOKEN, "https://slack.com/api/", _no_quote)
    assert await api.media_source(Attachment("file", url=url)) == (url, {})


async def test_a_configured_api_base_is_trusted_by_its_whole_origin() -> None:
    api = SlackApi(BOT_TOKEN, "http://127.0.0.1:8080/api/", _no_quote)
    same = "http://127.0.0.1:8080/files/F1"
    assert await api.media_source(Attachment("image", url=same)) == (same, BEARER)
    for other in ("http://127.0.0.1:9090/files/F1", "https://127.0.0.1:8080/files/F1"):
        assert await api.media_source(Attachment("image", url=other)) == (other, {})
