"""A tool's result as text: blocks mapped, structured content when there is no text, bounded."""

from __future__ import annotations

import base64
import json

import mcp_types as types
import pytest

from tmy import redact
from tmy.config.settings import Limits
from tmy.mcp.config import parse_mcp
from tmy.mcp.results import DEFAULT_MAX_RESULT_CHARS, CallResult, cut, size_of, to_result
from tmy.mcp.servers import Servers

PNG = base64.b64encode(b"\x89PNG" + b"x" * 1196).decode()  # 1,200 bytes


def result(*content, structured=None, is_error=False) -> types.CallToolResult:
    return types.CallToolResult(
        content=list(content), structured_content=structured, is_error=is_error
    )


def text(value: str) -> types.TextContent:
    return types.TextContent(type="text", text=value)


def test_text_blocks_are_joined() -> None:
    got = to_result(result(text("one"), text("two"), structured={"n": 1}))
    assert got == CallResult(
        text="one\ntwo",
        structured={"n": 1},
        is_error=False,
        content=({"type": "text", "text": "one"}, {"type": "text", "text": "two"}),
    )


def test_images_and_audio_become_placeholders_and_their_bytes_stay_out_of_the_record() -> None:
    image = types.ImageContent(type="image", data=PNG, mime_type="image/png")
    audio = types.AudioContent(
        type="audio", data=base64.b64encode(b"a" * 20).decode(), mime_type="audio/wav"
    )
    got = to_result(result(text("look:"), image, audio))
    assert got.text == "look:\n[image image/png, 1.2 kB]\n[audio audio/wav, 20 B]"
    assert got.content[1] == {
        "type": "image",
        "mimeType": "image/png",
        "data": "(1.2 kB of base64 left out)",
    }
    assert got.content[2]["data"] == base64.b64encode(b"a" * 20).decode()  # short ones are kept


def test_resources_and_links() -> None:
    embedded = types.EmbeddedResource(
        type="resource",
        resource=types.TextResourceContents(
            uri="file:///srv/a.txt", mime_type="text/plain", text="hello"
        ),
    )
    blob = types.EmbeddedResource(
        type="resource",
        resource=types.BlobResourceContents(
            uri="file:///srv/b.bin", mime_type="application/zip", blob=PNG
        ),
    )
    link = types.ResourceLink(type="resource_link", name="readme", uri="https://example.com/README")
    got = to_result(result(embedded, blob, link))
    assert got.text.splitlines() == [
        "[resource file:///srv/a.txt]",
        "hello",
        "[resource file:///srv/b.bin, application/zip, 1.2 kB]",
        "[resource link readme: https://example.com/README]",
    ]
    assert got.content[1]["resource"]["blob"] == "(1.2 kB of base64 left out)"


def test_without_text_the_structured_content_is_the_text() -> None:
    got = to_result(result(structured={"answer": 42, "unit": "件"}))
    assert got.text == '{"answer":42,"unit":"件"}'
    assert json.loads(got.text) == got.structured
    image = types.ImageContent(type="image", data=PNG, mime_type="image/png")
    assert to_result(result(image, structured=[1, 2])).text == "[1,2]\n[image image/png, 1.2 kB]"
    assert to_result(result()).text == ""


def test_a_tool_error_is_said() -> None:
    got = to_result(result(text("no such file"), is_error=True))
    assert (got.text, got.is_error) == ("no such file", True)


def test_results_are_bounded_with_the_cut_marker() -> None:
    got = to_result(result(text("x" * 120)), max_chars=100)
    assert got.text == "x" * 100 + "\n…(cut: 120 characters in all)"
    assert to_result(result(text("x" * 100)), max_chars=100).text == "x" * 100
    assert cut("abc", 0) == "abc"
    assert Limits().max_reply_chars == DEFAULT_MAX_RESULT_CHARS


def test_sizes() -> None:
    assert size_of(base64.b64encode(b"").decode()) == "0 B"
    assert size_of(base64.b64encode(b"x" * 999).decode()) == "999 B"
    assert size_of(base64.b64encode(b"x" * 2_500_000).decode()) == "2.5 MB"
    assert size_of("not base64!") in ("8 B", "6 B")


# -- configured secrets a tool says back --------------------------------------------------------


def test_a_registered_secret_is_masked_in_text_structured_content_and_blocks() -> None:
    redact.add("results-unit-secret-4417")
    got = to_result(
        result(
            text("token=results-unit-secret-4417"),
            structured={"token": "results-unit-secret-4417", "n": [1, "results-unit-secret-4417"]},
        )
    )
    assert got.text == "token=***"
    assert got.structured == {"token": "***", "n": [1, "***"]}
    assert got.content == ({"type": "text", "text": "token=***"},)
    cut_short = to_result(result(text("x" * 10 + "results-unit-secret-4417")), max_chars=20)
    assert "results-unit" not in cut_short.text  # masked before the cut, which could split it


@pytest.mark.slow
async def test_a_tool_echoing_a_configured_secret_gives_back_stars(
    toolbox_stdio, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``env: {SECRET_TOKEN: "${MY_SECRET}"}`` — the toolbox's reveal tool says the value back,
    and a failing tool repeats it in its error: neither reaches the step or the model."""
    monkeypatch.setenv("MY_SECRET", "results-env-secret-9902")
    config = toolbox_stdio.config
    config["env"].update(SECRET_TOKEN="${MY_SECRET}", TOOLBOX_REVEAL="1")
    async with Servers(parse_mcp({"servers": {"box": config}})) as s:
        await s.wait_listed(20)
        revealed = await s.call("box", "reveal", {"name": "SECRET_TOKEN"})
        failed = await s.call("box", "fail", {"message": "bad token=results-env-secret-9902"})
    assert revealed.text == "***"
    assert "results-env-secret-9902" not in repr(revealed)
    assert failed.is_error and failed.text.endswith("bad token=***")
    assert "results-env-secret-9902" not in repr(failed)
    assert [c["value"] for c in toolbox_stdio.calls() if c["tool"] == "reveal"] == [
        "results-env-secret-9902"
    ]  # the server was given the real value
