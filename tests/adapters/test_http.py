"""The HTTP adapter on a real loopback port, in process and as ``python run.py serve``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from tests.support.samples import samples
from tmy import logs
from tmy.adapters.http import HttpAdapter, parse_listen
from tmy.adapters.http.api import key_identity
from tmy.adapters.openai import OpenAIFacade
from tmy.errors import AdapterError
from tmy.testing import Bot

REPO = Path(__file__).resolve().parents[2]

RULES = """
variables:
  hits: {scope: global, default: 0}
rules:
  - id: greet
    triggers: ["hi*"]
    steps:
      - plugin: ADJUST
        input: "hello {USER_NAME} ({USER}@{PLATFORM}/{CHAT}) {QUESTION}"
  - id: hit
    triggers: [hit]
    steps:
      - {plugin: ADJUST, input: "?= hits + 1", save: hits}
  - id: fail
    triggers: [fail]
    on_error: "failed: {STEP_ERROR}"
    steps:
      - {plugin: ADJUST, input: "?= 1 / 0"}
"""


@pytest.fixture
async def served() -> AsyncIterator[tuple[httpx.AsyncClient, Bot]]:
    async with Bot({"h.yaml": RULES}, max_message_chars=1000) as bot:
        adapter = HttpAdapter("127.0.0.1:0", max_message_chars=1000)
        await adapter.start(bot.engine.handle)
        try:
            base = f"http://127.0.0.1:{adapter.port}"
            async with httpx.AsyncClient(base_url=base, timeout=30) as client:
                yield client, bot
        finally:
            await adapter.stop()


async def test_post_message(served: tuple[httpx.AsyncClient, Bot]) -> None:
    client, _ = served
    body = {"text": "hi there", "user": "u1", "chat": "g1", "platform": "web", "user_name": "Ann"}
    response = await client.post("/v1/messages", json=body)
    assert response.status_code == 200
    data = response.json()
    assert set(data) == {"rule", "answer", "error", "trace_id"}
    assert data["rule"] == "greet"
    assert data["answer"] == "hello Ann (u1@web/g1) there"
    assert data["error"] is None
    assert isinstance(data["trace_id"], str) and data["trace_id"]


async def test_only_text_is_required(served: tuple[httpx.AsyncClient, Bot]) -> None:
    client, _ = served
    data = (await client.post("/v1/messages", json={"text": "hi"})).json()
    assert data["rule"] == "greet"
    assert "@http/" in data["answer"]  # the platform defaults to "http"


async def test_unmatched_and_failing_messages_are_still_200(
    served: tuple[httpx.AsyncClient, Bot],
) -> None:
    client, _ = served
    unmatched = await client.post("/v1/messages", json={"text": "zzz"})
    assert unmatched.status_code == 200
    assert unmatched.json()["rule"] is None
    failed = await client.post("/v1/messages", json={"text": "fail"})
    assert failed.status_code == 200
    data = failed.json()
    assert data["rule"] == "fail"
    assert "ZeroDivisionError" in data["error"]
    assert data["answer"] == f"failed: {data['error']}"


@pytest.mark.parametrize(
    ("content", "hint"),
    [
        (b"{not json", "JSON object"),
        (b"[1, 2]", "JSON object"),
        (b'{"user": "u1"}', "'text'"),
        (b'{"text": 5}', "'text'"),
        (b'{"text": "hi", "user": {"id": 1}}', "'user'"),
        (b"\xff\xfe\x00", "JSON"),
    ],
)
async def test_bad_requests_are_400(
    served: tuple[httpx.AsyncClient, Bot], content: bytes, hint: str
) -> None:
    client, _ = served
    response = await client.post(
        "/v1/messages", content=content, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert hint in response.json()["error"]


@pytest.mark.parametrize(
    ("content", "content_type", "answer"),
    [
        ('{"text": "hi caf\u00e9 \u4f60\u597d"}'.encode(), "application/json", "café 你好"),
        # bodies orjson refuses read as the stdlib reads them (NaN, a 70-bit integer)
        (b'{"text": "hi n", "x": NaN, "y": 1180591620717411303424}', "application/json", "n"),
        # another charset is decoded as declared
        ('{"text": "hi café"}'.encode("latin-1"), "application/json; charset=latin-1", "café"),
    ],
)
async def test_json_bodies_read_as_before(
    served: tuple[httpx.AsyncClient, Bot], content: bytes, content_type: str, answer: str
) -> None:
    client, _ = served
    response = await client.post(
        "/v1/messages", content=content, headers={"content-type": content_type}
    )
    assert response.status_code == 200
    assert response.json()["answer"].endswith(answer)


async def test_too_long_message_is_413(served: tuple[httpx.AsyncClient, Bot]) -> None:
    client, _ = served
    response = await client.post("/v1/messages", json={"text": "x" * 1001})
    assert response.status_code == 413
    assert "too long" in response.json()["error"]


async def test_huge_body_is_413_and_the_server_keeps_serving(
    served: tuple[httpx.AsyncClient, Bot],
) -> None:
    client, _ = served
    response = await client.post("/v1/messages", json={"text": "x" * (3 * 1024 * 1024)})
    assert response.status_code == 413
    assert (await client.post("/v1/messages", json={"text": "hi"})).status_code == 200


async def test_healthz(served: tuple[httpx.AsyncClient, Bot]) -> None:
    client, _ = served
    response = await client.get("/healthz")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"


async def test_concurrent_requests_lose_no_update(served: tuple[httpx.AsyncClient, Bot]) -> None:
    client, bot = served
    async with asyncio.timeout(60):
        responses = await asyncio.gather(
            *(client.post("/v1/messages", json={"text": "hit"}) for _ in range(50))
        )
    assert [r.status_code for r in responses] == [200] * 50
    assert await bot.var("hits") == 50


async def test_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        adapter = HttpAdapter(f"127.0.0.1:{port}")

        async def handle(message):  # pragma: no cover - never called
            raise AssertionError

        with pytest.raises(AdapterError, match=f"cannot listen on 127.0.0.1:{port}"):
            await adapter.start(handle)


@pytest.mark.parametrize("listen", ["8080", "host:", "host:port"])
def test_listen_address_must_be_host_port(listen: str) -> None:
    with pytest.raises(AdapterError, match="HOST:PORT"):
        parse_listen(listen)


def test_listen_address_forms() -> None:
    assert parse_listen(":9000") == ("127.0.0.1", 9000)
    assert parse_listen("[::1]:9000") == ("::1", 9000)


# -- the daemon as a process ----------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_serve_answers_over_http_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "h.yaml").write_text(RULES, encoding="utf-8")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMY_")}
    cmd = [sys.executable, "run.py", "serve", "--http", f"127.0.0.1:{port}", "--no-console",
           "--rules", str(rules), "--store", f"sqlite:///{tmp_path / 'serve.db'}"]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, f"serve exited early: {proc.communicate()[1][-2000:]}"
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "serve did not answer /healthz within 30 s"
            time.sleep(0.1)
        reply = httpx.post(f"{base}/v1/messages", json={"text": "hit"}, timeout=30).json()
        assert (reply["rule"], reply["answer"], reply["error"]) == ("hit", "1", None)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 0, stderr[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)


@pytest.mark.slow
def test_serve_raises_the_soft_open_file_limit_and_logs_both(tmp_path: Path) -> None:
    import json
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard <= 256:
        pytest.skip("needs a finite hard open-file limit above 256")
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "h.yaml").write_text(RULES, encoding="utf-8")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMY_")}
    serve = (f"ulimit -Sn 256 && exec {sys.executable} run.py serve --http 127.0.0.1:{port} "
             f"--no-console --rules {rules} --store sqlite:///{tmp_path / 's.db'}")  # fmt: skip
    proc = subprocess.Popen(
        ["bash", "-c", serve], cwd=REPO, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, f"serve exited early: {proc.communicate()[1][-2000:]}"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "serve did not answer /healthz within 30 s"
            time.sleep(0.1)
        limits = (Path("/proc") / str(proc.pid) / "limits").read_text()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    lines = [json.loads(x) for x in stderr.splitlines() if x.startswith("{")]
    (logged,) = [e for e in lines if e.get("event") == "daemon.open_files"]
    assert (logged["soft_before"], logged["soft"], logged["hard"]) == (256, hard, hard)
    (row,) = [x for x in limits.splitlines() if x.startswith("Max open files")]
    assert row.split()[3] == str(hard)  # the running daemon's soft limit


# -- cross-site control of a local daemon (Content-Type, Origin, Host) --------------------------


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None],
)
async def test_json_routes_take_only_application_json(
    served: tuple[httpx.AsyncClient, Bot], content_type: str | None
) -> None:
    client, bot = served
    headers = {"Content-Type": content_type} if content_type else {}
    # what a web page can POST cross-site without a preflight: an admin command as text
    body = b'{"text": "hit"}'
    for path in ("/v1/messages", "/admin/reload"):
        response = await client.post(path, content=body, headers=headers)
        assert response.status_code == 415, (path, response.text)
        assert "application/json" in response.json()["error"]
    assert await bot.var("hits") == 0  # nothing ran
    # no body and no type: nothing to smuggle (a bare `curl -X POST …/admin/reload`)
    # it passes the JSON rule; a bare listener has no admin routes (the serving app mounts them)
    assert (await client.post("/admin/reload")).status_code == 404
    ok = await client.post("/v1/messages", content=body, headers={
        "Content-Type": "application/json; charset=utf-8"})  # fmt: skip
    assert ok.status_code == 200 and ok.json()["rule"] == "hit"


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Origin": "http://127.0.0.1:1"},  # another port: another origin
        {"Sec-Fetch-Site": "cross-site"},
    ],
)
async def test_state_changing_requests_from_another_site_are_403(
    served: tuple[httpx.AsyncClient, Bot], headers: dict[str, str]
) -> None:
    client, bot = served
    response = await client.post("/v1/messages", json={"text": "hit"}, headers=headers)
    assert response.status_code == 403
    assert "cross-site" in response.json()["error"]
    assert (await client.post("/admin/reload", json={}, headers=headers)).status_code == 403
    assert await bot.var("hits") == 0


async def test_same_origin_and_non_browser_requests_pass(
    served: tuple[httpx.AsyncClient, Bot],
) -> None:
    client, _ = served
    origin = str(client.base_url).rstrip("/")
    same = {"Origin": origin, "Sec-Fetch-Site": "same-origin"}
    assert (
        await client.post("/v1/messages", json={"text": "hit"}, headers=same)
    ).status_code == 200
    assert (await client.post("/v1/messages", json={"text": "hit"})).status_code == 200


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8080", "127.0.0.1.nip.io"])
async def test_a_host_header_that_does_not_name_the_listener_is_421(
    served: tuple[httpx.AsyncClient, Bot], host: str
) -> None:
    """DNS rebinding: the page's own name, resolved to 127.0.0.1, is in the Host header."""
    client, _ = served
    for response in (
        await client.get("/healthz", headers={"Host": host}),
        await client.post("/v1/messages", json={"text": "hi"}, headers={"Host": host}),
    ):
        assert response.status_code == 421
        assert "allowed_hosts" in response.json()["error"]


