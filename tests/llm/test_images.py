"""Pictures in an LLM step (``images:``, ``vision: true``): real httpx to a loopback fake
provider, a loopback image host that wants a token, and messages whose platform
(``message.api``) says where their pictures live."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.llm_fake_provider import PNG, FakeProvider, ImageServer
from tests.support.llm_helpers import on, rules
from tmy.errors import RuleError, TmyError
from tmy.message import Attachment
from tmy.testing import Bot

PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()
LOCAL = ["127.0.0.1"]  # limits.media_private_hosts: the loopback image host may be downloaded


class FakeApi:
    """A platform as a run sees it: where a picture is downloaded, with which headers."""

    def __init__(self, url: str = "", headers: dict[str, str] | None = None) -> None:
        self.url = url
        self.headers = headers or {}
        self.asked: list[Attachment] = []

    async def media_source(self, attachment: Any) -> tuple[str, dict[str, str]]:
        self.asked.append(attachment)
        if not self.url:
            raise TmyError("the platform lost that file")
        return self.url, self.headers

    async def quoted(self, message: Any) -> dict[str, Any] | None:
        return None


@pytest.fixture
async def images() -> AsyncIterator[ImageServer]:
    async with ImageServer(size=3000) as server:
        yield server


def parts(provider: FakeProvider, n: int = 0) -> list[dict[str, Any]]:
    """The content parts of the last user message of request ``n``."""
    content = provider.seen()[n]["messages"][-1]["content"]
    assert isinstance(content, list), content
    return content


def image_urls(provider: FakeProvider, n: int = 0) -> list[str]:
    return [p["image_url"]["url"] for p in parts(provider, n) if p["type"] == "image_url"]


VISION = rules("      - {plugin: LLM, vision: true}\n")


async def test_an_image_needing_a_header_reaches_the_provider_as_a_data_url(
    provider: FakeProvider, images: ImageServer
) -> None:
    """The must-show: an image message → an image_url part; the platform's URL needs
    an Authorization header, so tmy downloads it and sends a data URL."""
    api = FakeApi(images.url("/private/p1.png"), {"Authorization": "Bearer img-secret"})
    photo = Attachment("image", url="https://platform.example/p1", file_id="p1", inline=True)
    async with Bot({"r.yaml": VISION}, llm=on(provider), media_private_hosts=LOCAL) as bot:
        reply = await bot.ask("t what is this?", attachments=(photo,), api=api)
    assert reply.error is None, reply.error
    (text, picture) = parts(provider)
    assert text["type"] == "text" and text["text"].endswith("what is this?")
    assert picture == {"type": "image_url", "image_url": {"url": PNG_URL}}
    assert api.asked == [photo]
    assert images.hits[-1]["headers"]["Authorization"] == "Bearer img-secret"
    assert reply.steps[0].extra["llm"]["images"] == 1


async def test_a_public_image_url_passes_as_it_is(provider: FakeProvider) -> None:
    photo = Attachment("image", url="https://cdn.example/cat.jpg", file_id="c")
    voice = Attachment("voice", url="https://cdn.example/hello.ogg")
    async with Bot({"r.yaml": VISION}, llm=on(provider)) as bot:
        reply = await bot.ask("t look", attachments=(photo, voice), api=FakeApi())
    assert reply.error is None, reply.error
    assert image_urls(provider) == ["https://cdn.example/cat.jpg"]  # the voice is no picture


async def test_a_platform_source_without_headers_is_handed_on(
    provider: FakeProvider, images: ImageServer
) -> None:
    """No URL of its own (a file id): the platform names a public one, which passes as is."""
    api = FakeApi(images.url("/public/f.png"))
    photo = Attachment("image", file_id="f")
    async with Bot({"r.yaml": VISION}, llm=on(provider)) as bot:
        assert (await bot.ask("t look", attachments=(photo,), api=api)).error is None
    assert image_urls(provider) == [images.url("/public/f.png")]
    assert images.hits == []  # nothing downloaded


async def test_images_option_takes_urls_data_urls_maps_and_lists(
    provider: FakeProvider, images: ImageServer
) -> None:
    steps = (
        "      - plugin: LLM\n"
        "        images:\n"
        "          - https://cdn.example/a.png\n"
        f"          - {PNG_URL}\n"
        "          - {kind: image, url: '', file_id: p1}\n"
        "          - {url: 'https://cdn.example/hand-made.png'}\n"
    )
    api = FakeApi(images.url("/private/p1.png"), {"Authorization": "Bearer img-secret"})
    photo = Attachment("image", file_id="p1", inline=True)
    async with Bot({"r.yaml": rules(steps)}, llm=on(provider), media_private_hosts=LOCAL) as bot:
        reply = await bot.ask("t four", attachments=(photo,), api=api)
    assert reply.error is None, reply.error
    assert image_urls(provider) == [
        "https://cdn.example/a.png",
        PNG_URL,
        PNG_URL,
        "https://cdn.example/hand-made.png",
    ]


async def test_images_from_a_template_one_url(provider: FakeProvider) -> None:
    steps = (
        "      - {plugin: ADJUST, input: 'https://cdn.example/{QUESTION}.png', save: pic}\n"
        "      - {plugin: LLM, input: 'describe', images: '{pic}'}\n"
    )
    async with Bot({"r.yaml": rules(steps, extra="variables:\n  pic: {default: ''}\n")},
                   llm=on(provider)) as bot:  # fmt: skip
        reply = await bot.ask("t dog")
    assert reply.error is None, reply.error
    assert image_urls(provider) == ["https://cdn.example/dog.png"]


@pytest.mark.parametrize(
    ("images_value", "attachments", "error"),
    [
        ("'{QUESTION}'", (), "images: picture 1: 'x' is not an http(s) URL"),
        ("'data:image/png;base64,@@'", (), "picture 1: the data: URL is not valid base64"),
        ("['https://x/1', 'https://x/2']", (), ""),  # within llm.max_images
        (
            "['https://x/1', 'https://x/2', 'https://x/3']",
            (),
            "images: 3 pictures, more than llm.max_images (2)",
        ),
        (
            "{kind: image, file_id: gone}",
            (Attachment("image", file_id="gone", inline=True),),
            "images: picture 1: the platform lost that file",
        ),
    ],
)
async def test_bad_pictures_are_clear_step_errors(
    provider: FakeProvider, images_value: str, attachments: tuple[Attachment, ...], error: str
) -> None:
    steps = f"      - {{plugin: LLM, images: {images_value}}}\n"
    async with Bot({"r.yaml": rules(steps)}, llm=on(provider, max_images=2)) as bot:
        reply = await bot.ask("t x", attachments=attachments, api=FakeApi())
    if not error:
        assert reply.error is None, reply.error
        return
    assert reply.error is not None and error in reply.error
    assert provider.seen() == []  # nothing was sent


async def test_a_download_over_the_limit_is_refused(
    provider: FakeProvider, images: ImageServer
) -> None:
    api = FakeApi(images.url("/big"))
    photo = Attachment("image", file_id="big", inline=True)
    async with Bot(
        {"r.yaml": VISION}, llm=on(provider, max_image_bytes=2000), media_private_hosts=LOCAL
    ) as bot:
        reply = await bot.ask("t big", attachments=(photo,), api=api)
    assert reply.error is not None
    assert "is larger than 2000 bytes; stopped reading" in reply.error
    assert provider.seen() == []


async def test_an_inline_picture_without_a_platform_is_an_error(provider: FakeProvider) -> None:
    photo = Attachment("image", url="https://platform.example/x", file_id="x", inline=True)
    async with Bot({"r.yaml": VISION}, llm=on(provider)) as bot:
        reply = await bot.ask("t x", attachments=(photo,))
    assert reply.error is not None and "must be downloaded through its platform" in reply.error


async def test_a_model_without_vision_is_a_check_error_naming_rule_step_and_model(
    provider: FakeProvider,
) -> None:
    config = on(provider)
    config["models"]["fake"]["vision"] = False
    for step in (
        "{plugin: LLM, vision: true}",
        "{plugin: LLM, images: 'https://x/1.png'}",
        "{plugin: LLM, images: '{IMAGES}'}",  # a templated images: is checked at load too
    ):
        with pytest.raises(RuleError) as refused:
            async with Bot({"r.yaml": rules(f"      - {step}\n")}, llm=config):
                pass
        assert str(refused.value) == (
            "r.yaml:7: rule 't' step 0: the step sends pictures (images:/vision:) to model "
            "'fake', whose config says it takes none (llm.models.fake.vision: false)"
        )
    # a step that sends none loads fine on that model
    async with Bot({"r.yaml": rules("      - {plugin: LLM}\n")}, llm=config) as bot:
        assert (await bot.ask("t hi")).error is None


async def test_a_constant_that_is_no_url_is_a_load_error() -> None:
    with pytest.raises(RuleError, match=r"images: 'cat.png' is not an http\(s\) URL"):
        async with Bot({"r.yaml": rules("      - {plugin: LLM, images: [cat.png]}\n")}):
            pass


async def test_a_tool_rules_llm_step_does_not_stream_to_the_user() -> None:
    class Sink:
        def __init__(self) -> None:
            self.pieces: list[str] = []

        async def delta(self, text: str, *, chunks: bool = False) -> None:
            self.pieces.append(text)

    text = """
