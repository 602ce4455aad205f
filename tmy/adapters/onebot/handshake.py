"""The reverse endpoint's handshake: who may open the socket, checked before the upgrade.

In order: the access token (``Authorization: Bearer <t>`` — ``Token <t>`` too,
as go-cqhttp sent it — or ``?access_token=<t>``; 401 when missing, 403 when
wrong, compared in constant time), ``X-Self-ID`` (400 when missing or not an
id) and ``X-Client-Role`` (only a Universal client is served; a missing role
is taken as Universal).
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import TYPE_CHECKING

from tmy.adapters.http import parse_listen
from tmy.adapters.onebot.events import ID
from tmy.errors import AdapterError

if TYPE_CHECKING:  # deferred: aiohttp is ~120 ms of every CLI start
    from aiohttp import web

_LOOPBACK_NAMES = ("localhost", "")


def refusal(request: web.Request, token: str) -> tuple[int, str] | None:
    """(status, why) when a reverse connection must be refused before the upgrade."""
    if token:
        given = _given_token(request)
        if given is None:
            return 401, "missing access token: send 'Authorization: Bearer <token>'"
        if not hmac.compare_digest(given.encode(errors="surrogateescape"), token.encode()):
            return 403, "wrong access token"
    self_id = request.headers.get("X-Self-ID", "").strip()
    if not self_id:
        return 400, "missing X-Self-ID header (the bot account's QQ number)"
    if not ID.fullmatch(self_id):
        return 400, f"X-Self-ID {self_id[:70]!r} is not an account id"
    role = request.headers.get("X-Client-Role", "Universal").strip()
    if role.lower() != "universal":
        return 400, (
            f"X-Client-Role {role[:20]!r} is not supported: tmy needs one Universal "
            "connection (events and API on one socket)"
        )
    return None


def _given_token(request: web.Request) -> str | None:
    """The token from ``Authorization: Bearer|Token <t>``, else ``?access_token=``."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() in ("bearer", "token") and value.strip():
        return value.strip()
    query = request.query.get("access_token", "")
    return query or None


def exposed(listen: str) -> bool:
    """True when the HTTP listener is reachable from other machines."""
    try:
        host, _ = parse_listen(listen)
    except AdapterError:
        return False
    if host in _LOOPBACK_NAMES:
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True
