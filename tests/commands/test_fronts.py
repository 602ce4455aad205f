"""Every operator command gives the same result on every front end (issue 20's "must show").

For each command of the app's table (``tmy.builtins.extensions()``: a command an
extension adds is covered without touching this file) and the same arguments:

* the CLI (``tmy.cli.main`` in-process) prints what ``POST /admin/commands/{name}``
  with ``{"args": …}`` answers as ``text`` (both the full rendering), and its
  ``--json`` prints that answer's ``data``;
* ``.tmy NAME …`` in chat (through the engine of a serving daemon) answers what
  ``{"argv": "…"}`` answers as ``text`` (both the chat rendering);
* both HTTP forms give the same ``data`` and ``ok``.

Values that differ between two runs by nature (milliseconds, explain's fresh trace
id, a reload's reason, the clock in an LLM prompt) are masked before comparing.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tmy import cli
from tmy.builtins import extensions
from tmy.command import ALL_FRONTS, Command, command_table
from tmy.config import load_settings
from tmy.testing import serving

TABLE = command_table(extensions())
KEY = "k-fronts-test"
RULES = """
variables:
  counter: {scope: user, default: 0}
rules:
  - id: count
    triggers: [count]
    steps:
      - {id: add, plugin: ADJUST, input: "?= counter + 1", save: counter}
      - {plugin: ADJUST, input: "count={counter}"}
  - id: ask
    triggers: ["ask *"]
    steps: [{plugin: LLM}]
  - id: tick
    schedule: {cron: "0 9 * * *"}
    steps: [{plugin: ADJUST, input: tick}]
"""

# The arguments each command is run with, by name (``chat``: the line after ``.tmy NAME``
# when it is not the positionals of ``args`` in order). A command not listed runs with none.
CASES: dict[str, list[dict[str, Any]]] = {
    "vars": [
        {"args": {"action": "set", "name": "counter", "value": "5"}},
        {"args": {"action": "get", "name": "counter"}},
        {"args": {"action": "list"}},
    ],
    "rules": [{"args": {}}, {"args": {"id": "count"}}],
    "trace": [{"args": {"trace_id": "<trace>"}}],
    "explain": [{"args": {"text": "count"}}],
    "ctx": [{"args": {"text": "ask hello"}}],
    "memory": [{"args": {"action": "list"}, "chat": ""}],
    "cron": [
        {"args": {}},
        {
            "args": {"action": "fire", "rule": "tick", "dry_run": True},
            "chat": "fire tick --dry-run",
        },
    ],
}
VOLATILE_KEYS = {"ms", "trace_id", "reason"}
VOLATILE_TEXT = [
    (re.compile(r"\d+(\.\d+)? ms\b"), "N ms"),
    (re.compile(r"explain-[0-9a-f]{12}"), "explain-ID"),
    # the LLM prompt's clock ({now}): two fronts a second apart differ in the seconds
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?"), "TIME"),
]


def _masked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: "*" if k in VOLATILE_KEYS else _masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    if isinstance(value, str):
        return _text(value)
    return value


def _text(text: str) -> str:
    for pattern, stand_in in VOLATILE_TEXT:
        text = pattern.sub(stand_in, text)
    return text.strip()


def _cases() -> list[Any]:
    """Every command reachable from every front end (a CLI-only one, such as ``restore``,
    has nothing to compare)."""
    out = []
    for name, command in TABLE.items():
        if command.fronts != ALL_FRONTS:
            continue
        for n, case in enumerate(CASES.get(name, [{"args": {}}])):
            out.append(pytest.param(command, case, id=f"{name}-{n}"))
    return out


def _filled(args: dict[str, Any], trace_id: str) -> dict[str, Any]:
    return {k: trace_id if v == "<trace>" else v for k, v in args.items()}


def _cli_argv(command: Command, args: dict[str, Any]) -> list[str]:
    """``args`` as typed on the command line: positionals in order, then flags."""
    argv = [command.name]
    for arg in command.args_for("cli"):
        value = args.get(arg.name)
        if value is None or value is False:
            continue
        if not arg.flag:
            argv.append(str(value))
        elif value is True:
            argv.append(arg.option)
        else:
            argv += [arg.option, str(value)]
    return argv


def _chat_line(command: Command, case: dict[str, Any], args: dict[str, Any]) -> str:
    if "chat" in case:
        return case["chat"]
    words = [str(args[a.name]) for a in command.args_for("chat") if args.get(a.name) is not None]
    return " ".join(words)


@pytest.fixture
def config(tmp_path: Path, log_file: Path) -> Path:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "r.yaml").write_text(RULES, encoding="utf-8")
    path = tmp_path / "tmy.yaml"
    path.write_text(
        f"rules: rules\nstore: sqlite:///{tmp_path / 'tmy.db'}\n"
        f"log: {{file: {log_file}}}\nadmins: ['test:root']\n",
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(("command", "case"), _cases())
async def test_every_front_end_gives_the_same_result(
    command: Command, case: dict[str, Any], config: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    for name in [k for k in os.environ if k.startswith("TMY_")]:
        monkeypatch.delenv(name)
    settings = load_settings(
        config,
        env={},
        extensions=extensions(),
        http_listen="127.0.0.1:0",
        http_api_keys=[KEY],
        console=False,
        watch=False,
    )
    async with serving(settings=settings) as daemon:
        trace_id = (await daemon.push("count", user="root")).trace_id
        args = _filled(case["args"], trace_id)
        who = {"user": "root", "platform": "test"}

        async def post(body: dict[str, Any]) -> dict[str, Any]:
            async with httpx.AsyncClient(base_url=daemon.url, timeout=60) as client:
                response = await client.post(
                    f"/admin/commands/{command.name}",
                    json={**body, **who},
                    headers={"Authorization": f"Bearer {KEY}"},
                )
            assert response.status_code == 200, response.text
            return response.json()

        full = await post({"args": args})
        line = _chat_line(command, case, args)
        short = await post({"argv": line})
        chat = (await daemon.push(f".tmy {command.name} {line}".strip(), user="root")).text

        argv = [*_cli_argv(command, args), "--config", str(config)]
        argv += ["--user", who["user"], "--platform", who["platform"]]
        if command.needs == "daemon":
            argv += ["--url", daemon.url, "--key", KEY]
        capsys.readouterr()
        code = await asyncio.to_thread(cli.main, argv)
        out, err = capsys.readouterr()
        if command.json_help:
            json_code = await asyncio.to_thread(cli.main, [*argv, "--json"])
            printed = capsys.readouterr().out

    assert full["command"] == short["command"] == command.name
    assert full["text"] and chat, "every command says something"
    assert _text(chat) == _text(short["text"])
    assert _text(out or err) == _text(full["text"])
    # these cases' commands set no exit status of their own (explain/ctx may: 1 when the
    # dry run fails), so the CLI exits 0 exactly when HTTP says ok
    assert code == (0 if full["ok"] else 1), (code, full["text"])
    assert full["ok"] == short["ok"]
    if "chat" not in case:  # the same arguments on both forms: the same data
        assert _masked(short["data"]) == _masked(full["data"])
    if command.json_help:
        assert json_code == code
        assert _masked(json.loads(printed)) == _masked(full["data"])