rules:
  - id: t
    triggers: ["t *"]
    steps:
      - {plugin: LLM, tools: [helper], stream: true}
  - id: helper
    tool: {description: "helps"}
    steps:
      - {plugin: LLM, input: "MOCK:RESPONSE:inner words here", stream: true}
"""
    sink = Sink()
    async with Bot({"r.yaml": text}) as bot:
        said = await bot.say("t MOCK:TOOL:helper:{}", stream=sink)
    assert "inner words here" in said  # the tool's answer reached the model
    assert "".join(sink.pieces) == said  # and only the step's own answer was streamed


async def test_the_mock_says_how_many_pictures_it_got() -> None:
    two = (
        Attachment("image", url="https://cdn.example/1.png"),
        Attachment("image", url="https://cdn.example/2.png"),
    )
    async with Bot({"r.yaml": VISION}) as bot:
        assert await bot.say("t MOCK:IMAGES", attachments=two) == "2 images"
        assert await bot.say("t MOCK:IMAGES", attachments=two[:1]) == "1 image"
        assert await bot.say("t MOCK:IMAGES") == "0 images"
        said = await bot.say("t what is it?", attachments=two)
        assert said == "[TESTONLY mock · 0 earlier turns · 2 images] You said: what is it?"
        assert await bot.say("t MOCK:RESPONSE:a cat", attachments=two) == "a cat"


async def test_images_from_the_messages_images_local(
    provider: FakeProvider, images: ImageServer
) -> None:
    """``images: "{IMAGES}"``: the engine's list of image attachment maps, each matched
    back to its attachment (so the inline one is downloaded with the platform's header)."""
    api = FakeApi(images.url("/private/p1.png"), {"Authorization": "Bearer img-secret"})
    inline = Attachment("image", file_id="p1", inline=True)
    public = Attachment("image", url="https://cdn.example/b.png")
    rule = rules('      - {plugin: LLM, images: "{IMAGES}"}\n')
    async with Bot({"r.yaml": rule}, llm=on(provider), media_private_hosts=LOCAL) as bot:
        reply = await bot.ask("t both", attachments=(inline, public), api=api)
        assert reply.error is None, reply.error
        assert image_urls(provider) == [PNG_URL, "https://cdn.example/b.png"]
        assert (await bot.ask("t none")).error is None  # IMAGES is []: a plain question
        assert isinstance(provider.seen()[-1]["messages"][-1]["content"], str)


def test_ctx_shows_a_question_with_pictures_as_its_text_and_a_count() -> None:
    from tmy.llm.inspect import _parts

    body = {
        "messages": [
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is it?"},
                    {"type": "image_url", "image_url": {"url": PNG_URL}},
                    {"type": "image_url", "image_url": {"url": "https://cdn.example/x.png"}},
                ],
            },
        ]
    }
    assert _parts(body) == ["[system] be brief", "[user] what is it? [+ 2 pictures]"]


def test_the_check_knows_computed_images_when_the_loader_names_them(
    provider: FakeProvider,
) -> None:
    """``images: "{IMAGES}"`` is no constant: a loader that names computed options lets the
    check refuse it for a model without vision (and leaves a computed model alone)."""
    from tmy.config.llm import load_config
    from tmy.llm.executor import make_check

    config = on(provider)
    config["models"]["fake"]["vision"] = False
    check = make_check(load_config(config, env={}))
    check({"model": "TESTONLY"}, frozenset({"images"}))  # the mock takes pictures
    with pytest.raises(ValueError, match=r"llm.models.fake.vision: false"):
        check({}, frozenset({"images"}))  # fake is the default model
    check({}, frozenset({"images", "model"}))  # a computed model: checked when it runs
    check({"model": "fake"})  # no pictures