async def test_loopback_names_and_allowed_hosts_pass() -> None:
    async with Bot({"h.yaml": RULES}) as bot:
        adapter = HttpAdapter("127.0.0.1:0", allowed_hosts=["bot.example.com"])
        await adapter.start(bot.engine.handle)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{adapter.port}") as client:
                for host in ("localhost", f"localhost:{adapter.port}", "127.0.0.1", "[::1]:80",
                             "BOT.example.com", "bot.example.com:443"):  # fmt: skip
                    got = await client.get("/healthz", headers={"Host": host})
                    assert got.status_code == 200, host
                assert (
                    await client.get("/healthz", headers={"Host": "x.example"})
                ).status_code == 421
                # a proxy that rewrites Host: its public origin is allowed by name
                proxied = {"Origin": "https://bot.example.com"}
                got = await client.post("/v1/messages", json={"text": "hi"}, headers=proxied)
                assert got.status_code == 200
        finally:
            await adapter.stop()


async def test_a_websocket_upgrade_from_another_site_is_refused_on_mounted_routes() -> None:
    from aiohttp import ClientSession, WSServerHandshakeError, web

    async def ws(request: web.Request) -> web.WebSocketResponse:
        sock = web.WebSocketResponse()
        await sock.prepare(request)
        await sock.send_str("hello")
        await sock.close()
        return sock

    async with Bot({"h.yaml": RULES}) as bot:
        adapter = HttpAdapter("127.0.0.1:0")
        adapter.mount([web.get("/onebot/v11/ws", ws)])
        await adapter.start(bot.engine.handle)
        url = f"http://127.0.0.1:{adapter.port}/onebot/v11/ws"
        try:
            async with ClientSession() as session:
                with pytest.raises(WSServerHandshakeError) as refused:
                    await session.ws_connect(url, headers={"Origin": "http://evil.example"})
                assert refused.value.status == 403
                async with session.ws_connect(url) as sock:  # a non-browser client: no Origin
                    assert (await sock.receive(timeout=5)).data == "hello"
        finally:
            await adapter.stop()


