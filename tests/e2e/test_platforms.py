"""QQ (webhook), Feishu, Slack, Matrix and Satori together in ONE ``run.py serve`` process
(a config file, credentials through ``<key>_env``, a SQLite store), the fakes of
tests/support on loopback: each answers in its own chat with its PLATFORM/CHAT/USER; a hung
platform holds up neither the others' answers nor the stop past ``limits.shutdown_grace``
(two hung: one grace, not one each); restarted with Feishu and Slack on webhooks and two
adapters refused, the other three serve, ``failed``/``degraded`` in /healthz; no
traceback and no credential in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support import feishu_fake, qq_fake, satori_fake, slack_fake
from tests.support.feishu_fake import BOT_OPEN_ID, FakeFeishu
from tests.support.matrix_fake import FakeHomeserver
from tests.support.matrix_fake_rooms import ANN, BOT, TOKEN
from tests.support.qq_fake import FakeQQ, group_at
from tests.support.satori_fake import ALICE, FakeSatori
from tests.support.slack_fake import FakeSlack

REPO = Path(__file__).resolve().parents[2]
GRACE = 2  # limits.shutdown_grace of the daemon under test
EXIT = 1.5  # seconds a daemon takes to exit past its waits (closing, the interpreter's exit)
PROMPT = 3.0  # seconds within which an answer counts as prompt on a loaded 2-core machine
PLATFORMS = ("qq", "feishu", "slack", "matrix", "satori")
CAT = "@cat:example.org"  # joins the Matrix room

RULES = """
rules:
  - id: echo
    triggers: ["echo *"]
    mention: true
    steps:
      - {plugin: ADJUST, input: "{PLATFORM}|{CHAT}|{USER}|{QUESTION}"}
  - id: welcome
    events: [member_join]
    steps:
      - {plugin: ADJUST, input: "welcome {PLATFORM}|{CHAT}|{USER}"}
"""
TICK = """
  - id: tick
    schedule: {every: 1s, send_to: [{platform: "satori:qq", chat: g900}]}
    steps: [{plugin: ADJUST, input: tick}]
