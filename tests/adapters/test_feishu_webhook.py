"""Feishu in webhook mode, served on the daemon's listener: the verification token, the
encrypt key (AES-256-CBC body, X-Lark-Signature), URL verification, retries; and a daemon
whose Feishu credentials are refused keeps serving."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.adapters.test_feishu import RULES, Driven, make
from tests.support.adapters import wait_state
from tests.support.feishu_fake import (
    APP_SECRET,
    ENCRYPT_KEY,
    GROUP,
    USER,
    VERIFICATION_TOKEN,
    FakeFeishu,
    encrypt,
)
from tmy.adapters.feishu.crypto import decrypt, signature
from tmy.adapters.http import HttpAdapter
from tmy.config import load_settings
from tmy.errors import AdapterError
from tmy.message import Target
from tmy.testing import Bot, serving


@asynccontextmanager
async def hooked(
    key: str = "", secret: str = APP_SECRET, state: str = "connected"
) -> AsyncIterator[tuple[Driven, httpx.AsyncClient]]:
    async with FakeFeishu() as fake, Bot({"r.yaml": RULES}) as bot:
        adapter = make(fake, mode="webhook", secret=secret)
        adapter.verification_token, adapter.encrypt_key = VERIFICATION_TOKEN, key
        d = Driven(fake, adapter, bot)
        http = HttpAdapter("127.0.0.1:0")
        http.mount(adapter.routes())
        await http.start(d.handle)
        await adapter.start(d.handle)
        try:
            await wait_state(adapter, state)
            base = f"http://127.0.0.1:{http.port}"
            async with httpx.AsyncClient(base_url=base) as client:
                yield d, client
        finally:
            await adapter.stop()
            await http.stop()


async def post(client: httpx.AsyncClient, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return await client.post("/feishu/events", content=body, headers=headers)


async def test_url_verification_answers_the_challenge() -> None:
    challenge = {
        "challenge": "ajls384kdjx98XX",
        "token": VERIFICATION_TOKEN,
        "type": "url_verification",
    }
    async with hooked() as (d, client):
        ok = await post(client, *d.fake.webhook_request(challenge))
        wrong = await post(client, *d.fake.webhook_request(challenge, token="nope"))
    async with hooked(ENCRYPT_KEY) as (d, client):
        encrypted = await post(client, *d.fake.webhook_request(challenge, key=ENCRYPT_KEY))
    assert ok.status_code == 200 and ok.json() == {"challenge": "ajls384kdjx98XX"}
    assert wrong.status_code == 403
    assert encrypted.status_code == 200 and encrypted.json()["challenge"] == "ajls384kdjx98XX"


async def test_with_a_refused_secret_the_url_is_verified_and_events_wait() -> None:
    challenge = {"challenge": "c-1", "token": VERIFICATION_TOKEN, "type": "url_verification"}
    async with hooked(secret="wrong", state="failed") as (d, client):
        verified = await post(client, *d.fake.webhook_request(challenge))
        event = await post(client, *d.fake.webhook_request(d.fake.message("echo x")))
    assert verified.status_code == 200 and verified.json() == {"challenge": "c-1"}
    assert event.status_code == 503 and d.seen == []  # Feishu delivers it again later


async def test_a_plain_event_is_answered_and_a_retry_runs_once() -> None:
    async with hooked() as (d, client):
        event = d.fake.message("echo by webhook")
        first = await post(client, *d.fake.webhook_request(event))
        again = await post(client, *d.fake.webhook_request(event))  # Feishu's retry
        await post(client, *d.fake.webhook_request(d.fake.message("echo after")))
        sent = [await d.fake.next_sent() for _ in range(2)]
    assert first.status_code == again.status_code == 200
    assert [s["content"]["text"].split("|")[-1] for s in sent] == ["by webhook", "after"]
    assert sent[0]["kind"] == "reply"
    assert len(d.seen) == 2


async def test_a_bad_or_missing_token_is_refused_and_runs_nothing() -> None:
    async with hooked() as (d, client):
        wrong = await post(client, *d.fake.webhook_request(d.fake.message("echo x"), token="bad"))
        missing = await post(client, *d.fake.webhook_request(d.fake.message("echo y"), token=""))
        v1 = {"uuid": "u1", "token": "bad", "ts": "1", "type": "event_callback", "event": {}}
        old = await post(client, *d.fake.webhook_request(v1))
        junk = await post(client, b"not json", {"Content-Type": "application/json"})
        await post(client, *d.fake.webhook_request(d.fake.message("echo fine")))
        sent = await d.fake.next_sent()
    assert (wrong.status_code, missing.status_code, old.status_code) == (403, 401, 403)
    assert junk.status_code == 400
    assert sent["content"]["text"].endswith("|fine")
    assert [m.text for m in d.seen] == ["echo fine"]  # no rule ran for the refused ones


async def test_an_encrypted_signed_event_is_decrypted_and_answered() -> None:
    async with hooked(ENCRYPT_KEY) as (d, client):
        answered = await post(
            client, *d.fake.webhook_request(d.fake.message("echo secret"), key=ENCRYPT_KEY)
        )
        sent = await d.fake.next_sent()
        body, headers = d.fake.webhook_request(
            d.fake.message("echo forged"), key=ENCRYPT_KEY, sign="0" * 64
        )
        forged = await post(client, body, headers)
        unsigned = await post(client, body, {"Content-Type": "application/json"})
        plain = await post(client, *d.fake.webhook_request(d.fake.message("echo plain")))
        other_key = await post(
            client, *d.fake.webhook_request(d.fake.message("echo other"), key="another-key")
        )
    assert answered.status_code == 200
    assert sent["content"]["text"] == f"feishu|{GROUP}|{USER}|secret"
    assert (forged.status_code, unsigned.status_code) == (403, 401)
    assert (plain.status_code, other_key.status_code) == (401, 403)  # signed with another
    assert [m.text for m in d.seen] == ["echo secret"]


def test_the_fakes_encryption_is_feishus_and_ours_reads_it() -> None:
    plain = json.dumps({"challenge": "c", "type": "url_verification"}).encode()
    sealed = encrypt(plain, ENCRYPT_KEY)
    from lark_oapi.core.utils.decryptor import AESCipher  # ~2 s: only where it is used

    assert AESCipher(ENCRYPT_KEY).decrypt_str(sealed) == plain.decode()  # the SDK's decryptor
    assert decrypt(sealed, ENCRYPT_KEY) == plain
    with pytest.raises(AdapterError):
        decrypt(sealed, "wrong key")
    # the signature of the documentation's form: sha256 over timestamp+nonce+key+body, hex
    assert len(signature("1", "n", ENCRYPT_KEY, b"{}")) == 64


def settings_for(tmp_path: Path, feishu: dict[str, Any]) -> Any:
    rules = tmp_path / "rules"
    rules.mkdir(exist_ok=True)
    (rules / "r.yaml").write_text(RULES)
    return load_settings(
        env={},
        rules=str(rules),
        plugins=str(tmp_path / "none"),
        store=f"sqlite:///{tmp_path / 'tmy.db'}",
        http_listen="127.0.0.1:0",
        console=False,
        adapters={"feishu": {"enabled": True, **feishu}},
    )


async def health_of(client: httpx.AsyncClient, state: str) -> dict[str, Any]:
    async with asyncio.timeout(10):
        while True:
            report = (await client.get("/healthz")).json()
            if report["adapters"]["feishu"]["state"] == state:
                return report
            await asyncio.sleep(0.02)


@pytest.mark.slow  # a whole daemon: ~1-3 s
async def test_a_refused_secret_is_failed_in_healthz_while_the_daemon_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEISHU_APP_ID", "cli_a1b2c3d4e5f6")
    monkeypatch.setenv("FEISHU_APP_SECRET", "not-the-secret")
    async with FakeFeishu() as fake:
        settings = settings_for(tmp_path, {"api_base": fake.base})
        async with serving(settings=settings) as daemon:
            async with httpx.AsyncClient(base_url=daemon.url) as client:
                report = await health_of(client, "failed")
                answer = (await client.post("/v1/messages", json={"text": "echo still"})).json()
            with pytest.raises(AdapterError, match="not connected"):
                await daemon.send(Target("feishu", GROUP), "hi")
    feishu = report["adapters"]["feishu"]
    assert "10014" in feishu["error"] and "not-the-secret" not in json.dumps(report)
    assert report["status"] == "degraded"
    assert answer["answer"].endswith("|still")


@pytest.mark.slow  # a whole daemon: ~1-3 s
async def test_the_daemon_serves_feishu_webhooks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEISHU_APP_SECRET", "fake-app-secret-0123456789")
    monkeypatch.setenv("FEISHU_ENCRYPT_KEY", ENCRYPT_KEY)
    async with FakeFeishu() as fake:
        settings = settings_for(
            tmp_path,
            {
                "api_base": fake.base,
                "mode": "webhook",
                "app_id": "cli_a1b2c3d4e5f6",
                "verification_token": VERIFICATION_TOKEN,
            },
        )
        async with (
            serving(settings=settings) as daemon,
            httpx.AsyncClient(base_url=daemon.url) as client,
        ):
            report = await health_of(client, "connected")
            event = fake.message("echo via daemon")
            answered = await post(client, *fake.webhook_request(event, key=ENCRYPT_KEY))
            sent = await fake.next_sent()
            await daemon.send(Target("feishu", GROUP), "from the daemon")
            posted = await fake.next_sent()
    assert report["adapters"]["feishu"]["mode"] == "webhook"
    assert answered.status_code == 200 and sent["content"]["text"].endswith("|via daemon")
    assert posted["receive_id"] == GROUP and posted["content"] == {"text": "from the daemon"}
