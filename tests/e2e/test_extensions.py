"""A third-party extension, installed as a package, plugs into check, the CLI and ``.tmy``.

The test writes what ``pip install tmy-weather`` would leave in site-packages —
a module ``tmy_weather`` and a ``tmy_weather-0.1.dist-info/`` whose
``entry_points.txt`` declares ``[tmy.extensions] weather = tmy_weather:EXTENSION``
— into a temporary folder put on ``PYTHONPATH`` (no network, no pip). The
extension adds an executor (``WEATHER``), a rule key (``forecast:``) and a
command (``weather``); all three then work without any change to ``tmy/``: in
``run.py check``, on the CLI (and its ``--help``), in ``.tmy`` chat and on the HTTP
admin API.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from tmy.testing import Bot, serving

REPO = Path(__file__).resolve().parents[2]

PACKAGE = '''
"""tmy-weather: the weather, as a tmy extension (a test fixture)."""

from typing import Any

from tmy import Arg, Command, ExecutorSpec, Extension, Invocation, Option, Result, RuleKey


async def weather(value: str, cfg: dict[str, Any], ctx: Any) -> str:
    return f"{cfg['sky']} in {value}"


def executors(settings: Any) -> list[ExecutorSpec]:
    return [ExecutorSpec("WEATHER", weather, {"sky": Option(str, default="sunny")}, takes=str)]


def forecast(raw: Any) -> str:
    if not isinstance(raw, str) or not raw:
        raise ValueError("must be a city name")
    return raw


async def report(inv: Invocation) -> Result:
    city = inv.args["city"]
    return Result(f"weather in {city}: sunny", {"city": city, "sky": "sunny"})


EXTENSION = Extension(
    name="weather",
    executors=executors,
    rule_keys={"forecast": RuleKey(forecast)},
    commands=(
        Command(
            "weather",
            "the weather in a city",
            report,
            args=(Arg("city", help="a city"),),
            needs="settings",
            usage="CITY",
        ),
    ),
)
'''

RULES = """
rules:
  - id: sky
    forecast: Paris
    triggers: [weather]
    steps:
      - {plugin: WEATHER, input: Paris, sky: cloudy}
"""


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A folder holding the package as pip would install it."""
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "tmy_weather.py").write_text(PACKAGE)
    info = folder / "tmy_weather-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tmy-weather\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[tmy.extensions]\nweather = tmy_weather:EXTENSION\n")
    return folder


def _rules(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "rules"
    folder.mkdir(exist_ok=True)
    (folder / "r.yaml").write_text(textwrap.dedent(text))
    return folder


def run_py(*args: str, site: Path | None, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMY_", "PYTHONPATH"))}
    if site is not None:
        env["PYTHONPATH"] = str(site)
    store = f"sqlite:///{tmp_path / 'tmy.db'}"
    return subprocess.run(
        [sys.executable, "run.py", "--store", store, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow  # run.py processes
def test_check_knows_the_extensions_executor_and_rule_key(site: Path, tmp_path: Path) -> None:
    rules = _rules(tmp_path, RULES)
    done = run_py("check", str(rules), site=site, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok: 1 rules")
    # without the package installed the same rules are refused, naming the key and executor
    bare = run_py("check", str(rules), site=None, tmp_path=tmp_path)
    assert bare.returncode == 1
    assert "unknown rule key 'forecast'" in bare.stderr
    # and a key nobody added is still refused with the package installed
    typo = _rules(tmp_path, RULES.replace("forecast:", "forcast:"))
    wrong = run_py("check", str(typo), site=site, tmp_path=tmp_path)
    assert wrong.returncode == 1
    assert "unknown rule key 'forcast'" in wrong.stderr


@pytest.mark.slow  # run.py processes
def test_the_cli_runs_and_lists_the_extensions_command(site: Path, tmp_path: Path) -> None:
    listed = run_py("--help", site=site, tmp_path=tmp_path)
    assert listed.returncode == 0 and "the weather in a city" in listed.stdout
    done = run_py("weather", "Paris", site=site, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "weather in Paris: sunny"
    assert "weather" not in run_py("--help", site=None, tmp_path=tmp_path).stdout.split()


async def test_chat_runs_the_extensions_command_and_rule(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(site))  # what PYTHONPATH does for a process
    async with Bot({"r.yaml": RULES}, admins=["test:root"]) as bot:
        assert "weather" in bot.app.commands
        assert await bot.say(".tmy weather Paris", user="root") == "weather in Paris: sunny"
        assert await bot.say("weather") == "cloudy in Paris"
        assert bot.app.rulebook.rules[0].extras["forecast"] == "Paris"
    monkeypatch.delitem(sys.modules, "tmy_weather", raising=False)


async def test_the_http_admin_api_runs_the_extensions_command(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(site))
    async with (
        serving({"r.yaml": RULES}, http_api_keys=("k-weather",)) as daemon,
        httpx.AsyncClient(base_url=daemon.url, timeout=10) as client,
    ):
        response = await client.post(
            "/admin/commands/weather",
            json={"args": {"city": "Paris"}},
            headers={"Authorization": "Bearer k-weather"},
        )
    assert response.status_code == 200, response.text
    assert response.json() == {
        "command": "weather",
        "ok": True,
        "text": "weather in Paris: sunny",
        "data": {"city": "Paris", "sky": "sunny"},
    }
    monkeypatch.delitem(sys.modules, "tmy_weather", raising=False)
