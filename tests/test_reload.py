"""Hot reload (file watch, SIGHUP, ``run.py reload``, the admin command) and admin commands.

Every test serves real rule files from a temporary folder through the real
daemon (in-process ``serve`` or a ``run.py serve`` process) and talks to it over
its HTTP listener on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from tmy.adapters.http.api import key_identity
from tmy.config import load_settings
from tmy.testing import Daemon, serving

REPO = Path(__file__).resolve().parent.parent

HELLO = """
rules:
  - id: hello
    triggers: [hello]
    steps: [{{plugin: ADJUST, input: "{answer}"}}]
"""

# admins: judge a /v1 caller's API key, not the user it names: root speaks with the admin key
ROOT_KEY, KEY = "sk-root-reload", "sk-ann-reload"
ADMIN = {"http_api_keys": [ROOT_KEY, KEY], "admins": [f"http:{key_identity(ROOT_KEY)}"]}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.asynccontextmanager
async def served(tmp_path: Path, **overrides: Any) -> AsyncIterator[Daemon]:
    """The daemon in this process (``serving``) on a free port."""
    settings = load_settings(
        env={},
        **{
            "rules": str(tmp_path / "rules"),
            "plugins": str(tmp_path / "plugins"),
            "store": f"sqlite:///{tmp_path / 'tmy.db'}",
            "http_listen": "127.0.0.1:0",
            "console": False,
            "watch": False,
            **overrides,
        },
    )
    async with serving(settings=settings) as daemon:
        yield daemon


async def say(daemon: Any, text: str, user: str = "ann") -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{daemon.http.port}") as client:
        key = ROOT_KEY if user == "root" else KEY  # sent to a keyless listener too: unread
        headers = {"Authorization": f"Bearer {key}"}
        body = {"text": text, "user": user}
        r = await client.post("/v1/messages", json=body, headers=headers, timeout=30)
        return r.json()


def write_rules(tmp_path: Path, text: str, name: str = "r.yaml") -> Path:
    folder = tmp_path / "rules"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


async def eventually(check: Any, timeout: float = 10.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        got = await check()
        if got or asyncio.get_running_loop().time() > deadline:
            return got
        await asyncio.sleep(0.1)


# -- file watch ---------------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_an_edited_rule_file_is_live_on_the_next_message_without_restart(
    tmp_path: Path,
) -> None:
    path = write_rules(tmp_path, HELLO.format(answer="hi v1"))
    async with served(tmp_path, watch=True) as daemon:
        assert (await say(daemon, "hello"))["answer"] == "hi v1"
        # editors save by writing a new file and renaming it over the old one
        tmp = path.with_name(".r.yaml.swp")
        tmp.write_text(HELLO.format(answer="hi v2"))
        os.replace(tmp, path)

        async def updated() -> bool:
            return (await say(daemon, "hello"))["answer"] == "hi v2"

        assert await eventually(updated), "the edited rule never went live"
        write_rules(tmp_path, HELLO.format(answer="bye").replace("hello", "bye"), "new.yaml")

        async def added() -> bool:
            return (await say(daemon, "bye"))["answer"] == "bye"

        assert await eventually(added), "a new rules file never went live"


@pytest.mark.timeout(60)
async def test_a_broken_file_changes_nothing_and_its_line_is_reported(tmp_path: Path) -> None:
    path = write_rules(tmp_path, HELLO.format(answer="still here"))
    async with served(tmp_path) as daemon:
        path.write_text(HELLO.format(answer="new").replace("plugin: ADJUST", "plugin: NOPE"))
        result = await daemon.app.reloader.reload("test")
        assert not result.ok
        assert any("r.yaml:5" in e and "NOPE" in e for e in result.errors), result.errors
        assert (await say(daemon, "hello"))["answer"] == "still here"
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{daemon.http.port}") as client:
            r = await client.post("/admin/reload")
        assert r.status_code == 422 and not r.json()["ok"]
        assert any("r.yaml:5" in e for e in r.json()["errors"])


@pytest.mark.timeout(60)
async def test_a_reload_reports_what_check_warns_about(tmp_path: Path) -> None:
    """Triggers two files claim and a post to an adapter the config leaves off: the same
    warnings check prints, in the reload's result (run.py reload, POST /admin/reload)."""
    write_rules(tmp_path, HELLO.format(answer="first"))
    async with served(tmp_path) as daemon:
        second = HELLO.format(answer="second").replace("id: hello", "id: hello-too")
        write_rules(tmp_path, second, "other.yaml")
        result = await daemon.app.reloader.reload("test")
        assert result.ok
        [warning] = result.warnings  # check's wording, not the loader's shorter one
        assert "r.yaml:4: trigger 'hello' of rule 'hello' collides with" in warning
        assert "other.yaml:4" in warning