"""

# every credential the daemon is given, by the environment variable that names it
CREDENTIALS = {
    "E2E_QQ_APP_ID": qq_fake.APP_ID, "E2E_QQ_SECRET": qq_fake.SECRET,
    "E2E_FEISHU_APP_ID": feishu_fake.APP_ID, "E2E_FEISHU_APP_SECRET": feishu_fake.APP_SECRET,
    "E2E_FEISHU_VERIFICATION_TOKEN": feishu_fake.VERIFICATION_TOKEN,
    "E2E_FEISHU_ENCRYPT_KEY": feishu_fake.ENCRYPT_KEY,
    "E2E_SLACK_BOT_TOKEN": slack_fake.BOT_TOKEN, "E2E_SLACK_APP_TOKEN": slack_fake.APP_TOKEN,
    "E2E_SLACK_SIGNING_SECRET": slack_fake.SIGNING_SECRET,
    "E2E_MATRIX_TOKEN": TOKEN, "E2E_SATORI_TOKEN": satori_fake.TOKEN,
}  # fmt: skip
SECRETS = [v for k, v in CREDENTIALS.items() if "APP_ID" not in k]


@dataclass
class Fakes:
    qq: FakeQQ
    feishu: FakeFeishu
    slack: FakeSlack
    matrix: FakeHomeserver
    satori: FakeSatori
    room: str  # the Matrix group room


@contextlib.asynccontextmanager
async def five_fakes() -> AsyncIterator[Fakes]:
    async with contextlib.AsyncExitStack() as stack:
        up = stack.enter_async_context
        f = Fakes(await up(FakeQQ()), await up(FakeFeishu()), await up(FakeSlack()),
                  await up(FakeHomeserver()), await up(FakeSatori()), "")  # fmt: skip
        f.matrix.names[CAT] = "Cat"
        f.room = f.matrix.room("group", ANN)
        yield f


def config_text(tmp: Path, fakes: Fakes, port: int, webhooks: bool) -> str:
    """The daemon's config file: the five platforms on, credentials named by ``*_env``;
    Feishu and Slack on their long connections, or with ``webhooks`` on the listener."""
    feishu: dict[str, Any] = {"mode": "websocket"}
    slack: dict[str, Any] = {"mode": "socket", "app_token_env": "E2E_SLACK_APP_TOKEN"}
    if webhooks:
        feishu = {"mode": "webhook", "verification_token_env": "E2E_FEISHU_VERIFICATION_TOKEN",
                  "encrypt_key_env": "E2E_FEISHU_ENCRYPT_KEY"}  # fmt: skip
        slack = {"mode": "webhook", "signing_secret_env": "E2E_SLACK_SIGNING_SECRET"}
    adapters = {
        "console": {"enabled": False},
        "http": {"enabled": True, "listen": f"127.0.0.1:{port}"},
        "qq": {"enabled": True, "mode": "webhook", "app_id_env": "E2E_QQ_APP_ID",
               "secret_env": "E2E_QQ_SECRET", "api_base": fakes.qq.base,
               "token_url": fakes.qq.token_url},
        "feishu": {"enabled": True, **feishu, "app_id_env": "E2E_FEISHU_APP_ID",
                   "app_secret_env": "E2E_FEISHU_APP_SECRET", "api_base": fakes.feishu.base},
        "slack": {"enabled": True, **slack, "bot_token_env": "E2E_SLACK_BOT_TOKEN",
                  "api_base": fakes.slack.base},
        "matrix": {"enabled": True, "access_token_env": "E2E_MATRIX_TOKEN",
                   "api_base": fakes.matrix.base},
        "satori": {"enabled": True, "token_env": "E2E_SATORI_TOKEN",
                   "api_base": fakes.satori.base, "send_interval": 0},
    }  # fmt: skip
    config = {"rules": str(tmp / "rules"), "plugins": str(tmp / "none"), "watch": False,
              "store": f"sqlite:///{tmp / 'tmy.db'}", "limits": {"shutdown_grace": GRACE},
              "log": {"level": "info", "format": "json"}, "adapters": adapters}  # fmt: skip
    return yaml.safe_dump(config)


class Daemon:
    """``python3 run.py serve`` as a process of its own, its output in a file."""

    def __init__(self, tmp: Path, fakes: Fakes, name: str, *, webhooks: bool = False) -> None:
        with socket.socket() as s:  # a free port
            s.bind(("127.0.0.1", 0))
            self.port, self.webhooks = int(s.getsockname()[1]), webhooks
        self.url = f"http://127.0.0.1:{self.port}"
        self.config, self.log = tmp / f"{name}.yaml", tmp / f"{name}.log"
        self.config.write_text(config_text(tmp, fakes, self.port, webhooks), encoding="utf-8")
        self.proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Daemon:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TMY_")}
        env.update(CREDENTIALS)
        with self.log.open("wb") as out:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "run.py", "--config", str(self.config), "serve", "--no-console",
                cwd=REPO, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
            )  # fmt: skip
        return self

    async def states(self, wanted: dict[str, str], timeout: float = 10) -> dict[str, Any]:
        """/healthz once every adapter in ``wanted`` is in its state."""
        assert self.proc is not None
        report: dict[str, Any] = {}
        try:
            async with asyncio.timeout(timeout):
                while True:
                    assert self.proc.returncode is None, self.text()
                    with contextlib.suppress(httpx.HTTPError):
                        async with httpx.AsyncClient(timeout=5) as client:
                            report = (await client.get(f"{self.url}/healthz")).json()
                        got = {n: report["adapters"].get(n, {}).get("state") for n in wanted}
                        if got == wanted:
                            return report
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise AssertionError(f"/healthz: {report}\n{self.text()}") from None

    async def stop(self) -> tuple[int, float]:
        """SIGTERM; (exit status, seconds it took)."""
        assert self.proc is not None
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(GRACE + 10):  # past it, __aexit__ kills the process
            status = await self.proc.wait()
        return status, time.monotonic() - started

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


async def until(condition: Callable[[], bool], timeout: float = 10) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


# -- one group message mentioning the bot, through each fake, and its answer -----------------


async def ask_qq(f: Fakes, d: Daemon, text: str) -> tuple[str, str, str]:
    payload = {"id": f"ev-{time.time_ns()}", "op": 0, "s": 1, "t": "GROUP_AT_MESSAGE_CREATE",
               "d": group_at(f" {text}", msg_id=f"m-{time.time_ns()}")}  # fmt: skip
    status, ack = await f.qq.post_webhook(f"{d.url}/qq/webhook", payload)
    assert (status, ack) == (200, {"op": 12, "d": 0})
    sent = await f.qq.next_sent()
    assert sent["body"]["msg_id"] == payload["d"]["id"]  # a passive reply to that message
    return sent["kind"], sent["target"], sent["body"]["content"]


async def ask_feishu(f: Fakes, d: Daemon, text: str) -> tuple[str, str, str]:
    at_bot = f.feishu.mention("@_user_1", BOT_OPEN_ID, "tmy")
    event = f.feishu.message(f"@_user_1 {text}", mentions=[at_bot])
    if d.webhooks:  # encrypted and signed with the encrypt key, as Feishu posts it
        body, headers = f.feishu.webhook_request(event, key=feishu_fake.ENCRYPT_KEY)
        async with httpx.AsyncClient(timeout=5) as client:
            answer = await client.post(f"{d.url}/feishu/events", content=body, headers=headers)
        assert answer.status_code == 200, answer.text
    else:
        await f.feishu.push(event)
    sent = await f.feishu.next_sent()
    assert sent["message_id"] == event["event"]["message"]["message_id"]  # a reply to it
    chat = f.feishu.messages[sent["message_id"]]["chat_id"]
    return sent["kind"], chat, sent["content"]["text"]


async def ask_slack(f: Fakes, d: Daemon, text: str) -> tuple[str, str, str]:
    await f.slack.event(f.slack.message(f"<@{slack_fake.BOT_USER}> {text}"))
    post = await f.slack.next_post()
    return "post", post["channel"], post["text"]


async def ask_matrix(f: Fakes, d: Daemon, text: str) -> tuple[str, str, str]:
    await f.matrix.message(f.room, ANN, f"Tmy: {text}", **{"m.mentions": {"user_ids": [BOT]}})
    sent = await f.matrix.next_sent()
    return sent["type"], sent["room"], sent["content"]["body"]


async def ask_satori(f: Fakes, d: Daemon, text: str) -> tuple[str, str, str]:
    event = await f.satori.message(f'<at id="{satori_fake.QQ_BOT}" name="tmy"/> {text}')
    sent = await f.satori.next_sent()
    quote = f'<quote id="{event["message"]["id"]}"/>'  # a group reply quotes the message
    content = sent["body"]["content"]
    assert content.startswith(quote), content
    return sent["platform"], sent["body"]["channel_id"], content.removeprefix(quote)


ASK = dict(qq=ask_qq, feishu=ask_feishu, slack=ask_slack, matrix=ask_matrix, satori=ask_satori)


def expected(f: Fakes, platform: str, question: str) -> tuple[str, str, str]:
    """(kind, chat at the fake, answer text) for ``echo <question>`` on ``platform``."""
    kind, at_fake, chat, user = {
        "qq": ("group", qq_fake.GROUP, f"group:{qq_fake.GROUP}", qq_fake.MEMBER),
        "feishu": ("reply", feishu_fake.GROUP, feishu_fake.GROUP, feishu_fake.USER),
        "slack": ("post", slack_fake.CHANNEL, slack_fake.CHANNEL, slack_fake.ANN),
        "matrix": ("m.room.message", f.room, f.room, ANN),
        "satori": ("qq", satori_fake.GROUP, satori_fake.GROUP, ALICE["id"]),
    }[platform]
    name = "satori:qq" if platform == "satori" else platform
    return kind, at_fake, f"{name}|{chat}|{user}|{question}"


async def answered(f: Fakes, d: Daemon, platform: str, question: str) -> float:
    """Ask ``platform`` and check its answer; the seconds it took."""
    started = time.monotonic()
    got = await ASK[platform](f, d, f"echo {question}")
    assert got == expected(f, platform, question), platform
    return time.monotonic() - started


def clean_log(text: str) -> None:
    """No traceback, no credential (given, or issued by a fake: Feishu's tenant token, the
    ticket in its long connection's URL) in the daemon's output."""
    assert "Traceback" not in text, text
    assert all(json.loads(line) for line in text.splitlines()), "not JSON lines"
    for secret in [*SECRETS, feishu_fake.TICKET]:
        assert secret not in text, f"a credential in the log: {secret[:6]}…"
    assert not re.search(r"t-\d{6}-fake", text), "a Feishu tenant token in the log"


async def stopped_in_time(d: Daemon, limit: float) -> None:
    """SIGTERM: exit status 0 within ``limit`` seconds, and a clean log."""
    status, seconds = await d.stop()
    assert status == 0, d.text()
    assert seconds < limit, f"{seconds:.1f} s to stop (limit {limit} s)"
    clean_log(d.text())


def write_rules(tmp: Path, text: str = RULES) -> None:
    (tmp / "rules").mkdir()
    (tmp / "rules" / "r.yaml").write_text(text, encoding="utf-8")


async def hang_slack(f: Fakes) -> None:
    """Slack stops answering chat.postMessage; a reply to it is left pending."""
    f.slack.stalled.add("chat.postMessage")
    await f.slack.event(f.slack.message(f"<@{slack_fake.BOT_USER}> echo into the void"))
    await f.slack.wait_hung()


@pytest.mark.slow
async def test_five_platforms_in_one_daemon(tmp_path: Path) -> None:
    write_rules(tmp_path)
    async with five_fakes() as f:
        async with Daemon(tmp_path, f, "first") as d:
            report = await d.states(dict.fromkeys(PLATFORMS, "connected"), timeout=20)
            assert report["status"] == "ok"
            # a group message mentioning the bot on each platform, all at once
            await asyncio.gather(*(answered(f, d, p, f"hi {p}") for p in PLATFORMS))
            # three connections lost at once: all back, all answering
            await asyncio.gather(f.feishu.drop(), f.slack.drop(), f.satori.drop())
            await d.states(dict.fromkeys(PLATFORMS, "connected"))
            await asyncio.gather(*(answered(f, d, p, "back") for p in PLATFORMS))

            await f.matrix.join(f.room, CAT)  # an event rule
            welcome = await f.matrix.next_sent()
            assert welcome["content"]["body"] == f"welcome matrix|{f.room}|{CAT}"

            # Satori hangs on sending: the other four still answer promptly
            f.satori.stalled.add("message.create")
            await f.satori.message(f'<at id="{satori_fake.QQ_BOT}"/> echo into the void')
            await f.satori.wait_calls("message.create", 3)  # hi, back, into the void
            others = [p for p in PLATFORMS if p != "satori"]
            took = await asyncio.gather(*(answered(f, d, p, "still here") for p in others))
            assert max(took) < PROMPT, dict(zip(others, took, strict=True))

            # SIGTERM with the reply to Satori pending: the grace for it, then out
            await stopped_in_time(d, GRACE + EXIT)
            f.satori.stalled.clear()

        # restarted, Feishu and Slack on webhooks now: Slack's and Satori's credentials are
        # refused (rotated on their side)
        f.slack.bot_token = "xoxb-9999-rotated-token-the-daemon-lacks"
        f.satori.token = "rotated-satori-token"
        async with Daemon(tmp_path, f, "second", webhooks=True) as d:
            wanted = {"qq": "connected", "feishu": "connected", "matrix": "connected",
                      "slack": "failed", "satori": "failed"}  # fmt: skip
            report = await d.states(wanted, timeout=20)
            assert report["status"] == "degraded", report
            assert not any(secret in str(report) for secret in SECRETS)
            await asyncio.gather(*(answered(f, d, p, "again") for p in ("qq", "feishu", "matrix")))
            # Slack's route is on the listener, its adapter failed: Slack is told to deliver
            # again later, nothing runs
            body = json.dumps(f.slack.callback(f.slack.message("echo nobody"))).encode()
            async with httpx.AsyncClient(timeout=5) as client:
                later = await client.post(f"{d.url}/slack/events", content=body,
                                          headers=slack_fake.signed(body))  # fmt: skip
                unsigned = await client.post(f"{d.url}/slack/events", content=body)
            assert (later.status_code, unsigned.status_code) == (503, 401)
            await f.matrix.nothing_sent(0.2)  # the first run's messages are not replayed
            await f.slack.nothing_posted(0)
            await stopped_in_time(d, EXIT)


@pytest.mark.slow
async def test_two_hung_platforms_stop_within_one_grace(tmp_path: Path) -> None:
    """Satori hangs with a scheduled post to it pending, Slack with a reply pending."""
    write_rules(tmp_path, RULES + TICK)
    async with five_fakes() as f, Daemon(tmp_path, f, "hung") as d:
        f.satori.stalled.add("message.create")
        await d.states(dict.fromkeys(PLATFORMS, "connected"), timeout=20)
        await asyncio.gather(f.satori.wait_calls("message.create"), hang_slack(f))
        await answered(f, d, "matrix", "not held up")
        await stopped_in_time(d, GRACE + EXIT)


@pytest.mark.slow
async def test_a_stuck_feishu_connection_counts_against_the_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Feishu's stop closed its long connection (up to close_timeout when Feishu never answers
    the close), then gave its replies the whole grace: close_timeout + grace in all."""
    from tmy.adapters.feishu import FeishuAdapter, FeishuConfig
    from tmy.adapters.feishu.longconn import LongConnection
    from tmy.testing import Bot

    monkeypatch.setattr(LongConnection, "close_timeout", 1.0)
    async with FakeFeishu() as fake, Bot({"r.yaml": RULES}) as bot:
        adapter = FeishuAdapter(FeishuConfig(api_base=fake.base), app_id=feishu_fake.APP_ID,
                                app_secret=feishu_fake.APP_SECRET, store=bot.app.store,
                                shutdown_grace=1.2, send_interval=0.0)  # fmt: skip
        adapter.backoff_base, adapter.backoff_cap = 0.05, 0.1
        await adapter.start(bot.engine.handle)
        await fake.connected()
        fake.frozen = True  # the next connection is never read again: no answer to a close
        await fake.drop()
        await until(lambda: fake.connections > 1 and adapter.health()["state"] == "connected")
        fake.flood, fake.flood_reset = 9, 60  # the reply waits a minute
        at_bot = fake.mention("@_user_1", BOT_OPEN_ID, "tmy")
        await fake.push(fake.message("@_user_1 echo wait", mentions=[at_bot]))
        await until(lambda: bool(fake.refused_sends))
        started = time.monotonic()
        await adapter.stop()
        took = time.monotonic() - started
    assert took < 1.2 + 0.5, f"{took:.1f} s to stop with a 1.2 s grace"