# -- from test_audit_issue2.py (issue 2 audit: each failed before its fix)


async def test_a_lone_surrogate_in_a_message_is_answered_over_http(tmp_path: Path) -> None:
    logs.configure("info", tmp_path / "tmy.log")  # the daemon's default level
    try:
        async with samples(f"sqlite:///{tmp_path / 'h.db'}") as bot:
            adapter = HttpAdapter("127.0.0.1:0")
            await adapter.start(bot.engine.handle)
            try:
                async with httpx.AsyncClient(timeout=30) as client:
                    url = f"http://127.0.0.1:{adapter.port}/v1/messages"
                    body = b'{"text": "echo \\ud800"}'  # valid JSON: an escaped lone surrogate
                    got = await client.post(
                        url, content=body, headers={"Content-Type": "application/json"}
                    )
            finally:
                await adapter.stop()
        assert got.status_code == 200 and got.json()["rule"] == "echo"
    finally:
        logs.configure("warning")


# -- from test_hardening_access.py (issue 7 hardening: who may do what, what a caller may send)


HTTP_RULES = """
rules:
  - id: who
    triggers: ["who"]
    steps:
      - {plugin: ADJUST, input: "{USER}@{PLATFORM}/{CHAT}"}
  - id: big
    triggers: ["big"]
    steps:
      - {plugin: ADJUST, input: "?= 'x' * 60000"}
"""


