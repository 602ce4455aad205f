"""QQ in webhook mode, served by the daemon: signed POSTs to /qq/webhook on the real listener.

The fake signs each POST as QQ does (ed25519 over timestamp + body, the key seeded
from the secret); a missing signature is refused 401, a wrong one 403, and nothing
runs. The callback-URL validation is answered as QQ's own example shows."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.support.qq_fake import APP_ID, GROUP, MEMBER, SECRET, FakeQQ, group_at
from tmy.config import load_settings
from tmy.message import Target
from tmy.testing import serving
from tmy.testing.serving import Daemon

RULES = """
rules:
  - id: ping
    triggers: [ping]
    mention: true
    steps:
      - {plugin: ADJUST, input: "pong {CHAT} {USER}"}
"""

# QQ's documented example (bot.q.qq.com/wiki, event-emit: 回调地址验证)
VALIDATION = {"d": {"plain_token": "Arq0D5A61EgUu4OxUvOp", "event_ts": "1725442341"}, "op": 13}
VALIDATION_SIGNATURE = (
    "87befc99c42c651b3aac0278e71ada338433ae26fcb24307bdc5ad38c1adc2d0"
    "1bcfcadc0842edac85e85205028a1132afe09280305f13aa6909ffc2d652c706"
)


def settings_for(tmp_path: Path, fake: FakeQQ, **qq: Any) -> Any:
    rules = tmp_path / "rules"
    rules.mkdir(exist_ok=True)
    (rules / "r.yaml").write_text(RULES)
    section = {"enabled": True, "mode": "webhook", "app_id": APP_ID, "secret": SECRET,
               "api_base": fake.base, "token_url": fake.token_url, **qq}  # fmt: skip
    return load_settings(
        env={},
        rules=str(rules),
        plugins=str(tmp_path / "none"),
        store=f"sqlite:///{tmp_path / 'tmy.db'}",
        http_listen="127.0.0.1:0",
        console=False,
        adapters={"qq": section},
    )


@asynccontextmanager
async def served(tmp_path: Path, **qq: Any) -> AsyncIterator[tuple[FakeQQ, Daemon, str]]:
    async with FakeQQ() as fake, serving(settings=settings_for(tmp_path, fake, **qq)) as daemon:
        yield fake, daemon, f"http://127.0.0.1:{daemon.http.port}"


async def qq_health(base: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as client:
        return (await client.get(f"{base}/healthz")).json()["adapters"]["qq"]


async def wait_connected(base: str) -> dict[str, Any]:
    for _ in range(500):
        health = await qq_health(base)
        if health["state"] != "starting":
            return health
        await asyncio.sleep(0.01)
    raise AssertionError("the qq adapter never left 'starting'")


def dispatch(kind: str, d: dict[str, Any], event_id: str = "ev") -> dict[str, Any]:
    return {"id": event_id, "op": 0, "d": d, "s": 1, "t": kind}


async def test_a_signed_group_message_is_acked_and_answered(tmp_path: Path) -> None:
    async with served(tmp_path) as (fake, daemon, base):
        health = await wait_connected(base)
        status, ack = await fake.post_webhook(
            f"{base}/qq/webhook", dispatch("GROUP_AT_MESSAGE_CREATE", group_at(" ping", "w-1"))
        )
        sent = await fake.next_sent()
        await daemon.send(Target("qq", f"group:{GROUP}"), "from cron")
        active = await fake.next_sent()
    assert health["state"] == "connected" and health["username"] == "tmy-test"
    assert (status, ack) == (200, {"op": 12, "d": 0})
    assert sent["body"] == {"msg_type": 0, "content": f"pong group:{GROUP} {MEMBER}",
                            "msg_id": "w-1", "msg_seq": 1}  # fmt: skip
    assert active["body"] == {"msg_type": 0, "content": "from cron"}  # active: no msg_id


async def test_a_missing_or_bad_signature_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    async with served(tmp_path) as (fake, _daemon, base):
        await wait_connected(base)
        url = f"{base}/qq/webhook"
        payload = dispatch("GROUP_AT_MESSAGE_CREATE", group_at("ping", "w-bad"))
        missing = await fake.post_webhook(url, payload, headers={})
        headers = fake.signed(b'{"op": 0, "d": {}}')  # a signature over another body
        bad = await fake.post_webhook(url, payload, headers=headers)
        wrong_key = FakeQQ(secret="another-secret-entirely").signed(b"")
        other = await fake.post_webhook(url, payload, headers=wrong_key)
        await fake.nothing_sent()
    assert missing[0] == 401 and bad[0] == 403 and other[0] == 403
    assert fake.attempts == []


async def test_the_callback_validation_is_answered_as_qq_documents(tmp_path: Path) -> None:
    async with served(tmp_path) as (fake, _daemon, base):
        url = f"{base}/qq/webhook"
        unsigned = await fake.post_webhook(url, VALIDATION, headers={})
        signed = await fake.post_webhook(url, VALIDATION)
        # unsigned, a token that is not plain letters and digits is not signed for anyone
        forged = {"op": 13, "d": {"plain_token": '{"op":0}', "event_ts": "1"}}
        refused = await fake.post_webhook(url, forged, headers={})
    expected = {"plain_token": "Arq0D5A61EgUu4OxUvOp", "signature": VALIDATION_SIGNATURE}
    assert unsigned == (200, expected) and signed == (200, expected)
    assert refused[0] == 401


async def test_a_webhook_delivered_twice_runs_once(tmp_path: Path) -> None:
    async with served(tmp_path) as (fake, _daemon, base):
        await wait_connected(base)
        payload = dispatch("GROUP_AT_MESSAGE_CREATE", group_at("ping", "w-dup"))
        first = await fake.post_webhook(f"{base}/qq/webhook", payload)
        again = await fake.post_webhook(f"{base}/qq/webhook", payload)
        await fake.next_sent()
        await fake.nothing_sent()
    assert first[0] == again[0] == 200  # QQ is told both arrived: it must not deliver again
    assert len(fake.sent) == 1


async def test_a_bad_credential_is_failed_in_healthz_and_the_http_api_keeps_serving(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, secret="not-the-secret") as (fake, _daemon, base):
        health = await wait_connected(base)
        async with httpx.AsyncClient() as client:
            answer = (await client.post(f"{base}/v1/messages", json={"text": "ping"})).json()
        webhook = await fake.post_webhook(
            f"{base}/qq/webhook", dispatch("C2C_MESSAGE_CREATE", group_at("ping"))
        )
    assert health["state"] == "failed" and "refused app_id" in health["error"]
    assert "not-the-secret" not in str(health)
    assert fake.token_requests == 1  # not retried in a loop
    assert "answer" in answer and answer.get("error") is None
    assert webhook[0] == 403  # signed with the real secret: this daemon's key differs


async def test_a_missing_secret_names_the_variable_to_set(tmp_path: Path) -> None:
    async with served(tmp_path, secret="") as (_fake, _daemon, base):
        health = await wait_connected(base)
    assert health["state"] == "failed" and "QQ_SECRET" in health["error"]


async def test_a_token_refused_after_connecting_shows_failed_in_healthz(tmp_path: Path) -> None:
    async with served(tmp_path) as (fake, _daemon, base):
        await wait_connected(base)
        url = f"{base}/qq/webhook"
        first = dispatch("GROUP_AT_MESSAGE_CREATE", group_at("ping", "w-rot"), "e-1")
        later = dispatch("GROUP_AT_MESSAGE_CREATE", group_at("ping", "w-late"), "e-2")
        signed = [fake.signed(json.dumps(p, ensure_ascii=False).encode()) for p in (first, later)]
        fake.secret = "reset-at-q.qq.com"  # the AppSecret was reset: tokens are refused
        fake.revoke()
        acked = await fake.post_webhook(url, first, headers=signed[0])
        for _ in range(500):
            health = await qq_health(base)
            if health["state"] != "connected":
                break
            await asyncio.sleep(0.01)
        refused = await fake.post_webhook(url, later, headers=signed[1])
    assert acked[0] == 200
    assert health["state"] == "failed" and "refused app_id" in health["error"]
    assert SECRET not in str(health) and fake.sent == []
    assert refused[0] == 503  # QQ delivers it again later; nothing could answer it now
