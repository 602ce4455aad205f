"""The webhook (``mode: webhook``): Feishu POSTs each event to ``/feishu/events``.

What is checked before anything runs (:func:`open_request`):

* with ``encrypt_key`` set, a request carrying ``X-Lark-Signature`` (with
  ``X-Lark-Request-Timestamp``/``-Nonce``; one missing: 401) must have it equal
  sha256(timestamp + nonce + encrypt_key + body) (wrong: 403) — checked before
  the body is decrypted; the body must be ``{"encrypt": …}`` and decrypt with the
  key to a JSON object, and an unsigned one may only be the one-off URL
  verification: anything else is one and the same 401, whatever it decrypted to
  (a tampered body learns nothing of its plaintext);
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
UNREADABLE = "a body encrypted with encrypt_key (and signed, but for the URL verification)"


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
    except (ValueError, RecursionError):  # RecursionError: JSON nested past ~1,000 levels
        return Opened(400, {"error": "not JSON"})
    if not isinstance(outer, dict):
        return Opened(400, {"error": "not a JSON object"})
    payload: dict[str, Any] | None = outer
    if encrypt_key:
        signed_request = any(headers.get(h) is not None for h in (SIGNATURE, TIMESTAMP, NONCE))
        if signed_request:  # the signature first: nothing altered is ever decrypted
            problem = _signature_problem(body, headers, encrypt_key)
            if problem is not None:
                return problem
        payload = _decrypted(outer, encrypt_key)
        if payload is None or (not signed_request and payload.get("type") != "url_verification"):
            return Opened(401, {"error": UNREADABLE})
    verifying = payload.get("type") == "url_verification"
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


def _decrypted(outer: dict[str, Any], encrypt_key: str) -> dict[str, Any] | None:
    """The JSON object sealed in ``{"encrypt": …}``; None for anything else — a bad
    base64, length, padding, UTF-8 or JSON, or JSON that is no object all look the same
    to the sender, so a tampered body learns nothing of what it decrypted to."""
    encrypted = outer.get("encrypt")
    if not isinstance(encrypted, str):
        return None
    try:
        payload = json.loads(decrypt(encrypted, encrypt_key))
    except (AdapterError, ValueError, RecursionError):
        return None
    return payload if isinstance(payload, dict) else None


def _signature_problem(body: bytes, headers: Mapping[str, str], key: str) -> Opened | None:
    given, timestamp, nonce = headers.get(SIGNATURE), headers.get(TIMESTAMP), headers.get(NONCE)
    if not given or timestamp is None or nonce is None:
        return Opened(401, {"error": "no X-Lark-Signature"})
    if not signed(given, timestamp, nonce, key, body):
        return Opened(403, {"error": "wrong X-Lark-Signature"})
    return None