@pytest.fixture
async def http_bot() -> AsyncIterator[tuple[httpx.AsyncClient, Bot]]:
    async with Bot({"h.yaml": HTTP_RULES}) as bot:
        adapter = HttpAdapter("127.0.0.1:0")
        await adapter.start(bot.engine.handle)
        try:
            base = f"http://127.0.0.1:{adapter.port}"
            async with httpx.AsyncClient(base_url=base, timeout=30) as client:
                yield client, bot
        finally:
            await adapter.stop()


async def test_deeply_nested_json_is_a_400_not_a_500(http_bot) -> None:
    client, _ = http_bot
    body = "[" * 100_000 + "]" * 100_000
    response = await client.post(
        "/v1/messages", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert "nested" in response.json()["error"]
    nested = '{"text": "who", "user": ' + "[" * 50_000 + "]" * 50_000 + "}"
    response = await client.post(
        "/v1/messages", content=nested, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    # the daemon keeps serving
    ok = await client.post("/v1/messages", json={"text": "who", "user": "ann"})
    assert ok.status_code == 200 and ok.json()["answer"] == "ann@http/private:ann"


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("user", "u" * 257, "257 characters"),
        ("chat", "c" * 1_000_000, "limit is 256"),
        ("platform", "p" * 300, "limit is 256"),
        ("user", True, "must be a string"),
        ("chat", False, "must be a string"),
        ("user", 1.5, "must be a string"),
        ("user", ["a"], "must be a string"),
        ("user", {"id": 1}, "must be a string"),
    ],
    ids=["long-user", "1MB-chat", "long-platform", "bool", "bool2", "float", "list", "dict"],
)
async def test_bad_ids_are_refused_with_400(http_bot, field, value, says) -> None:
    client, _ = http_bot
    response = await client.post("/v1/messages", json={"text": "who", field: value})
    assert response.status_code == 400
    error = response.json()["error"]
    assert field in error and says in error


