"""aiogram's errors as Telegram names them: the ``error_code`` and a one-line description."""

from __future__ import annotations

from aiogram.exceptions import (
    ClientDecodeError,
    TelegramAPIError,
    TelegramBadRequest,
    TelegramConflictError,
    TelegramEntityTooLarge,
    TelegramForbiddenError,
    TelegramNotFound,
    TelegramRetryAfter,
    TelegramServerError,
    TelegramUnauthorizedError,
)

from tmy import redact

# HTTP status of each aiogram error class (Telegram's error_code is the HTTP status)
_ERROR_CODES: tuple[tuple[type[TelegramAPIError], int], ...] = (
    (TelegramRetryAfter, 429),
    (TelegramBadRequest, 400),
    (TelegramUnauthorizedError, 401),
    (TelegramForbiddenError, 403),
    (TelegramNotFound, 404),
    (TelegramConflictError, 409),
    (TelegramEntityTooLarge, 413),
    (TelegramServerError, 500),
)


def error_code(exc: BaseException) -> int | None:
    """Telegram's ``error_code`` for an aiogram error (it is the HTTP status)."""
    for cls, code in _ERROR_CODES:
        if isinstance(exc, cls):
            return code
    return None


def method_name(exc: TelegramAPIError) -> str:
    return getattr(exc.method, "__api_method__", type(exc.method).__name__)


def describe(exc: BaseException) -> str:
    """One line naming what failed, with Telegram's description; secrets removed."""
    if isinstance(exc, TelegramAPIError):
        first = exc.message.splitlines()[0] if exc.message else type(exc).__name__
        text = f"{method_name(exc)}: {first}"
    elif isinstance(exc, ClientDecodeError):
        text = f"unreadable answer from the Bot API: {exc.message}"
    else:
        text = str(exc) or type(exc).__name__
    return redact.redact(text)
