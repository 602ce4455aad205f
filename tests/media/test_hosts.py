"""Downloads go only to public hosts: the address check (literal IPs, ``localhost``,
names that resolve to loopback) and redirects followed by hand, each hop checked —
against a real loopback server with real httpx (the shared client tmy uses)."""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from aiohttp import web

from tests.support.llm_fake_provider import PNG
from tmy import media
from tmy.http_client import new_http_client
from tmy.media import MediaError

BLOCKED = [
    ("127.0.0.1", "loopback"),
    ("127.8.9.10", "loopback"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.254", "private"),
    ("192.168.1.1", "private"),
    ("169.254.169.254", "link-local"),  # cloud metadata
    ("100.64.0.1", "CGNAT"),
    ("100.127.255.254", "CGNAT"),
    ("0.0.0.0", "unspecified"),
    ("224.0.0.1", "multicast"),
    ("255.255.255.255", "private"),
    ("::1", "loopback"),
    ("::", "unspecified"),
    ("fc00::1", "private"),
    ("fd12:3456::1", "private"),
    ("fe80::1", "link-local"),
    ("ff02::1", "multicast"),
    ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
    ("::ffff:10.0.0.1", "private"),
    ("::ffff:169.254.169.254", "link-local"),
    ("::ffff:100.64.0.1", "CGNAT"),
    ("::127.0.0.1", "loopback"),  # IPv4-compatible
    ("64:ff9b::a9fe:a9fe", "link-local"),  # NAT64 of 169.254.169.254
    ("2002:7f00:1::1", "loopback"),  # 6to4 of 127.0.0.1
]
PUBLIC = ["8.8.8.8", "93.184.216.34", "100.128.0.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"]


@pytest.mark.parametrize(("address", "kind"), BLOCKED)
def test_internal_addresses_are_blocked_with_their_kind(address: str, kind: str) -> None:
    found = media.why_blocked(ipaddress.ip_address(address))
    assert found is not None and kind in found


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    assert media.why_blocked(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/x.png",
        "http://localhost/x.png",
        "http://LocalHost/x.png",
        "http://127.1/x.png",  # a short form the resolver reads as 127.0.0.1
        "http://2130706433/x.png",  # 127.0.0.1 as one number
        "http://[::1]/x.png",
        "http://[::ffff:127.0.0.1]/x.png",
        "https://169.254.169.254/latest/meta-data/",
        "http://user:pw@10.0.0.5/x.png",
    ],
)
async def test_check_url_refuses_internal_hosts_naming_host_and_config_key(url: str) -> None:
    with pytest.raises(MediaError) as refused:
        await media.check_url(url)
    message = str(refused.value)
    assert "refused to download from" in message
    assert "limits.media_private_hosts" in message
    assert "pw" not in message


async def test_check_url_says_when_a_name_resolves_to_loopback() -> None:
    with pytest.raises(MediaError, match=r"localhost \(it resolves to (127\.0\.0\.1|::1)\)"):
        await media.check_url("http://localhost:9/a.png")


async def test_check_url_passes_public_literals_and_listed_hosts() -> None:
    await media.check_url("https://93.184.216.34/cat.png")
    await media.check_url("http://127.0.0.1:9/a.png", ["127.0.0.1"])
    await media.check_url("http://LocalHost:9/a.png", ["localhost"])
    await media.check_url("http://[::1]:9/a.png", ["0:0::1"])  # an IP however it is written
    await media.check_url("http://10.0.0.5/a.png", ["*"])
    with pytest.raises(MediaError, match=r"10\.0\.0\.6"):
        await media.check_url("http://10.0.0.6/a.png", ["10.0.0.5", "localhost"])


async def test_a_name_that_does_not_resolve_is_a_clear_error() -> None:
    with pytest.raises(MediaError, match=r"no-such-host\.invalid: its name does not resolve"):
        await media.check_url("http://no-such-host.invalid/a.png")


# -- downloads and redirects against a real loopback server ---------------------------------


