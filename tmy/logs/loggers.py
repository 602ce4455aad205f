"""The module-level loggers (:func:`get_logger`): structlog loggers, built once and cached."""

from __future__ import annotations

from typing import Any, ClassVar

import structlog


class Log:
    """A module-level logger that resolves to a cached structlog logger.

    structlog's lazy proxy rebuilds its logger on every call (tens of µs per
    event); caching the built logger here, and forgetting it on
    :func:`configure`, keeps the hot path cheap while reconfiguration still works.
    """

    __slots__ = ("name",)
    _cache: ClassVar[dict[str, Any]] = {}

    def __init__(self, name: str) -> None:
        self.name = name

    def _get(self) -> Any:
        got = Log._cache.get(self.name)
        if got is None:
            got = Log._cache[self.name] = structlog.get_logger(self.name).bind()
        return got

    def bind(self, **kw: Any) -> Any:
        return self._get().bind(**kw)

    def debug(self, event: str, **kw: Any) -> None:
        self._get().debug(event, **kw)

    def info(self, event: str, **kw: Any) -> None:
        self._get().info(event, **kw)

    def warning(self, event: str, **kw: Any) -> None:
        self._get().warning(event, **kw)

    def error(self, event: str, **kw: Any) -> None:
        self._get().error(event, **kw)

    def exception(self, event: str, **kw: Any) -> None:
        self._get().exception(event, **kw)


def get_logger(name: str) -> Log:
    return Log(name)
