"""The webhook (``mode: webhook``): Feishu POSTs each event to ``/feishu/events``.

What is checked before anything runs (:func:`open_request`):

* with ``encrypt_key`` set the body must be ``{"encrypt": …}`` (a plain body is
  refused 401) and decrypt with it (else 401); an event (not the one-off URL
  verification) must carry ``X-Lark-Request-Timestamp``/``-Nonce`` and
  ``X-Lark-Signature`` (missing: 401) equal to sha256(timestamp + nonce +
  encrypt_key + body) (wrong: 403);
* the verification token: ``header.token`` (2.0 schema) or ``token`` (1.0 and the
  URL verification) must equal ``verification_token`` (missing: 401, wrong: 403);
* ``{"type": "url_verification", "challenge": …}`` is answered with the challenge.

A request refused here runs no rule; the caller answers the rest with 200 at
once and runs the event in the background (Feishu retries an event not
answered within 3 s — retries are deduplicated by ``event_id``).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tmy.adapters.feishu.crypto import decrypt, signed
from tmy.errors import AdapterError

SIGNATURE = "X-Lark-Signature"
TIMESTAMP = "X-Lark-Request-Timestamp"
NONCE = "X-Lark-Request-Nonce"


@dataclass(slots=True)
class Opened:
    """The outcome: ``status`` to answer with; ``reply`` its JSON; ``event`` the event
    to run (only when status is 200 and it is not the URL verification)."""

    status: int
    reply: dict[str, Any]
    event: dict[str, Any] | None = None


def open_request(
    body: bytes, headers: Mapping[str, str], verification_token: str, encrypt_key: str
) -> Opened:
    """Check, decrypt and read one webhook request (see the module docstring)."""
    try:
        outer = json.loads(body)
    except ValueError:
        return Opened(400, {"error": "not JSON"})
    if not isinstance(outer, dict):
        return Opened(400, {"error": "not a JSON object"})
    payload = outer
    if encrypt_key:
        encrypted = outer.get("encrypt")
        if not isinstance(encrypted, str):
            return Opened(401, {"error": "an encrypted body is expected (encrypt_key is set)"})
        try:
            payload = json.loads(decrypt(encrypted, encrypt_key))
        except (AdapterError, ValueError):
            return Opened(401, {"error": "the body does not decrypt with encrypt_key"})
        if not isinstance(payload, dict):
            return Opened(400, {"error": "not a JSON object"})
    verifying = payload.get("type") == "url_verification"
    if encrypt_key and not verifying:
        problem = _signature_problem(body, headers, encrypt_key)
        if problem is not None:
            return problem
    header = payload.get("header")
    token = header.get("token") if isinstance(header, dict) else payload.get("token")
    if not isinstance(token, str) or not token:
        return Opened(401, {"error": "no verification token"})
    given = token.encode("utf-8", "surrogatepass")  # JSON may hold a lone \ud800: no 500
    if not hmac.compare_digest(given, verification_token.encode()):
        return Opened(403, {"error": "wrong verification token"})
    if verifying:
        return Opened(200, {"challenge": payload.get("challenge", "")})
    return Opened(200, {}, payload)


def _signature_problem(body: bytes, headers: Mapping[str, str], key: str) -> Opened | None:
    given, timestamp, nonce = headers.get(SIGNATURE), headers.get(TIMESTAMP), headers.get(NONCE)
    if not given or timestamp is None or nonce is None:
        return Opened(401, {"error": "no X-Lark-Signature"})
    if not signed(given, timestamp, nonce, key, body):
        return Opened(403, {"error": "wrong X-Lark-Signature"})
    return None
