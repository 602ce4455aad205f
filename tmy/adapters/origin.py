"""Which ``Host`` a request may name, and which ``Origin`` may change state.

A daemon on loopback without keys trusts whoever reaches it — but a web page
the operator visits reaches it too. Two attacks, two checks:

* **Cross-site requests.** A page can POST ``text/plain`` or a form to
  ``http://127.0.0.1:8080`` without reading the answer. Browsers say where a
  request comes from (``Origin``, ``Sec-Fetch-Site``); a state-changing request
  whose origin is not this listener is refused (403). Clients that are not
  browsers send neither header and pass.
* **DNS rebinding.** A page on ``evil.example`` re-resolves its own name to
  127.0.0.1 and then reads replies same-origin; the only trace is the ``Host``
  header, which names ``evil.example``. So ``Host`` must name this listener:

  - listening on a specific address: that address, and when it is loopback also
    ``localhost`` and any loopback IP literal;
  - listening on a wildcard (``0.0.0.0``, ``::``): any IP literal and
    ``localhost`` — an IP literal cannot be rebound, so every address of the
    machine works, while a *name* (a reverse proxy passing its public host, a
    Docker service name, ``host.docker.internal``) must be listed;
  - always: the names in ``adapters.http.allowed_hosts`` (``"*"`` turns the
    check off, for a listener behind a proxy that checks ``Host`` itself), and
    the host of the Telegram ``webhook_url`` when the webhook is served here
    (Telegram posts through the operator's proxy, which passes that name).

  The port is not compared: a port mapping (Docker ``-p 18080:8080``) changes
  it, and a rebinding page is caught by its name alone.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from tmy.config import Settings

WILDCARDS = frozenset({"0.0.0.0", "::", ""})
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def split_host(value: str) -> tuple[str, str]:
    """``Host`` header → (lower-case name without brackets or trailing dot, port text)."""
    value = value.strip().lower()
    if value.startswith("["):  # [::1]:8080
        name, _, rest = value[1:].partition("]")
        return name, rest[1:] if rest.startswith(":") else ""
    if value.count(":") == 1:
        name, _, port = value.partition(":")
        return name.rstrip("."), port
    return value.rstrip("."), ""  # a bare name, or a bare IPv6 literal


def allowed_hosts_of(settings: Settings) -> tuple[str, ...]:
    """``adapters.http.allowed_hosts`` plus the names the config itself says are this daemon's
    (the Telegram webhook's public host when the webhook is on this listener)."""
    hosts = list(settings.adapters.http.allowed_hosts)
    telegram = settings.adapters.telegram
    if telegram.enabled and telegram.mode == "webhook":
        try:
            name = urlsplit(str(telegram.webhook_url or "")).hostname
        except ValueError:
            name = None
        if name and name not in hosts:
            hosts.append(name)
    return tuple(hosts)


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return None


class HostPolicy:
    """The ``Host`` and ``Origin`` checks of one listener (see the module docstring)."""

    def __init__(self, listen_host: str, allowed_hosts: Sequence[str] = ()) -> None:
        self.listen = listen_host.strip("[]").lower()
        self.allowed = frozenset(split_host(h)[0] for h in allowed_hosts if h.strip() != "*")
        self.any_host = any(h.strip() == "*" for h in allowed_hosts)
        listen_ip = _ip(self.listen)
        self.wildcard = self.listen in WILDCARDS
        self.loopback = self.listen == "localhost" or bool(listen_ip and listen_ip.is_loopback)

    def host_ok(self, name: str) -> bool:
        if self.any_host or name in self.allowed or name == self.listen:
            return True
        ip = _ip(name)
        if self.wildcard:
            return name == "localhost" or ip is not None
        if self.loopback:
            return name == "localhost" or bool(ip and ip.is_loopback)
        return False

    def host_problem(self, header: str | None) -> str | None:
        """Why a request naming ``header`` is not for this listener (None: it is).

        No ``Host`` at all (an HTTP/1.0 tool) passes: browsers always send one.
        """
        if header is None:
            return None
        name, _ = split_host(header)
        if self.host_ok(name):
            return None
        return (
            f"this listener does not serve the host {name!r} (Host header); "
            "add it to adapters.http.allowed_hosts if it is this daemon's name"
        )

    def cross_site_problem(self, headers: Mapping[str, str]) -> str | None:
        """Why a state-changing request looks sent by another site's page (None: it does not).

        Same origin means the ``Origin``'s host and port equal the ``Host``
        header's (the page was served by this listener), or the origin's host is
        an ``allowed_hosts`` name (a proxy that rewrites ``Host``).
        """
        if headers.get("Sec-Fetch-Site", "").strip().lower() == "cross-site":
            return "cross-site request refused (Sec-Fetch-Site: cross-site)"
        origin = headers.get("Origin")
        if origin is None:
            return None  # not a browser, or a same-origin GET-like request
        if self.any_host:
            return None
        refused = f"cross-site request refused (Origin: {origin[:100]})"
        try:
            parts = urlsplit(origin.strip())
            origin_name = (parts.hostname or "").rstrip(".")
            origin_port = parts.port or DEFAULT_PORTS.get(parts.scheme)
        except ValueError:
            return refused
        if not origin_name:  # "null": a sandboxed frame, a file:// page, a redirect
            return refused
        if origin_name in self.allowed:
            return None
        host, port_text = split_host(headers.get("Host", ""))
        port = int(port_text) if port_text.isdigit() else DEFAULT_PORTS.get(parts.scheme)
        if origin_name == host and origin_port == port:
            return None
        return refused
