"""HTTP: one request through the daemon's shared httpx client; JSON decoded.

Options: ``url`` (required), ``method`` (GET; POST when a body is given),
``headers``, ``params``, ``json``/``data`` bodies, the step's ``timeout`` (seconds, 10
for HTTP steps),
``result`` (``auto`` — JSON when the response is JSON, else text —, ``json``,
``text``, ``status`` or ``full`` = {status, headers, body}), ``fail_on_status``
(true: a 4xx/5xx status is an error carrying the start of the body).

With a POST/PUT/PATCH and no ``json``/``data``, the step input is the body:
maps and lists as JSON, anything else as text.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from tmy.errors import ExecutorError
from tmy.executors.registry import Option
from tmy.logs import preview

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
RESULTS = ("auto", "json", "text", "status", "full")
DEFAULT_TIMEOUT = 10.0

OPTIONS = {
    "url": Option(str, required=True, doc="the URL; templates allowed"),
    "method": Option(str, default=None, doc="GET, POST, …"),
    "headers": Option(dict, default=None),
    "params": Option(dict, default=None, doc="query parameters (URL-encoded for you)"),
    "json": Option(None, default=None, doc="JSON body"),
    "data": Option(None, default=None, doc="form (map) or raw text body"),
    "result": Option(str, default="auto", doc=" | ".join(RESULTS)),
    "fail_on_status": Option(bool, default=True),
}


def check(cfg: dict[str, Any]) -> None:
    method = cfg.get("method")
    if isinstance(method, str) and method.upper() not in METHODS:
        raise ValueError(f"method {method!r} must be one of {', '.join(METHODS)}")
    if cfg.get("result", "auto") not in RESULTS:
        raise ValueError(f"result {cfg['result']!r} must be one of {', '.join(RESULTS)}")
    url = cfg.get("url")
    if isinstance(url, str) and not url.startswith(("http://", "https://", "{")):
        raise ValueError(f"url {url!r} must start with http:// or https://")


async def http_request(value: Any, cfg: dict[str, Any], ctx: Any) -> Any:
    check(cfg)
    url = str(cfg["url"])
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
    timeout = float(ctx.step.timeout or DEFAULT_TIMEOUT)
    client: httpx.AsyncClient = ctx.services.http
    try:
        response = await client.request(method, url, timeout=timeout, **kwargs)
    except httpx.TimeoutException:
        raise ExecutorError(f"HTTP {method} {url} timed out after {timeout:g} s") from None
    except httpx.HTTPError as exc:
        raise ExecutorError(f"HTTP {method} {url} failed: {type(exc).__name__}: {exc}") from None
    ctx.record.extra["status"] = response.status_code
    if cfg.get("fail_on_status", True) and response.status_code >= 400:
        raise ExecutorError(
            f"HTTP {response.status_code} from {method} {url}: {preview(response.text, 300)}"
        )
    mode = cfg.get("result") or "auto"
    if mode == "status":
        return response.status_code
    if mode == "text":
        return response.text
    is_json = "json" in response.headers.get("content-type", "")
    body: Any = response.text
    if mode == "json" or (mode == "auto" and is_json) or (mode == "full" and is_json):
        try:
            body = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            if mode == "json" or is_json:
                raise ExecutorError(
                    f"response of {method} {url} is not JSON: {preview(response.text, 300)}"
                ) from None
    if mode == "full":
        return {"status": response.status_code, "headers": dict(response.headers), "body": body}
    return body
