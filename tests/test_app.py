"""The App's start: secrets it is configured with are registered before anything is logged.

The listener's API keys (``adapters.http.api_keys`` / ``TMY_HTTP_API_KEYS``) are
credentials like the LLM keys: masked in every log line and refused by
``REMEMBER``. A real App on a real SQLite file, logging into a real file.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from tests.support.log_helpers import read_log
from tmy.memory import entries
from tmy.testing import Bot

RULES = """
rules:
  - id: remember
    triggers: ["remember *"]
    on_error: "{STEP_ERROR}"
    steps: [{plugin: REMEMBER}]
  - id: echo
    triggers: ["echo *"]
    steps: [{plugin: ADJUST, input: "{QUESTION}"}]
"""


async def test_listener_api_keys_are_masked_in_the_log_and_refused_by_remember(
    log_file: Path,
) -> None:
    key = f"lk-{secrets.token_hex(12)}"  # unique: the registry of secrets is process-wide
    async with Bot({"r.yaml": RULES}, http_api_keys=(key, "other-key-" + key)) as bot:
        reply = await bot.ask(f"remember the listener key is {key}", user="ann")
        assert reply.error and "a credential this bot is configured with" in reply.error
        store = bot.engine.services.store
        assert await entries.owner_entries(store, entries.user_key("test", "ann")) == []
        assert await bot.say("remember my cat is called Mimi", user="ann") == (
            "OK, I'll remember: my cat is called Mimi"
        )
        await bot.say(f"echo {key}", user="ann")
    raw = log_file.read_text()
    assert key not in raw
    runs = [e for e in read_log(log_file) if e.get("event") == "run.done"]
    assert runs[0]["text"] == "remember the listener key is ***"
    assert runs[-1]["text"] == "echo ***" and runs[-1]["answer"] == "***"


async def test_the_onebot_access_token_is_refused_by_remember_without_the_adapter() -> None:
    """``ask``/``chat`` build no adapter: the token is registered by the App itself."""
    token = f"ob-{secrets.token_hex(12)}"
    async with Bot({"r.yaml": RULES}, adapters={"onebot": {"access_token": token}}) as bot:
        reply = await bot.ask(f"remember the token is {token}", user="ann")
        assert reply.error and "a credential this bot is configured with" in reply.error


async def test_a_serving_daemon_logs_what_check_warns_about(log_file: Path) -> None:
    """Collisions between files and adapters the config leaves off are logged at start-up;
    an adapter given to the app (here the loopback one, named onebot) counts as enabled."""
    from tmy.testing import serving

    rules = {
        "a.yaml": "rules:\n  - {id: a, triggers: [hello], steps: [{plugin: ADJUST}]}\n",
        "b.yaml": (
            "rules:\n  - {id: b, triggers: ['hello *'], steps: [{plugin: ADJUST}]}\n"
            "  - {id: tg, platforms: [telegram], triggers: [tg], steps: [{plugin: ADJUST}]}\n"
            "  - {id: qq, platforms: [onebot], triggers: [qq], steps: [{plugin: ADJUST}]}\n"
        ),
    }
    async with serving(rules, platform="onebot"):
        pass
    details = [e["detail"] for e in read_log(log_file) if e.get("event") == "rules.warning"]
    assert details == [
        "b.yaml:2: trigger 'hello *' of rule 'b' collides with trigger 'hello' of rule 'a' "
        "(a.yaml:2): both answer 'hello', and rule 'a' wins (exact before prefix triggers) "
        "(give one rule a higher 'priority:', or another trigger)",
        "b.yaml:3: rule 'tg' answers on telegram (platforms:), but the config does not enable "
        "the telegram adapter (set adapters.telegram.enabled: true); it answers nowhere",
    ]


async def test_an_extensions_routes_are_mounted_and_its_health_joins_healthz() -> None:
    import httpx
    from aiohttp import web

    from tmy.extension import Extension
    from tmy.testing.bot import default_extensions
    from tmy.testing.serving import serving

    async def hello(request: web.Request) -> web.Response:
        return web.json_response({"hello": "there"})

    extra = Extension(
        name="extra",
        routes=lambda services: [web.get("/extra", hello)],
        health=lambda services: ({"servers": {"one": "failed"}}, False),
    )
    rule = "{id: ping, triggers: [ping], steps: [{plugin: ADJUST, input: pong}]}"
    rules = {"r.yaml": f"rules:\n  - {rule}\n"}
    async with (
        serving(rules, extensions=(*default_extensions(), extra)) as daemon,
        httpx.AsyncClient(base_url=daemon.url, timeout=10) as client,
    ):
        assert (await client.get("/extra")).json() == {"hello": "there"}
        health = (await client.get("/healthz")).json()
        assert health["extra"] == {"servers": {"one": "failed"}}
        assert health["status"] == "degraded"


async def test_an_open_apps_log_lines_reach_the_file_within_the_flush_interval(
    log_file: Path,
) -> None:
    """The log's buffer is pushed out by the App's own ticker (every 0.2 s), for `chat`
    and `ask` as for the daemon: a line is in the file while the app is still open."""
    import asyncio

    async with Bot({"r.yaml": RULES}) as bot:
        await bot.say("echo flushed by the ticker", user="ann")
        for _ in range(50):  # up to 5 s on a loaded machine; 0.2 s when idle
            text = log_file.read_text()  # as another process reads it: no flush of ours
            if "echo flushed by the ticker" in text:
                break
            await asyncio.sleep(0.1)
        runs = [json.loads(line) for line in text.splitlines()]
        assert [e["text"] for e in runs if e.get("event") == "run.done"] == [
            "echo flushed by the ticker"
        ]


async def test_the_started_app_keeps_its_rulebook_out_of_the_collectors_sight() -> None:
    """Once up, what was loaded is frozen out of the collector's sight and a full
    collection is one per FULL_EVERY middle ones."""
    import gc

    from tmy.collector import FULL_EVERY

    async with Bot({"r.yaml": RULES}) as bot:
        assert gc.get_threshold()[2] == FULL_EVERY
        assert gc.get_freeze_count() > 0
        assert await bot.say("echo hi") == "hi"
