"""HTTP: one request through the daemon's shared httpx client; JSON decoded.

Options: ``url`` (required), ``method`` (GET; POST when a body is given),
``headers``, ``params``, ``json``/``data`` bodies, the step's ``timeout`` (seconds, 10
for HTTP steps),
``result`` (``auto`` — JSON when the response is JSON, else text —, ``json``,
``text``, ``status`` or ``full`` = {status, headers, body}), ``fail_on_status``
(true: a 4xx/5xx status is an error carrying the start of the body),
``max_response_bytes`` (the body is read up to this many bytes, then the step
fails as "too large" — a server streaming forever must not fill the daemon's
memory) and ``raw_url`` (see below).

With a POST/PUT/PATCH and no ``json``/``data``, the step input is the body:
maps and lists as JSON, anything else as text.

**References in ``url`` are percent-encoded for their position.** The literal
text of the template is kept as written; each ``{reference}`` is encoded so
that it stays inside the part of the URL it stands in:

* in the path, the query or the fragment: every character but ``A-Z a-z 0-9
  - . _ ~`` is percent-encoded, so ``/ ? # & =`` in a user's text cannot start a
  new segment or parameter; a path segment that a reference makes ``.`` or
  ``..`` is refused (it would leave the path the rule wrote);
* in the host (``http://{host}:8080/…``): inserted as is, but it may hold only
  host-name characters;
* at the very start (``{endpoint}/v1/{QUESTION}``): inserted as is — the rule's
  own base URL. Whoever controls that value chooses the server; never start a
  URL with a user's text.

``raw_url: true`` pastes every reference in as written (the rule author takes
responsibility). For query parameters ``params:`` is usually clearer anyway.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from tmy import bodies, redact
from tmy.errors import ExecutorError
from tmy.executors.registry import Option
from tmy.logs import preview
from tmy.types import StepContext
from tmy.values.compiled import Template, Value, to_text

if TYPE_CHECKING:  # deferred: httpx is ~50 ms of every CLI start
    import httpx

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
RESULTS = ("auto", "json", "text", "status", "full")
DEFAULT_TIMEOUT = 10.0
DEFAULT_MAX_RESPONSE_BYTES = 5 * 1024 * 1024  # a step's body cap unless it sets its own
MAX_RESPONSE_BYTES_CEILING = 256 * 1024 * 1024  # no step (nor a model's tool call) may ask more

OPTIONS = {
    "url": Option(
        str,
        required=True,
        evaluate=False,  # rendered here: each reference is encoded for its place in the URL
        doc="the URL; references are percent-encoded for their position",
    ),
    "method": Option(str, default=None, doc="GET, POST, …"),
    "headers": Option(dict, default=None),
    "params": Option(dict, default=None, doc="query parameters (URL-encoded for you)"),
    "json": Option(None, default=None, doc="JSON body"),
    "data": Option(None, default=None, doc="form (map) or raw text body"),
    "result": Option(str, default="auto", doc=" | ".join(RESULTS)),
    "fail_on_status": Option(bool, default=True),
    "max_response_bytes": Option(
        int, default=DEFAULT_MAX_RESPONSE_BYTES, doc="the response body is read up to this size"
    ),
    "raw_url": Option(bool, default=False, doc="true: references in url are not encoded"),
}

_HOST_RE = re.compile(r"[A-Za-z0-9._:\[\]-]*")  # names, IPv4/IPv6 addresses, a port


def check(cfg: dict[str, Any]) -> None:
    """The load-time check of a step's constant options (it also registers their secrets)."""
    validate(cfg)
    url = cfg.get("url")
    if isinstance(url, str):
        redact.add_url(url)
    for key in ("headers", "params"):
        given = cfg.get(key)
        if isinstance(given, dict):
            for name, value in given.items():
                if isinstance(value, str):
                    redact.add_header(str(name), value)


