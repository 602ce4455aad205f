"""What every keyed JSON route on the listener shares (the admin routes reuse it).

:func:`api_key_problem` is the one API-key check (``Authorization: Bearer
<key>``, every key compared in constant time); :func:`key_identity` names a key
without showing it, and :func:`admin_as` is whom ``admins:`` judge for a request
on ``/v1/*`` (its key's identity: the user a key holder names is only claimed);
:func:`dumps` writes readable UTF-8 JSON; :func:`json_error` is tmy's own error
body; :func:`is_json_route` says which requests must be ``Content-Type:
application/json`` (the listener refuses anything else with 415 before reading the body).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson

from tmy.config.adapters import parse_listen as _listen_address
from tmy.errors import AdapterError
from tmy.message import Attachment

if TYPE_CHECKING:  # deferred: aiohttp is ~120 ms of every CLI start
    from aiohttp import web

# Routes whose body is JSON: anything else is refused (415) before it is read.
JSON_ROUTES = frozenset({"/v1/messages", "/v1/chat/completions"})
JSON_ROUTE_PREFIXES = ("/admin/",)  # every admin route takes JSON (reload, commands/…)
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def dumps(obj: Any) -> str:
    """Readable UTF-8 JSON (中文, ·); ASCII escapes if a lone surrogate slipped in."""
    text = json.dumps(obj, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(obj)
    return text


async def json_of(request: web.Request) -> Any:
    """The request's JSON body. UTF-8 (what nearly every client sends) is read by orjson;
    another charset, or a body orjson refuses, by ``request.json()`` as before — so NaN,
    integers beyond 64 bits, lone surrogates and nesting past orjson's limit read (or
    fail) exactly as they did. The stdlib reader was ~1% of a served LLM call's CPU."""
    if (request.charset or "utf-8").lower() in ("utf-8", "utf8"):
        try:
            return orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            pass
    return await request.json()


def bearer(request: web.Request) -> str:
    """The token of ``Authorization: Bearer <token>`` ("" without one)."""
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return given.strip() if scheme.lower() == "bearer" else ""


def api_key_problem(request: web.Request, keys: Sequence[str]) -> str | None:
    """Why ``request`` may not use a keyed route (None when it may, or no keys are set).

    Every configured key is compared in constant time, so a timing probe learns
    neither which key is close nor how many there are.
    """
    if not keys:
        return None
    given = bearer(request)
    if not given:
        return "missing API key: send 'Authorization: Bearer <key>'"
    # bytes that are not UTF-8 arrive as lone surrogates: compare them as the raw bytes
    given_bytes = given.encode(errors="surrogateescape")
    ok = False
    for key in keys:
        ok |= hmac.compare_digest(given_bytes, key.encode())
    return None if ok else "invalid API key"


def key_identity(key: str) -> str:
    """A stable, non-secret user id for an API key: ``key:`` + 12 hex digits of its SHA-256."""
    digest = hashlib.sha256(key.encode(errors="surrogateescape")).hexdigest()
    return f"key:{digest[:12]}"


def admin_as(request: web.Request, keys: Sequence[str]) -> str:
    """Whom ``admins:`` judge for a request whose user is named, not proved (``X-Tmy-User``,
    a body's ``user``): its API key's identity, or "" (no one) without keys — a key holder
    may speak for any user, but admin rights are the credential's (:attr:`Message.admin_as`).
    Call it after :func:`api_key_problem` passed."""
    token = bearer(request) if keys else ""
    return key_identity(token) if token else ""


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``:PORT``) → (host, port); AdapterError when it is neither.

    The config's own reading (:func:`tmy.config.adapters.parse_listen`, which checked
    ``adapters.http.listen`` at load) with the listener's error class.
    """
    return _listen_address(listen, AdapterError)


def is_json_route(method: str, path: str) -> bool:
    """Whether a request's body (when it has one) must be JSON."""
    return method in BODY_METHODS and (path in JSON_ROUTES or path.startswith(JSON_ROUTE_PREFIXES))


def json_error(status: int, message: str) -> web.Response:
    """tmy's error body (the ``/v1/messages`` answer's shape) with ``status``."""
    from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

    return web.json_response(
        {"rule": None, "answer": "", "error": message, "trace_id": None},
        status=status,
        dumps=dumps,
    )


def picture(url: Any) -> Attachment | None:
    """A picture a caller sent by URL (``/v1/messages`` ``images``, an OpenAI ``image_url``
    part) as the message's image attachment (IMAGES): an http(s) URL or a ``data:`` URL,
    handed to an LLM step as it is. None when ``url`` is neither."""
    if not isinstance(url, str):
        return None
    if url[:5].lower() == "data:":
        mime = url[5:].split(",", 1)[0].split(";", 1)[0].strip().lower()
        return Attachment("image", url=url, mime=mime, size=len(url.split(",", 1)[-1]) * 3 // 4)
    if url.startswith(("http://", "https://")):
        return Attachment("image", url=url)
    return None
