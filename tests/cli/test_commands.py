"""The operator commands on the command line (tmy.cli.commands): built from the registry."""

from __future__ import annotations

import asyncio
import re

import pytest

import tmy.cli
from tmy.command import Arg, Command, Invocation, Result, command_table
from tmy.extension import Extension
from tmy.testing import serving

PROGRAMS = ["serve", "chat", "ask", "check", "test"]


def _listed(capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    with pytest.raises(SystemExit):
        tmy.cli.main(["--help"])
    found = re.findall(r"^    (\w[\w-]*)(?: +(.*))?$", capsys.readouterr().out, re.MULTILINE)
    return {name: text.strip() for name, text in found}


@pytest.fixture(autouse=True)
def _wide_help(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # argparse wraps at the terminal width


def test_help_lists_every_program_and_every_command_of_the_registry(
    capsys: pytest.CaptureFixture[str],
) -> None:
    listed = _listed(capsys)
    table = command_table(tmy.cli.extensions())
    for name in PROGRAMS:
        assert listed.get(name), f"{name!r} has no help line: {listed}"
    for name, command in table.items():
        if "cli" in command.fronts:
            assert listed.get(name) == command.help, name
    assert {"vars", "cron", "reload", "trace", "explain", "rules", "on", "off"} <= set(listed)


def test_an_extension_command_is_a_subcommand_with_its_arguments(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def run(inv: Invocation) -> Result:
        a = inv.args
        assert inv.front == "cli" and inv.app is None and not inv.compact
        text = f"{a['what']} loud={a['loud']} times={a['times']} as {inv.who.user}"
        return Result(text, {"what": a["what"]}, exit_code=3 if a["what"] == "fail" else None)

    frob = Command(
        "frob",
        "frobnicate the widgets",
        run,
        needs="settings",
        json_help="print it as JSON",
        args=(
            Arg("what", "what to frobnicate"),
            Arg("loud", "shout", flag=True, takes_value=False, short="-l"),
            Arg("times", "how often", flag=True, default="1", metavar="N"),
            Arg("secret", "chat only", fronts=frozenset({"chat"}), required=False),
        ),
    )
    mine = (*tmy.cli.extensions(), Extension(name="frob-test", commands=(frob,)))
    monkeypatch.setattr(tmy.cli, "extensions", lambda: mine)
    assert _listed(capsys)["frob"] == "frobnicate the widgets"
    assert tmy.cli.main(["frob", "gears", "-l", "--times", "2", "--user", "ann"]) == 0
    assert capsys.readouterr().out == "gears loud=True times=2 as ann\n"
    assert tmy.cli.main(["frob", "gears", "--json"]) == 0
    assert capsys.readouterr().out == '{\n  "what": "gears"\n}\n'
    assert tmy.cli.main(["frob", "fail"]) == 3
    with pytest.raises(SystemExit) as exc:
        tmy.cli.main(["frob", "gears", "--secret", "x"])  # not a CLI argument
    assert exc.value.code == 2


def test_exclusive_flags_and_a_command_error_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    with pytest.raises(SystemExit) as exc:
        tmy.cli.main(["explain", "x", "--private", "--group"])
    assert exc.value.code == 2
    capsys.readouterr()
    (tmp_path / "r.yaml").write_text("variables:\n  n: {default: 0}\nrules: []\n")
    store = f"sqlite:///{tmp_path / 't.db'}"
    code = tmy.cli.main(["vars", "get", "nope", "--rules", str(tmp_path), "--store", store])
    assert code == 2
    assert "error: 'nope' is not a declared variable (declared: n)" in capsys.readouterr().err


async def test_a_daemon_command_reports_a_wrong_key_and_a_missing_daemon(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rules = {"r.yaml": "rules:\n  - {id: hi, triggers: [hi], steps: [{plugin: ADJUST}]}\n"}
    async with serving(rules, http_api_keys=("right",)) as daemon:
        argv = ["reload", "--url", daemon.url, "--key", "wrong"]
        assert await asyncio.to_thread(tmy.cli.main, argv) == 2
        assert capsys.readouterr().err == "error: invalid API key (--key, or TMY_API_KEY)\n"
        argv[-1] = "right"
        assert await asyncio.to_thread(tmy.cli.main, argv) == 0
        assert capsys.readouterr().out.startswith("reloaded: 1 rules from 1 files (")
    assert tmy.cli.main(["reload", "--url", daemon.url]) == 2
    assert capsys.readouterr().err.startswith(f"error: no daemon answered at {daemon.url}: ")


async def test_reload_posts_to_the_route_it_always_used(capsys: pytest.CaptureFixture[str]) -> None:
    """``run.py reload`` asks ``POST /admin/reload``, so it still reloads an older daemon."""
    from aiohttp import web

    seen: list[str] = []

    async def old_daemon(request: web.Request) -> web.Response:  # only the old route
        seen.append(request.path)
        return web.json_response(
            {"ok": True, "rules": 3, "files": 2, "ms": 1.5, "warnings": ["w"], "errors": []}
        )

    app = web.Application()
    app.router.add_post("/admin/reload", old_daemon)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        argv = ["reload", "--url", f"http://127.0.0.1:{port}"]
        assert await asyncio.to_thread(tmy.cli.main, argv) == 0
    finally:
        await runner.cleanup()
    assert seen == ["/admin/reload"]
    assert capsys.readouterr().out == "reloaded: 3 rules from 2 files (1.5 ms)\nwarning: w\n"