def validate(cfg: dict[str, Any]) -> None:
    """Refuse options no request can be made with (at load for constants, else per run)."""
    method = cfg.get("method")
    if isinstance(method, str) and method.upper() not in METHODS:
        raise ValueError(f"method {method!r} must be one of {', '.join(METHODS)}")
    if cfg.get("result", "auto") not in RESULTS:
        raise ValueError(f"result {cfg['result']!r} must be one of {', '.join(RESULTS)}")
    url = cfg.get("url")
    if isinstance(url, str) and not url.startswith(("http://", "https://", "{")):
        raise ValueError(f"url {url!r} must start with http:// or https://")
    cap = cfg.get("max_response_bytes", DEFAULT_MAX_RESPONSE_BYTES)
    if cap is not None and (
        not isinstance(cap, int)
        or isinstance(cap, bool)
        or not 0 < cap <= MAX_RESPONSE_BYTES_CEILING
    ):
        raise ValueError(
            f"max_response_bytes {cap!r} must be a whole number of bytes from 1 to "
            f"{MAX_RESPONSE_BYTES_CEILING}"
        )


async def http_request(value: Any, cfg: dict[str, Any], ctx: StepContext) -> Any:
    import httpx  # deferred: httpx is ~50 ms of every CLI start

    url = await _url(cfg["url"], ctx, raw=cfg.get("raw_url") is True)
    cfg = {**cfg, "url": url}
    try:
        validate(cfg)
    except ValueError as exc:
        raise ExecutorError(str(exc)) from None
    if not url.startswith(("http://", "https://")):
        raise ExecutorError(f"url {preview(url, 200)!r} must start with http:// or https://")
    body_json, body_data = cfg.get("json"), cfg.get("data")
    method = (
        cfg.get("method") or ("POST" if body_json is not None or body_data is not None else "GET")
    ).upper()
    content = None
    if method in ("POST", "PUT", "PATCH") and body_json is None and body_data is None:
        if isinstance(value, (dict, list)):
            body_json = value
        elif value not in (None, ""):
            content = value if isinstance(value, (str, bytes)) else str(value)
    kwargs: dict[str, Any] = {"headers": cfg.get("headers"), "params": cfg.get("params")}
    if body_json is not None:
        kwargs["json"] = body_json
    elif isinstance(body_data, dict):
        kwargs["data"] = body_data
    elif body_data is not None:
        content = body_data if isinstance(body_data, (str, bytes)) else str(body_data)
    if content is not None:
        kwargs["content"] = content
    timeout = float(ctx.step_timeout or DEFAULT_TIMEOUT)
    cap = cfg.get("max_response_bytes") or DEFAULT_MAX_RESPONSE_BYTES
    shown = redact.safe_url(url)
    secrets = _request_secrets(cfg)

    def fail(message: str) -> ExecutorError:
        # an upstream may echo the credentials it was sent: never let them into STEP_ERROR
        return ExecutorError(redact.redact(message, secrets))

    client: httpx.AsyncClient = ctx.services.http
    try:
        async with client.stream(method, url, timeout=timeout, **kwargs) as response:
            raw = await _read(response, cap, f"{method} {shown}")
    except httpx.TimeoutException:
        raise fail(f"HTTP {method} {shown} timed out after {timeout:g} s") from None
    except httpx.HTTPError as exc:
        raise fail(f"HTTP {method} {shown} failed: {type(exc).__name__}: {exc}") from None
    except ExecutorError as exc:
        raise fail(str(exc)) from None
    ctx.record.extra["status"] = response.status_code
    if cfg.get("fail_on_status", True) and response.status_code >= 400:
        raise fail(
            f"HTTP {response.status_code} from {method} {shown}: "
            f"{preview(_text(response, raw), 300)}"
        )
    mode = cfg.get("result") or "auto"
    if mode == "status":
        return response.status_code
    if mode == "text":
        return _text(response, raw)
    is_json = "json" in response.headers.get("content-type", "")
    body: Any
    if mode == "json" or (mode in ("auto", "full") and is_json):
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            raise fail(
                f"response of {method} {shown} is not JSON: {preview(_text(response, raw), 300)}"
            ) from None
    else:
        body = _text(response, raw)
    if mode == "full":
        return {"status": response.status_code, "headers": dict(response.headers), "body": body}
    return body


async def _read(response: httpx.Response, cap: int, what: str) -> bytes:
    """The decoded body, read up to ``cap`` bytes; more than that is an error, and reading stops."""
    declared = response.headers.get("content-length", "")
    said = f" (it declares {declared} bytes)" if declared.isdigit() and int(declared) > cap else ""

    def too_large() -> ExecutorError:
        return ExecutorError(
            f"the response of {what} is too large: more than {cap} bytes{said}; "
            "stopped reading (raise the step's max_response_bytes if it is expected)"
        )

    try:
        return await bodies.read_capped(response, cap, too_large)
    except bodies.BadEncoding as exc:
        raise ExecutorError(f"the response of {what} cannot be read: {exc}") from None