# -- SIGHUP and run.py reload against a real process ------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_sighup_and_run_py_reload_reload_a_running_daemon(tmp_path: Path) -> None:
    path = write_rules(tmp_path, HELLO.format(answer="one"))
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMY_", "OPENAI_"))}
    env.update(TMY_WATCH="0", TMY_HTTP_API_KEYS="sk-reload-test")
    base = [sys.executable, "run.py", "--rules", str(tmp_path / "rules"),
            "--store", f"sqlite:///{tmp_path / 'x.db'}"]  # fmt: skip
    proc = subprocess.Popen(
        [*base, "serve", "--no-console", "--http", f"127.0.0.1:{port}"],
        cwd=REPO, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": "Bearer sk-reload-test"}

    def ask(text: str) -> str:
        r = httpx.post(f"{url}/v1/messages", json={"text": text}, headers=headers, timeout=10)
        return r.json()["answer"]

    try:
        for _ in range(200):
            try:
                httpx.get(f"{url}/healthz", timeout=1)
                break
            except httpx.TransportError:
                import time

                time.sleep(0.05)
        assert ask("hello") == "one"
        path.write_text(HELLO.format(answer="two"))
        proc.send_signal(signal.SIGHUP)
        for _ in range(100):
            if ask("hello") == "two":
                break
            import time

            time.sleep(0.1)
        assert ask("hello") == "two"
        assert proc.poll() is None, "SIGHUP must reload, not stop the daemon"

        # run.py reload asks the daemon over HTTP, with the listener's API key
        path.write_text(HELLO.format(answer="three"))
        cli = [*base, "reload", "--url", url]
        refused = subprocess.run(cli, cwd=REPO, env={**env, "TMY_HTTP_API_KEYS": "wrong"},
                                 capture_output=True, text=True)  # fmt: skip
        assert refused.returncode == 2 and "API key" in refused.stderr
        done = subprocess.run(cli, cwd=REPO, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("reloaded: 1 rules from 1 files")
        assert ask("hello") == "three"
        path.write_text("rules:\n  - id: hello\n    triggers: [hello]\n    steps: oops\n")
        broken = subprocess.run(cli, cwd=REPO, env=env, capture_output=True, text=True)
        assert broken.returncode == 1
        assert "reload failed" in broken.stderr
        assert "r.yaml:4: rule 'hello' needs 'steps:'" in broken.stderr
        assert ask("hello") == "three"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- runs in flight, sessions, cron across a reload -------------------------------------------


@pytest.mark.timeout(60)
async def test_a_run_in_flight_during_a_reload_finishes_on_its_old_rules(tmp_path: Path) -> None:
    gate = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        await gate.wait()
        return web.Response(text="slow done")

    app = web.Application()
    app.router.add_get("/slow", slow)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    upstream = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    rules = """
rules:
  - id: work
    triggers: [work]
    steps:
      - {{plugin: HTTP, url: "{url}/slow", result: text}}
      - {{plugin: ADJUST, input: "{version}: {{STEP_RESULT}}"}}
"""
    path = write_rules(tmp_path, rules.format(url=upstream, version="old"))
    try:
        async with served(tmp_path) as daemon:
            first = asyncio.create_task(say(daemon, "work"))
            await asyncio.sleep(0.5)  # the run is waiting on the upstream
            path.write_text(rules.format(url=upstream, version="new"))
            assert (await daemon.app.reloader.reload("test")).ok
            gate.set()
            assert (await first)["answer"] == "old: slow done"
            assert (await say(daemon, "work"))["answer"] == "new: slow done"
    finally:
        await runner.cleanup()


@pytest.mark.slow  # real waits: a schedule firing every second
@pytest.mark.timeout(60)
async def test_a_removed_scheduled_rule_stops_firing_and_a_new_one_starts(tmp_path: Path) -> None:
    ticking = """
variables:
  beats: {scope: global, default: []}
rules:
  - id: beat
    schedule: {every: 1s}
    steps: [{plugin: ADJUST, input: "?= beats + [FIRE_TIME]", save: beats}]
"""
    path = write_rules(tmp_path, ticking)
    async with served(tmp_path) as daemon:
        store = daemon.app.store

        async def beats() -> list[str]:
            got = await store.get("var/global/beats")
            return got if isinstance(got, list) else []

        assert await eventually(lambda: _at_least(beats, 2))
        path.write_text(
            ticking.replace("schedule: {every: 1s}", "triggers: [beat]").replace("FIRE_TIME", "NOW")
        )
        result = await daemon.app.reloader.reload("test")
        assert result.ok and daemon.app.cron.jobs == {}
        await asyncio.sleep(0.5)  # a firing already started may still land
        settled = len(await beats())
        await asyncio.sleep(2.5)
        assert len(await beats()) == settled, "the removed schedule still fires"
        path.write_text(ticking.replace("id: beat", "id: beat2"))
        assert (await daemon.app.reloader.reload("test")).ok
        assert list(daemon.app.cron.jobs) == ["beat2"]
        assert await eventually(lambda: _at_least(beats, settled + 1))
        fired = await beats()
        assert len(fired) == len(set(fired)), "an occurrence ran twice across the swap"


async def _at_least(get: Any, n: int) -> bool:
    return len(await get()) >= n


@pytest.mark.timeout(60)
async def test_an_edited_plugin_is_reloaded_too(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    plugin = """
def register(registry):
    async def shout(value, options, ctx):
        return str(value).upper() + "{mark}"
    registry.add("SHOUT", shout, takes=str)
"""
    (plugins / "shout.py").write_text(plugin.format(mark="!"))
    write_rules(
        tmp_path, "rules:\n  - id: s\n    triggers: ['s *']\n    steps: [{plugin: SHOUT}]\n"
    )
    async with served(tmp_path) as daemon:
        assert (await say(daemon, "s hey"))["answer"] == "HEY!"
        (plugins / "shout.py").write_text(plugin.format(mark="?!"))
        result = await daemon.app.reloader.reload("test")
        assert result.ok, result.errors
        assert (await say(daemon, "s hey"))["answer"] == "HEY?!"


# -- admin commands ---------------------------------------------------------------------------


@pytest.mark.timeout(60)
async def test_an_admin_can_switch_a_chat_off_and_on(tmp_path: Path) -> None:
    write_rules(tmp_path, HELLO.format(answer="hi"))
    async with served(tmp_path, **ADMIN) as daemon:
        assert (await say(daemon, "hello", "root"))["answer"] == "hi"
        off = await say(daemon, ".tmy off", "root")
        assert "off in this chat" in off["answer"]
        assert (await say(daemon, "hello", "root"))["answer"] == ""
        assert (await say(daemon, "hello", "ann"))["answer"] == "hi"  # another chat
        assert (await say(daemon, ".tmy on", "root"))["answer"].startswith("the bot is on")
        assert (await say(daemon, "hello", "root"))["answer"] == "hi"


@pytest.mark.timeout(60)
async def test_an_admin_reloads_from_chat_and_a_stranger_gets_nothing(
    tmp_path: Path, log_file: Path
) -> None:
    path = write_rules(tmp_path, HELLO.format(answer="v1"))
    async with served(tmp_path, log_file=str(log_file), **ADMIN) as daemon:
        path.write_text(HELLO.format(answer="v2"))
        stranger = await say(daemon, ".tmy reload", "mallory")
        assert stranger["answer"] == "" and stranger["rule"] is None
        assert (await say(daemon, "hello"))["answer"] == "v1", "a stranger's reload changed rules"
        done = await say(daemon, ".tmy reload", "root")
        assert done["answer"].startswith("reloaded: 1 rules from 1 files")
        assert (await say(daemon, "hello"))["answer"] == "v2"
        rules = (await say(daemon, ".tmy rules hello", "root"))["answer"]
        assert "hello (" in rules and "r.yaml" in rules and "ADJUST" in rules
        assert "unknown command" in (await say(daemon, ".tmy frobnicate", "root"))["answer"]
    from tests.support.log_helpers import read_log

    refused = [e for e in read_log(log_file) if e["event"] == "admin.refused"]
    assert [e["user"] for e in refused] == ["mallory"]


@pytest.mark.timeout(60)
async def test_admin_vars_cron_and_trace_commands(tmp_path: Path, log_file: Path) -> None:
    write_rules(
        tmp_path,
        "variables:\n  hits: {scope: global, default: 0}\n"
        "rules:\n  - id: hit\n    triggers: [hit]\n"
        "    steps: [{plugin: ADJUST, input: '?= hits + 1', save: hits}]\n"
        "  - id: daily\n    schedule: {cron: '0 9 * * *', timezone: UTC}\n"
        "    steps: [{plugin: ADJUST, input: digest}]\n",
    )
    async with served(tmp_path, log_file=str(log_file), **ADMIN) as daemon:
        hit = await say(daemon, "hit")
        assert hit["answer"] == "1"
        assert (await say(daemon, ".tmy vars set hits 41", "root"))["answer"] == "41"
        assert (await say(daemon, "hit"))["answer"] == "42"
        assert (await say(daemon, ".tmy vars get hits", "root"))["answer"] == "42"
        assert "reset" in (await say(daemon, ".tmy vars del hits", "root"))["answer"]
        cron = (await say(daemon, ".tmy cron", "root"))["answer"]
        assert "daily  cron '0 9 * * *' (UTC)" in cron and "T09:00:00+00:00" in cron
        from tmy import logs

        logs.flush()
        trace = (await say(daemon, f".tmy trace {hit['trace_id']}", "root"))["answer"]
        assert "rule      hit" in trace and "step 1    hit/0  ADJUST" in trace
        assert "budget" in (await say(daemon, ".tmy help", "root"))["answer"]
        assert "LLM usage" in (await say(daemon, ".tmy budget", "root"))["answer"]
        # a command never reaches the rules, even one that a catch-all would match
        assert (await say(daemon, ".tmy", "ann"))["rule"] is None


# -- /metrics ---------------------------------------------------------------------------------


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.timeout(60)
async def test_metrics_are_served_and_move_as_messages_flow(tmp_path: Path) -> None:
    write_rules(
        tmp_path,
        HELLO.format(answer="hi") + "  - id: broken\n    triggers: [broken]\n"
        "    steps: [{plugin: ADJUST, input: '?= 1 / 0'}]\n",
    )
    async with served(tmp_path) as daemon:

        async def scrape() -> dict[Any, float]:
            async with httpx.AsyncClient() as client:
                r = await client.get(f"http://127.0.0.1:{daemon.http.port}/metrics")
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
            return _samples(r.text)

        before = await scrape()
        for text in ("hello", "hello", "nothing here", "broken"):
            await say(daemon, text)
        assert (await daemon.app.reloader.reload("test")).ok
        after = await scrape()

    def moved(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert moved("tmy_messages_received_total", platform="http") == 4
    assert moved("tmy_messages_matched_total", platform="http") == 3
    assert moved("tmy_messages_unmatched_total", platform="http") == 1
    assert moved("tmy_runs_total", rule="hello", outcome="ok") == 2
    assert moved("tmy_runs_total", rule="broken", outcome="error") == 1
    assert moved("tmy_step_seconds_count", plugin="ADJUST") == 3
    # the chat switch, at least (its lookups of one loop turn are one get_many)
    assert moved("tmy_store_op_seconds_count", op="get_many") >= 1
    assert moved("tmy_reloads_total", outcome="ok") == 1
