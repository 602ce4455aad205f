"""Configured secrets, and their removal from every error and log line.

An upstream that echoes the API key it was sent (``Incorrect API key provided:
sk-…``) would otherwise carry the key into ``STEP_ERROR``, the reply's
``error`` field and the log; a password in a URL would be logged with it.

The secrets tmy is configured with — LLM API keys (read from their
environment variables), passwords in URLs (``llm`` base URLs, the store URL),
credential-looking headers and query parameters of HTTP steps — are registered
here when the configuration and the rules load (:func:`add`, :func:`add_url`,
:func:`add_header`). :func:`redact` replaces each of them by ``***``; the log
renderer, the scheduler (``STEP_ERROR``) and the executors that build error
messages from what a server said call it. With nothing registered it returns
at once, so the log's hot path pays nothing.

Values shorter than :data:`MIN_SECRET_CHARS` (header values: shorter than
:data:`MIN_HEADER_SECRET_CHARS`) are not treated as secrets: replacing every
``"none"`` in every log line would destroy the log and hide nothing worth
hiding.
"""

from __future__ import annotations

import json
import re
from urllib.parse import unquote, urlsplit

import orjson

MASK = "***"
MIN_SECRET_CHARS = 6  # API keys, passwords in URLs
MIN_HEADER_SECRET_CHARS = 8  # values of credential-named headers ("X-Auth-Mode: none" is none)

# Header / query parameter names whose values are credentials.
_SECRET_NAME_RE = re.compile(
    r"auth|token|secret|passw|api[-_]?key|access[-_]?key|cookie|signature",
    re.IGNORECASE,
)

_secrets: set[str] = set()
_text: tuple[str, ...] = ()  # longest first, so a secret containing another goes whole
LINE_SECRETS: tuple[bytes, ...] = ()  # the same, as they appear inside a JSON log line


def add(secret: str | None, min_chars: int = MIN_SECRET_CHARS) -> None:
    """Register one secret value (values shorter than ``min_chars`` are ignored)."""
    if not isinstance(secret, str):
        return
    secret = secret.strip()
    if len(secret) < min_chars or secret in _secrets:
        return
    _secrets.add(secret)
    _rebuild()


def forget(secret: str | None) -> None:
    """Stop hiding ``secret``: a credential that was replaced and can no longer be used
    (a platform's access token renewed every two hours). Without this every renewal
    would be added for good, and each log line checked against a set that only grows."""
    if isinstance(secret, str) and secret.strip() in _secrets:
        _secrets.discard(secret.strip())
        _rebuild()


def _rebuild() -> None:
    """The registered secrets as :func:`redact` and :func:`redact_line` search for them."""
    global _text, LINE_SECRETS
    _text = tuple(sorted(_secrets, key=len, reverse=True))
    forms: set[bytes] = set()
    for s in _text:
        forms.add(s.encode("utf-8", errors="surrogatepass"))
        try:  # what orjson writes for it inside a string, and json.dumps' ASCII form
            forms.add(orjson.dumps(s)[1:-1])
        except orjson.JSONEncodeError:
            pass
        forms.add(json.dumps(s)[1:-1].encode())
    LINE_SECRETS = tuple(sorted(forms, key=len, reverse=True))


class RenewedSecret:
    """A credential a platform renews every few hours (an access token): the current one
    and the one before it (still valid for a while, maybe in a request in flight) are
    hidden; older ones are forgotten (:func:`forget`)."""

    __slots__ = ("_current", "_previous")

    def __init__(self) -> None:
        self._current = ""
        self._previous = ""

    def renew(self, value: str) -> None:
        """``value`` is the credential now; hide it, and forget the one two renewals ago."""
        if value == self._current:
            return
        add(value)
        if self._previous and self._previous != value:
            forget(self._previous)
        self._previous, self._current = self._current, value


def add_url(url: str | None) -> None:
    """Register the password of ``scheme://user:password@host`` (as written and decoded)."""
    if not isinstance(url, str) or "@" not in url:
        return
    try:
        password = urlsplit(url).password
    except ValueError:
        return
    if password:
        add(password)
        add(unquote(password))


def is_secret_name(name: str) -> bool:
    """Does a header or query parameter called ``name`` carry a credential?"""
    return bool(_SECRET_NAME_RE.search(name))


def header_secrets(name: str, value: str) -> list[str]:
    """The secret parts of a credential header's value: ``Bearer sk-1`` → the whole and ``sk-1``."""
    if not is_secret_name(name) or not isinstance(value, str):
        return []
    parts = value.split()
    found = [value]
    if len(parts) == 2:  # "<scheme> <credentials>": an upstream may echo only the second
        found.append(parts[1])
    return found


def add_header(name: str, value: str) -> None:
    """Register the value of a header (or query parameter) whose name says it is a credential."""
    for secret in header_secrets(name, value):
        add(secret, MIN_HEADER_SECRET_CHARS)


def redact(text: str, extra: tuple[str, ...] | list[str] = ()) -> str:
    """``text`` with every registered secret (and each of ``extra``) replaced by ``***``.

    ``extra`` holds credentials known only to the caller (the value of a
    credential header that a template computed for this one request).
    """
    secrets = _text
    if extra:
        more = {e for e in extra if isinstance(e, str) and len(e) >= MIN_HEADER_SECRET_CHARS}
        secrets = tuple(sorted(more.union(_text), key=len, reverse=True))
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def redact_line(line: bytes) -> bytes:
    """A rendered JSON log line with every registered secret replaced (the log sink's filter)."""
    for secret in LINE_SECRETS:
        if secret in line:
            line = line.replace(secret, b"***")
    return line


def active() -> bool:
    """Are any secrets registered? (The log renderer skips :func:`redact_line` otherwise.)"""
    return bool(LINE_SECRETS)


def safe_url(url: str) -> str:
    """``url`` with the password of its user info replaced by ``***``, for logs and errors."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    end = len(rest)
    for stop in "/?#":
        at = rest.find(stop)
        if at != -1:
            end = min(end, at)
    authority = rest[:end]
    if "@" not in authority:
        return url
    userinfo, host = authority.rsplit("@", 1)
    user = userinfo.split(":", 1)[0]
    masked = f"{user}:{MASK}" if ":" in userinfo else MASK
    return f"{scheme}://{masked}@{host}{rest[end:]}"