class Hops:
    """A loopback server: ``/img`` a PNG, ``/to?url=…`` a 302 there, ``/chain/<n>`` n
    redirects before the PNG; every request's path and headers kept in ``hits``."""

    def __init__(self) -> None:
        self.hits: list[tuple[str, dict[str, str]]] = []
        self.port = 0
        self._runner: web.AppRunner | None = None

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    async def __aenter__(self) -> Hops:
        app = web.Application()
        app.router.add_get("/img", self._img)
        app.router.add_get("/to", self._to)
        app.router.add_get("/chain/{n}", self._chain)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    def _hit(self, request: web.Request) -> None:
        self.hits.append((request.path_qs, dict(request.headers)))

    async def _img(self, request: web.Request) -> web.Response:
        self._hit(request)
        return web.Response(body=PNG, content_type="image/png")

    async def _to(self, request: web.Request) -> Any:
        self._hit(request)
        raise web.HTTPFound(request.query["url"])

    async def _chain(self, request: web.Request) -> Any:
        self._hit(request)
        n = int(request.match_info["n"])
        raise web.HTTPFound(f"/chain/{n - 1}" if n > 0 else "/img")  # relative Location


@pytest.fixture
async def hops() -> AsyncIterator[Hops]:
    async with Hops() as server:
        yield server


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    client = new_http_client()  # follows redirects itself: download must not let it
    try:
        yield client
    finally:
        await client.aclose()


async def test_a_loopback_url_is_refused_before_connecting(hops: Hops, http) -> None:
    with pytest.raises(MediaError, match=r"refused to download from 127\.0\.0\.1"):
        await media.download(http, hops.url("/img"), None, 1000)
    assert hops.hits == []


async def test_a_redirect_to_an_unlisted_host_is_refused_and_never_fetched(
    hops: Hops, http
) -> None:
    """127.0.0.1 is allowed (as a NapCat would be); its redirect to ``localhost`` — the
    same machine under a name nobody listed — is checked and refused."""
    hop = hops.url("/to?url=" + hops.url("/img", host="localhost"))
    with pytest.raises(MediaError, match="refused to download from localhost"):
        await media.download(http, hop, None, 1000, private_hosts=["127.0.0.1"])
    assert [path for path, _ in hops.hits] == [hop.split(str(hops.port), 1)[1]]


async def test_redirects_among_allowed_hosts_are_followed_up_to_five(hops: Hops, http) -> None:
    got = await media.download(http, hops.url("/chain/4"), None, 1000, private_hosts=["*"])
    assert got == media.Media(PNG, "image/png")
    assert [p for p, _ in hops.hits] == [f"/chain/{n}" for n in (4, 3, 2, 1, 0)] + ["/img"]
    with pytest.raises(MediaError, match="more than 5 redirects"):
        await media.download(http, hops.url("/chain/5"), None, 1000, private_hosts=["*"])


async def test_the_platforms_headers_stay_with_its_own_host(hops: Hops, http) -> None:
    secret = {"Authorization": "Bearer platform-token"}
    same = hops.url("/to?url=/img")
    await media.download(http, same, secret, 1000, private_hosts=["*"])
    assert [h.get("Authorization") for _, h in hops.hits] == ["Bearer platform-token"] * 2
    hops.hits.clear()
    other = hops.url("/to?url=" + hops.url("/img", host="localhost"))
    await media.download(http, other, secret, 1000, private_hosts=["*"])
    assert [h.get("Authorization") for _, h in hops.hits] == ["Bearer platform-token", None]


async def test_a_redirect_to_another_scheme_is_refused(hops: Hops, http) -> None:
    with pytest.raises(MediaError, match="only http"):
        await media.download(
            http, hops.url("/to?url=file:///etc/passwd"), None, 1000, private_hosts=["*"]
        )


async def test_load_checks_a_replys_url_the_same_way(hops: Hops, http, tmp_path) -> None:
    with pytest.raises(MediaError, match=r"limits\.media_private_hosts"):
        await media.load(hops.url("/img"), http, 1000, tmp_path)
    got = await media.load(hops.url("/img"), http, 1000, tmp_path, private_hosts=["127.0.0.1"])
    assert got.data == PNG
