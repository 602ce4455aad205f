"""Which hosts tmy may download media from: not the machine's own or its network's.

A picture's URL comes from outside — a chat message, an LLM's answer, an HTTP
step — so a download could otherwise be pointed at ``127.0.0.1``, a cloud
metadata service (``169.254.169.254``) or a box on the LAN and hand what it
answers to a chat or an LLM provider. Before connecting, the host is resolved
and refused when any of its addresses is loopback, private (RFC 1918, and the
other ranges :mod:`ipaddress` calls private), link-local, shared/CGNAT
(``100.64.0.0/10``), unique-local (``fc00::/7``), multicast, unspecified or
reserved — also when written as an IPv4-mapped (``::ffff:127.0.0.1``),
IPv4-compatible, 6to4 or NAT64 IPv6 address.

``limits.media_private_hosts`` (``allowed`` here) names hosts that may be private
all the same: a NapCat on ``127.0.0.1`` serving pictures, a self-hosted Telegram
Bot API server; ``"*"`` allows any host. A name matches the URL's host as written
(case-insensitively), an IP matches however it is written.

What this cannot see: a name that resolves differently when the HTTP client
resolves it again a moment later (DNS rebinding with a zero TTL). The client's
own resolver is not ours to wrap.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Collection
from urllib.parse import urlsplit

from tmy.media.dataurl import MediaError

PRIVATE_HOSTS_KEY = "limits.media_private_hosts"
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_V4_COMPATIBLE = ipaddress.ip_network("::/96")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def why_blocked(ip: IPAddress) -> str | None:
    """What kind of address ``ip`` is (``"a loopback"`` …) when tmy must not download
    from it, else None."""
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_v4(ip)
        if inner is not None:
            return why_blocked(inner)
    for test, kind in (
        (ip.is_loopback, "a loopback"),
        (ip.is_unspecified, "an unspecified"),
        (ip.is_link_local, "a link-local"),
        (ip.is_multicast, "a multicast"),
        (isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT, "a shared (CGNAT)"),
        (isinstance(ip, ipaddress.IPv6Address) and ip in _V4_COMPATIBLE, "an IPv4-compatible"),
        (ip.is_private, "a private"),
        (ip.is_reserved, "a reserved"),
    ):
        if test:
            return kind
    return None


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for (mapped, 6to4, NAT64), if any."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _V4_COMPATIBLE and int(ip) > 1:  # ::a.b.c.d (deprecated); :: and ::1 are v6's
        return ipaddress.IPv4Address(int(ip))
    return None


def _ip(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def is_allowed(host: str, allowed: Collection[str]) -> bool:
    """Whether ``host`` is one the operator listed (or ``"*"`` is listed)."""
    if not allowed:
        return False
    if "*" in allowed:
        return True
    host = host.strip("[]").lower().rstrip(".")
    as_ip = _ip(host)
    for entry in allowed:
        entry = str(entry).strip().strip("[]").lower().rstrip(".")
        if entry == host:
            return True
        if as_ip is not None and _ip(entry) == as_ip:
            return True
    return False


async def check_url(
    url: str, allowed: Collection[str] = (), *, unresolved_ok: bool = False
) -> None:
    """Refuse (:class:`MediaError`) a URL whose host is, or resolves to, an address tmy
    does not download from, unless ``allowed`` lists the host (see the module doc).

    A name that does not resolve is refused too, unless ``unresolved_ok``: for a URL
    tmy only hands on to another program (OneBot's implementation downloads a reply's
    image itself), where all that matters is that it is not known to be internal."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if not host:
        raise MediaError(f"{url[:80]!r} names no host")
    if is_allowed(host, allowed):
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise MediaError(f"{host}: the URL's port is not a number") from None
    literal = _ip(host)
    try:
        addresses = [literal] if literal is not None else await _resolve(host, port)
    except MediaError:
        if unresolved_ok:
            return
        raise
    for ip in addresses:
        kind = why_blocked(ip)
        if kind is not None:
            at = "" if literal is not None else f" (it resolves to {ip})"
            raise MediaError(
                f"refused to download from {host}{at}: {kind} address. tmy downloads "
                f"media only from public hosts; list {host!r} under {PRIVATE_HOSTS_KEY} "
                "in config/tmy.yaml to allow it"
            )


async def _resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to (MediaError when it resolves to none)."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise MediaError(
            f"cannot download from {host}: its name does not resolve ({exc})"
        ) from None
    found = [_ip(str(info[4][0])) for info in infos]
    addresses = [ip for ip in found if ip is not None]
    if not addresses:
        raise MediaError(f"cannot download from {host}: its name resolves to no address")
    return addresses
