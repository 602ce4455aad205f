"""What a POST to ``/qq/webhook`` holds, read without trusting it.

The adapter checks the signature (:mod:`~tmy.adapters.qq.signing`) before it
reads anything of a body but QQ's unsigned callback-URL validation; these
helpers never raise, so a hostile body is a 4xx and never a 500.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from tmy.adapters.dedup import DEDUP_WINDOW

# seconds a signed webhook stays good: well inside the dedup window, so a replay is
# either a duplicate or stale, and 5 minutes of clock difference with QQ still pass
MAX_AGE = DEDUP_WINDOW / 2
# an unsigned validation is signed for only when its two fields are plain letters and
# digits: the signature is then over ``event_ts + plain_token``, which no JSON object
# (a forged event body) can equal
_PLAIN = re.compile(r"[A-Za-z0-9]{1,128}")


def age_of(timestamp: str) -> float:
    """Seconds since ``timestamp`` (QQ's Unix seconds); 0 for another form (it was signed)."""
    try:
        return time.time() - float(timestamp)
    except ValueError:
        return 0.0


def json_object(body: bytes) -> dict[str, Any] | None:
    """``body`` as a JSON object, or None (not JSON, not an object, nested too deep)."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return payload if isinstance(payload, dict) else None


def validation(payload: dict[str, Any] | None) -> tuple[str, str] | None:
    """``(event_ts, plain_token)`` of an op 13 whose two fields are strings of plain
    letters and digits, else None."""
    if payload is None or payload.get("op") != 13 or not isinstance(payload.get("d"), dict):
        return None
    ts, token = payload["d"].get("event_ts"), payload["d"].get("plain_token")
    if all(isinstance(v, str) and _PLAIN.fullmatch(v) for v in (ts, token)):
        return ts, token
    return None
