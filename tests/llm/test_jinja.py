"""Jinja2 prompt templates name the file and line of every error, and the rule that uses them.

Real rules folders in tmp_path, loaded by :class:`tmy.testing.Bot` (the real
loader and engine), answered by the TESTONLY mock.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tmy.errors import TmyError
from tmy.testing import Bot

RULE = """
rules:
  - id: tr
    triggers: ["tr *"]
    steps:
      - {plugin: LLM, template: TEMPLATE, context: false}
"""


def write(folder: Path, template: str, source: str, rule_file: str = "r.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / template).write_text(source, encoding="utf-8")
    (folder / rule_file).write_text(RULE.replace("TEMPLATE", template), encoding="utf-8")
    return folder / template


async def test_a_syntax_error_stops_the_load_with_both_places(tmp_path: Path) -> None:
    path = write(tmp_path, "ask.j2", "Translate:\n{{ input | upper }\n")
    with pytest.raises(TmyError) as caught:
        async with Bot(tmp_path):
            pass
    text = str(caught.value)
    assert f"{path.resolve()}:2: unexpected '}}'" in text  # the template's file and line
    assert f"{tmp_path / 'r.yaml'}:6" in text  # the step that uses it


async def test_an_undefined_name_at_render_names_the_line_and_the_step(tmp_path: Path) -> None:
    path = write(tmp_path, "ask.j2", "For {{ USER }}:\n{{ input }}\nTone: {{ tone }}\n")
    async with Bot(tmp_path) as bot:
        reply = await bot.ask("tr bonjour")
    assert reply.error == (
        f"template {path.resolve()}:3: 'tone' is undefined "
        f"(used by {tmp_path / 'r.yaml'}:6, step tr/0)"
    )


async def test_a_runtime_error_in_an_include_names_the_included_line(tmp_path: Path) -> None:
    write(tmp_path, "ask.j2", "Header\n{% include 'part.j2' %}\n")
    (tmp_path / "part.j2").write_text("one\ntwo\n{{ 1 // 0 }}\n", encoding="utf-8")
    async with Bot(tmp_path) as bot:
        reply = await bot.ask("tr x")
    assert reply.error is not None
    assert reply.error.startswith(
        f"template {(tmp_path / 'part.j2').resolve()}:3: ZeroDivisionError: "
    )
    assert reply.error.endswith(f"(used by {tmp_path / 'r.yaml'}:6, step tr/0)")


async def test_a_sandbox_refusal_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "evil.j2", "ok\n{{ input.__class__.__mro__ }}\n")
    async with Bot(tmp_path) as bot:
        reply = await bot.ask("tr x")
    assert reply.error is not None
    assert reply.error.startswith(f"template {path.resolve()}:2: access to attribute '__class__'")


async def test_an_ambiguous_template_is_checked_at_its_first_render(tmp_path: Path) -> None:
    """Two rules folders with an ask.j2 each: the load cannot tell which one a step means,
    so the broken one is reported (file:line and step) when its step renders it."""
    broken = write(tmp_path / "a", "ask.j2", "x\n\n{% if %}\n")
    write(tmp_path / "b", "ask.j2", "fine {{ input }}\n", "other.yaml")
    (tmp_path / "b" / "other.yaml").write_text(
        RULE.replace("TEMPLATE", "ask.j2").replace('"tr *"', '"ok *"').replace("id: tr", "id: ok"),
        encoding="utf-8",
    )
    async with Bot(tmp_path) as bot:
        assert (await bot.say("ok hi")).endswith("You said: fine hi")
        reply = await bot.ask("tr x")
    assert reply.error is not None
    assert reply.error.startswith(f"template {broken}:3: Expected an expression")
    assert reply.error.endswith(f"(used by {tmp_path / 'a' / 'r.yaml'}:6, step tr/0)")


async def test_a_template_next_to_a_nested_rules_file_is_checked_at_load(tmp_path: Path) -> None:
    path = write(tmp_path / "chat", "ask.j2", "{% for x in input %}\n{{ x }}\n")
    with pytest.raises(TmyError) as caught:
        async with Bot(tmp_path):
            pass
    assert f"{path.resolve()}:2: Unexpected end of template" in str(caught.value)