async def test_lone_surrogates_in_ids_are_refused(http_bot) -> None:
    client, _ = http_bot
    raw = '{"text": "who", "user": "ann\\ud800"}'
    response = await client.post(
        "/v1/messages", content=raw, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert "surrogate" in response.json()["error"]
    # numeric ids (as platforms send them) and ids at the limit are fine
    ok = await client.post("/v1/messages", json={"text": "who", "user": 42, "chat": "g" * 256})
    assert ok.status_code == 200
    assert ok.json()["answer"] == "42@http/" + "g" * 256


async def test_reply_over_the_limit_is_a_clear_error(http_bot) -> None:
    client, _ = http_bot
    data = (await client.post("/v1/messages", json={"text": "big"})).json()
    assert data["rule"] == "big"
    assert "max_reply_chars" in data["error"] and "60000" in data["error"]
    assert len(data["answer"]) < 1000
    assert len(json.dumps(data)) < 5000


# -- from test_review_issue7.py (review of the issue 7 hardening: attacks that still got through)


ADMIN_RULES = """
rules:
  - id: wipe
    triggers: [wipe]
    admin_only: true
    steps: [{plugin: ADJUST, input: "wiped"}]
"""


async def test_an_http_caller_cannot_become_the_admin_of_another_platform() -> None:
    admins = frozenset({"telegram:42", f"telegram:{key_identity('admin-key-4567')}"})
    async with Bot({"a.yaml": ADMIN_RULES}, admins=admins) as bot:
        adapter = HttpAdapter("127.0.0.1:0", api_keys=["bridge-key-0123", "admin-key-4567"])
        await adapter.start(bot.engine.handle)
        body = {"text": "wipe", "user": "42", "platform": "telegram"}
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{adapter.port}") as client:
                spoof = await client.post("/v1/messages", json=body)
                wrong = await client.post(
                    "/v1/messages", json=body, headers={"Authorization": "Bearer guess"}
                )
                bridge = await client.post(
                    "/v1/messages", json=body, headers={"Authorization": "Bearer bridge-key-0123"}
                )
                admin = await client.post(
                    "/v1/messages", json=body, headers={"Authorization": "Bearer admin-key-4567"}
                )
        finally:
            await adapter.stop()
    assert (spoof.status_code, wrong.status_code) == (401, 401)
    assert spoof.json()["rule"] is None and wrong.json()["rule"] is None
    # a key names its user, it does not prove him: admin rights are the key's own
    assert bridge.json()["rule"] is None
    assert admin.json()["answer"] == "wiped"


# -- from test_review_issue8.py (review of issue 8: defects found running the daemon for real)


RULES_REVIEW_ISSUE8 = """
rules:
  - id: hello
    triggers: [hello]
    steps:
      - {plugin: ADJUST, input: "hi {USER}"}
"""


KEY = "sk-review-key"


@asynccontextmanager
async def keyed_listener(bot: Bot) -> AsyncIterator[HttpAdapter]:
    """The daemon's one listener with API keys, the OpenAI facade mounted."""
    facade = OpenAIFacade(api_keys=(KEY,))
    http = HttpAdapter("127.0.0.1:0", api_keys=(KEY,))
    http.mount(facade.routes())
    await facade.start(bot.engine.handle)
    await http.start(bot.engine.handle)
    try:
        yield http
    finally:
        await http.stop()
        await facade.stop()


async def raw_request(port: int, method: str, path: str, headers: bytes, body: bytes) -> int:
    """Send one HTTP/1.1 request byte for byte (headers a client library would refuse)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n".encode()
            + headers
            + b"Content-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        status_line = await reader.readline()
        await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()
    return int(status_line.split()[1])


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/messages", b'{"text": "hello"}'),
        ("POST", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hello"}]}'),
        ("GET", "/v1/models", b""),
    ],
)
async def test_an_authorization_header_that_is_not_utf8_is_a_401_not_a_500(
    method: str, path: str, body: bytes
) -> None:
    """Issue 8, item 2: a wrong key is '401 with a JSON error'. Bytes that are not
    UTF-8 (aiohttp hands them over as lone surrogates) made ``api_key_problem``
    raise UnicodeEncodeError: an unlogged 500 with aiohttp's plain-text page."""
    async with Bot({"r.yaml": RULES_REVIEW_ISSUE8}) as bot, keyed_listener(bot) as http:
        status = await raw_request(
            http.port, method, path, b"Authorization: Bearer \xff\xfe\r\n", body
        )
        # the listener keeps serving the right key afterwards
        good = await raw_request(
            http.port, method, path, f"Authorization: Bearer {KEY}\r\n".encode(), body
        )
    assert status == 401
    assert good == 200


async def test_images_become_the_messages_pictures(tmp_path: Path) -> None:
    rules = """
rules:
  - id: look
    triggers: ["look *"]
    steps:
      - {plugin: LLM, vision: true}
"""
    async with Bot({"r.yaml": rules}) as bot:
        adapter = HttpAdapter("127.0.0.1:0")
        await adapter.start(bot.engine.handle)
        try:
            base = f"http://127.0.0.1:{adapter.port}"
            async with httpx.AsyncClient(base_url=base, timeout=30) as client:
                images = ["https://cdn.example/a.png", "data:image/png;base64,AAAA"]
                got = await client.post(
                    "/v1/messages", json={"text": "look MOCK:IMAGES", "images": images}
                )
                bad = await client.post(
                    "/v1/messages", json={"text": "look", "images": ["/etc/passwd"]}
                )
        finally:
            await adapter.stop()
    assert got.status_code == 200 and got.json()["answer"] == "2 images"
    assert bad.status_code == 400
    assert bad.json()["error"] == "'images' must be a list of http(s) or data: URLs"