def _text(response: httpx.Response, raw: bytes) -> str:
    """The body as text, in the charset the response names (UTF-8 when it names none)."""
    try:
        return raw.decode(response.charset_encoding or "utf-8", errors="replace")
    except LookupError:  # an unknown charset name
        return raw.decode("utf-8", errors="replace")


def _request_secrets(cfg: dict[str, Any]) -> list[str]:
    """Credentials this request sends (computed header values too): kept out of errors."""
    found: list[str] = []
    url = cfg.get("url")
    if isinstance(url, str):  # ``?api_key=…`` written into the URL is as secret as in params
        for pair in url.partition("?")[2].partition("#")[0].split("&"):
            name, _, value = pair.partition("=")
            found.extend(redact.header_secrets(unquote(name), value))
            found.extend(redact.header_secrets(unquote(name), unquote(value)))
    for key in ("headers", "params"):
        given = cfg.get(key)
        if isinstance(given, dict):
            for name, value in given.items():
                found.extend(redact.header_secrets(str(name), to_text(value)))
    return found


# -- the url template ------------------------------------------------------------------------


async def _url(given: Any, ctx: StepContext, *, raw: bool) -> str:
    """The step's ``url`` rendered, each reference encoded for its position (unless ``raw``)."""
    if not isinstance(given, Value):  # a literal (a model's tool call passes the whole URL)
        return to_text(given)
    scope = await ctx.scope(given.names)
    if raw or not isinstance(given, Template):
        value = given.evaluate(scope)
        if not isinstance(value, str):
            raise ExecutorError(f"option 'url' of HTTP must be str, got {type(value).__name__}")
        return value
    return render_url(given, scope)


def render_url(template: Template, scope: Any) -> str:
    """``template`` with each reference percent-encoded for the part of the URL it stands in."""
    out: list[str] = []
    length = 0
    in_path: list[tuple[int, int]] = []  # spans of references in the path, for the dot check
    for part in template.parts:
        if isinstance(part, str):
            out.append(part)
            length += len(part)
            continue
        # one reference rendered alone: conversions, format specs and errors as in any template
        text = Template(template.source, (part,), template.names).render(scope)
        where = _position("".join(out))
        if where == "host":
            if not _HOST_RE.fullmatch(text):
                raise ExecutorError(
                    f"url {template.source!r}: a reference in the host part may hold only "
                    f"host name characters, got {preview(text, 80)!r}"
                )
        elif where != "base":
            text = quote(text, safe="")
            if where == "path":
                in_path.append((length, length + len(text)))
        out.append(text)
        length += len(text)
    url = "".join(out)
    if in_path:
        _refuse_dot_segments(url, in_path, template.source)
    return url


def _position(prefix: str) -> str:
    """Which part of a URL the text after ``prefix`` belongs to."""
    scheme = prefix.find("://")
    if scheme == -1:
        return "base"  # the start of the URL: the rule's own endpoint
    rest = prefix[scheme + 3 :]
    if "#" in rest:
        return "fragment"
    if "?" in rest:
        return "query"
    if "/" in rest:
        return "path"
    return "host"


def _refuse_dot_segments(url: str, spans: list[tuple[int, int]], source: str) -> None:
    """A path segment a reference made ``.`` or ``..`` would climb out of the rule's path.

    (httpx and aiohttp normalise ``%2E%2E`` to ``..`` as well, so encoding cannot help.)
    """
    start = url.find("/", url.find("://") + 3)
    if start == -1:
        return
    end = len(url)
    for stop in "?#":
        at = url.find(stop, start)
        if at != -1:
            end = min(end, at)
    pos = start + 1
    for segment in url[start + 1 : end].split("/"):
        seg_end = pos + len(segment)
        if unquote(segment) in (".", "..") and any(a <= seg_end and b >= pos for a, b in spans):
            raise ExecutorError(
                f"url {source!r}: a reference made the path segment {segment!r}; "
                "'.' or '..' would leave the path the rule wrote (refused)"
            )
        pos = seg_end + 1
