"""The adapter contract: platform events in as Messages, Replies and sends out.

An adapter is started with the engine's ``handle`` and stopped once; in
between it turns its platform's events into :class:`~tmy.message.Message`
objects, answers each with the :class:`~tmy.message.Reply` the engine gives
back, and can **send on its own initiative** to a :class:`Target` (cron rules
and admin commands use that through the daemon's ``send``).

The contract itself is :class:`tmy.types.Adapter` (re-exported here with
:data:`~tmy.types.Handler`); this module holds what the adapters share: their
health report and their reconnect backoff. Every adapter has ``routes()``: the
routes it needs on the daemon's one web server (the OneBot reverse WebSocket,
the OpenAI facade, a Telegram webhook; ``[]`` for none), which the HTTP
listener mounts before it starts. Every adapter reports its state through
``health()`` for ``GET /healthz``. One adapter's failure (a bad token, a lost
connection, a failed send) is logged with the platform's own error code and
never stops the daemon or the other adapters.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from tmy import metrics, redact
from tmy.backoff import Backoff as Backoff  # where adapters have always found it
from tmy.message import Attachment
from tmy.types import Adapter, Handler

__all__ = ["Adapter", "AdapterHealth", "Backoff", "Handler", "cancel_tasks", "placeholder"]


class AdapterHealth:
    """The state an adapter reports: connected, reconnecting, failed or stopped.

    ``last_event`` is the wall-clock time of the last event received, so an
    operator can tell a quiet chat from a dead connection. ``connections`` counts
    the times :meth:`connected` found it not connected (the metric tells the first
    connection from a reconnect).
    """

    __slots__ = ("connections", "detail", "error", "last_event", "state")

    def __init__(self, state: str = "starting") -> None:
        self.state = state
        self.error: str | None = None
        self.last_event: float | None = None
        self.detail: dict[str, Any] = {}
        self.connections = 0

    def event(self) -> None:
        self.last_event = time.time()

    def set(self, state: str, error: str | None = None) -> None:
        self.state = state
        self.error = error

    def connected(self, adapter: str) -> bool:
        """``connected``, counted in ``metrics.adapter_connected`` (a reconnect after the
        first); True when it was not connected so far (the adapter then logs it), False when
        it already was (a long poll answered again, a second greeting): nothing counted."""
        if self.state == "connected":
            return False
        self.set("connected")
        metrics.adapter_connected(adapter, reconnect=self.connections > 0)
        self.connections += 1
        return True

    def failed(self, why: str) -> str:
        """``failed`` for ``why`` with every credential masked (it is shown by ``/healthz``);
        the masked text, for the adapter's log line."""
        why = redact.redact(why)
        self.set("failed", why)
        return why

    def stopped(self) -> None:
        """``stopped`` at the end of ``stop()`` — unless ``failed``: its reason stays shown."""
        if self.state != "failed":
            self.set("stopped")

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "state": self.state,
            "last_event": None
            if self.last_event is None
            else datetime.fromtimestamp(self.last_event, UTC).isoformat(timespec="seconds"),
            "error": self.error,
        }
        out.update(self.detail)
        return out


async def cancel_tasks(*tasks: asyncio.Task[None] | None) -> None:
    """Cancel an adapter's background tasks (its connection loop, a reader) and wait until
    they have ended, whatever they raised; ``None`` (never started) is skipped."""
    started = [task for task in tasks if task is not None]
    for task in started:
        task.cancel()
    await asyncio.gather(*started, return_exceptions=True)


def placeholder(attachments: Iterable[Attachment]) -> str:
    """The text a message of only ``attachments`` reads as, the same on every platform so
    one trigger serves them all (docs/media.md): ``[image]``, ``[image] [file]`` …; ""
    for none."""
    return " ".join(f"[{item.kind}]" for item in attachments)
