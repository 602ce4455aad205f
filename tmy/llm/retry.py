"""When a failed request is asked again, and how long to wait first: the openai SDK's policy.

Timeouts, connection errors, 408, 409, 429 and 5xx are worth asking again (an
``x-should-retry`` header decides when the server sends one); a server's
``Retry-After`` / ``retry-after-ms`` wins over the backoff. :mod:`tmy.llm.client`
asks; this module says what each failure reads as and whether it is retryable.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping

from tmy.config.llm import LLMConfig, ModelConfig
from tmy.llm.transport import CONNECT, OTHER, TIMEOUT, PostFailed
from tmy.llm.wire import LLMError, error_message
from tmy.redact import safe_url

RETRY_STATUSES = frozenset({408, 409, 429})


def retry_delay(config: LLMConfig, n: int, retry_after: float | None) -> float:
    """Seconds to wait before retry ``n + 1`` (the openai SDK's policy, so tmy behaves like it).

    The server's ``Retry-After`` / ``retry-after-ms`` wins (capped at
    ``retry_after_cap``: a server must not park a chat reply for minutes); else
    ``backoff_base``·2ⁿ capped at ``backoff_cap``, times a jitter in (0.75, 1] so
    many clients hit by one outage do not retry in lockstep.
    """
    if retry_after is not None and retry_after >= 0:
        return min(retry_after, config.retry_after_cap)
    backoff = min(config.backoff_base * 2**n, config.backoff_cap)
    return backoff * (1 - 0.25 * random.random())


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """What ``retry-after-ms`` / ``Retry-After`` (seconds or an HTTP date) ask for, if any."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def timed_out(model: ModelConfig, timeout: float) -> LLMError:
    return LLMError(f"{model.describe()} timed out after {timeout:g} s", retryable=True)


def failure(model: ModelConfig, url: str, timeout: float, exc: PostFailed) -> LLMError:
    """What a request that failed below HTTP says (and whether it is worth retrying)."""
    if exc.kind == TIMEOUT:
        return timed_out(model, timeout)
    if exc.kind == OTHER:
        return LLMError(f"{model.describe()} failed: {exc.name}: {exc}")
    what = "cannot reach" if exc.kind == CONNECT else "the connection failed to"
    return LLMError(f"{what} {safe_url(url)}: {exc.name}: {exc}", retryable=True)


def status_error(
    model: ModelConfig, status: int, headers: Mapping[str, str], text: str
) -> LLMError:
    retryable = status in RETRY_STATUSES or status >= 500
    should = headers.get("x-should-retry")
    if should in ("true", "false"):
        retryable = should == "true"
    hint = ""
    if status in (401, 403) and not model.api_key:
        where = f"${model.api_key_env} is not set" if model.api_key_env else "no api_key_env"
        hint = f" (no API key was sent: {where})"
    return LLMError(
        f"{model.describe()} answered HTTP {status}: {error_message(text)}{hint}",
        retryable=retryable,
        retry_after=retry_after_seconds(headers) if retryable else None,
    )
