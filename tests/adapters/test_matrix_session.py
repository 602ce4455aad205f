"""Matrix: logins and credentials against the fake homeserver — a refused token or
password is ``failed`` and not retried, a password session keeps its device and logs
in again when logged out, the daemon keeps serving beside a failed adapter, and
``from_settings`` / the Adapter contract."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

import httpx
import pytest
from mautrix.api import HTTPAPI

from tests.adapters.test_matrix import RULES, _no_handle, make_adapter, token
from tests.support.adapters import wait_state
from tests.support.matrix_fake import FakeHomeserver
from tests.support.matrix_fake_rooms import ANN, BOT, PASSWORD
from tmy.adapters.matrix import Credentials, MatrixAdapter, MatrixConfig, from_settings
from tmy.adapters.matrix.http import MatrixHttp
from tmy.config import Settings, load_settings
from tmy.errors import AdapterError
from tmy.message import Target
from tmy.testing import Bot, serving
from tmy.types import Adapter


async def test_a_bad_access_token_fails_without_retrying() -> None:
    async with FakeHomeserver() as fake:
        adapter = make_adapter(fake, token("syt_revoked_token_value"))
        await adapter.start(_no_handle)
        await wait_state(adapter, "failed")
        await asyncio.sleep(0.1)
        report = adapter.health()
        await adapter.stop()
    assert "M_UNKNOWN_TOKEN" in report["error"] and "syt_revoked" not in report["error"]
    assert fake.count("GET", "/whoami") == 1 and fake.count("GET", "/sync") == 0
    assert adapter.health()["state"] == "failed"


async def test_missing_credentials_fail_clearly() -> None:
    async with FakeHomeserver() as fake:
        none = make_adapter(fake, Credentials("", "", ""))
        await none.start(_no_handle)
        no_user = make_adapter(fake, Credentials("", "", PASSWORD))
        await no_user.start(_no_handle)
    assert "MATRIX_ACCESS_TOKEN" in none.health()["error"]
    assert "MATRIX_USER_ID" in no_user.health()["error"]
    assert none.health()["state"] == no_user.health()["state"] == "failed"


async def test_password_login_keeps_its_device_across_restarts(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'tmy.db'}"
    given = Credentials(user_id=BOT, access_token="", password=PASSWORD)
    async with FakeHomeserver() as fake:
        room = fake.room("dm", ANN)
        devices = []
        for _ in range(2):
            async with Bot({"r.yaml": RULES}, store=store) as bot:
                adapter = make_adapter(fake, given, store=bot.app.store)
                await adapter.start(bot.engine.handle)
                await wait_state(adapter, "connected")
                devices.append(adapter.health()["device_id"])
                await fake.message(room, ANN, "echo logged in")
                assert (await fake.next_sent())["content"]["body"].endswith("|logged in")
                await adapter.stop()
        assert len(fake.logins) == 1  # the second start reused the kept token and device
        fake.tokens.clear()  # the device was logged out: log in again, same device
        async with Bot({"r.yaml": RULES}, store=store) as bot:
            adapter = make_adapter(fake, given, store=bot.app.store)
            await adapter.start(bot.engine.handle)
            await wait_state(adapter, "connected")
            devices.append(adapter.health()["device_id"])
            await adapter.stop()
    assert devices[0] == devices[1] == devices[2]
    assert fake.logins[1]["device_id"] == devices[0]


async def test_a_wrong_password_fails() -> None:
    async with FakeHomeserver() as fake:
        adapter = make_adapter(fake, Credentials(BOT, "", "wrong password"))
        await adapter.start(_no_handle)
        await wait_state(adapter, "failed")
        await adapter.stop()
    assert "M_FORBIDDEN" in adapter.health()["error"] and len(fake.logins) == 1


async def test_the_daemon_shows_a_bad_token_as_failed_and_keeps_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.yaml").write_text(RULES)
    monkeypatch.setenv("MATRIX_ACCESS_TOKEN", "syt_not_a_token_of_this_server")
    async with FakeHomeserver() as fake:
        settings = load_settings(
            env={}, rules=str(rules), plugins=str(tmp_path / "none"),
            store=f"sqlite:///{tmp_path / 'tmy.db'}", http_listen="127.0.0.1:0", console=False,
            adapters={"matrix": {"enabled": True, "api_base": fake.base}},
        )  # fmt: skip
        async with serving(settings=settings) as daemon:
            base = f"http://127.0.0.1:{daemon.http.port}"
            async with httpx.AsyncClient(base_url=base) as client:
                async with asyncio.timeout(10):
                    while True:
                        report = (await client.get("/healthz")).json()
                        if report["adapters"]["matrix"]["state"] == "failed":
                            break
                        await asyncio.sleep(0.02)
                answer = (await client.post("/v1/messages", json={"text": "echo still"})).json()
            assert "M_UNKNOWN_TOKEN" in report["adapters"]["matrix"]["error"]
            assert report["status"] == "degraded"
            assert answer["answer"].endswith("|still")
            with pytest.raises(AdapterError, match="not connected"):
                await daemon.send(Target("matrix", "!room:example.org"), "hi")


async def test_a_password_session_logged_out_while_running_logs_in_again() -> None:
    given = Credentials(user_id=BOT, access_token="", password=PASSWORD)
    async with FakeHomeserver() as fake:
        room = fake.room("dm", ANN)
        async with Bot({"r.yaml": RULES}) as bot:
            adapter = make_adapter(fake, given, store=bot.app.store)
            await adapter.start(bot.engine.handle)
            await wait_state(adapter, "connected")
            device = adapter.health()["device_id"]
            fake.tokens.clear()  # an admin logged the session out
            await fake.message(room, ANN, "echo again")
            sent = await fake.next_sent()
            assert adapter.health()["state"] == "connected"
            await adapter.stop()
    assert sent["content"]["body"].endswith("|again")
    assert [login.get("device_id") for login in fake.logins] == [None, device]


def test_the_adapter_satisfies_the_contract() -> None:
    adapter = MatrixAdapter()
    assert isinstance(adapter, Adapter)
    assert adapter.routes() == [] and adapter.health()["state"] == "starting"
    assert from_settings(Settings(http_enabled=False), None) is None
    assert "hunter2" not in repr(Credentials("@a:x", "tok-secret", "hunter2"))
    given = repr(MatrixConfig(access_token="syt_in_the_file", password="hunter2"))
    assert "syt_in_the_file" not in given and "hunter2" not in given


def test_from_settings_reads_keys_and_env(tmp_path: Path) -> None:
    off = load_settings(env={}, rules=str(tmp_path), console=False)
    assert from_settings(off) is None
    on = load_settings(env={}, rules=str(tmp_path), console=False,
                       adapters={"matrix": {"enabled": True, "user_id": BOT}})  # fmt: skip
    adapter = from_settings(on, env={"MATRIX_PASSWORD": PASSWORD})
    assert adapter is not None
    assert adapter.credentials == Credentials(BOT, "", PASSWORD)


async def test_an_encrypted_room_is_told_once_across_restarts(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'tmy.db'}"
    sealed = {"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "AwgAEn…"}
    async with FakeHomeserver() as fake:
        room = fake.room("secret", ANN, encrypted=True)
        for restarted in (False, True):  # the same store, a new adapter each time
            async with Bot({"r.yaml": RULES}, store=store) as bot:
                adapter = make_adapter(fake, store=bot.app.store)
                await adapter.start(bot.engine.handle)
                await wait_state(adapter, "connected")
                await fake.post(room, ANN, "m.room.encrypted", sealed)
                if restarted:
                    await fake.nothing_sent()
                else:
                    await fake.next_sent()
                await adapter.stop()
    assert [e["content"]["msgtype"] for e in fake.sent] == ["m.notice"]


def test_the_http_override_takes_what_mautrix_passes_its_send() -> None:
    # MatrixHttp replaces HTTPAPI._send (to keep retry_after_ms): a mautrix upgrade that
    # changes what request() passes it must fail here, not on every request at runtime
    ours = inspect.signature(MatrixHttp._send).parameters
    theirs = inspect.signature(HTTPAPI._send).parameters
    assert list(ours) == list(theirs)


async def test_a_sync_token_the_homeserver_refuses_is_dropped(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'tmy.db'}"
    async with FakeHomeserver() as fake:
        room = fake.room("dm", ANN)
        async with Bot({"r.yaml": RULES}, store=store) as bot:
            # kept from another homeserver (the server was moved, its database reset)
            await bot.app.store.set(f"matrix/{BOT}/next_batch", "t42-99_0_0_0_0_0_0_0_0")
            adapter = make_adapter(fake, store=bot.app.store)
            await adapter.start(bot.engine.handle)
            await wait_state(adapter, "connected", timeout=5)
            await fake.message(room, ANN, "echo after the move")
            sent = await fake.next_sent()
            await adapter.stop()
            kept = await bot.app.store.get(f"matrix/{BOT}/next_batch")
    assert sent["content"]["body"].endswith("|after the move")
    assert isinstance(kept, str) and kept[:1] == "s" and kept[1:].isdigit()  # the new one
