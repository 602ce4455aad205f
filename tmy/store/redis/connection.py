"""redis-py's connection, tuned for the store: no timer task per write, hiredis packing.

Also the retry policy and the pool sizes the store's clients share (see
:mod:`tmy.store.redis.lanes` for why the pool is sized above the gate).
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Connection
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

REDIS_RETRIES = 3  # redis-py resends a timed-out or cut command this many times
SPARE_CONNECTIONS = 8  # pooled connections beyond the gate's (see tmy.store.redis.lanes)


def retry_policy() -> Retry:
    """redis-py's resends of a timed-out or cut command: capped exponential backoff."""
    return Retry(ExponentialBackoff(cap=0.5, base=0.05), retries=REDIS_RETRIES)


try:  # hiredis (the ``redis[hiredis]`` extra) and a redis-py that packs with it
    import hiredis
    from redis.connection import HiredisRespSerializer
    from redis.utils import HIREDIS_AVAILABLE

    HIREDIS_AVAILABLE = HIREDIS_AVAILABLE and hasattr(hiredis, "pack_command")
    _PACKER = HiredisRespSerializer()
except ImportError:
    HIREDIS_AVAILABLE = False


class TunedConnection(Connection):
    """redis-py's connection, minus a timer task for each command it sends, and
    packing commands with hiredis (as redis-py's sync connection does) when it
    is installed.

    redis-py bounds every write with ``asyncio.wait_for`` (on Python 3.11 a new
    task and two more turns of the event loop per command, about an eighth of
    a command's client CPU). A write into an empty socket buffer that fits
    under the transport's high-water mark cannot wait at all, so it needs no
    timer: such writes go through redis-py's own untimed branch (same error
    handling); any other write is bounded as before. Reads keep their timeout.
    """

    if HIREDIS_AVAILABLE:  # the sync client packs in C; redis-py's asyncio one in Python

        def pack_command(self, *args: Any) -> list[bytes]:
            return _PACKER.pack(*args)

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        writer = self._writer
        if (
            writer is None
            or self.health_check_interval
            or not isinstance(command, list)
            or writer.transport.get_write_buffer_size()
            or sum(map(len, command)) > writer.transport.get_write_buffer_limits()[1]
        ):
            await super().send_packed_command(command, check_health)
            return
        # drain() returns without waiting (nothing can pause the transport), so
        # nothing else runs on this connection while its timeout is lifted
        timeout, self.socket_timeout = self.socket_timeout, None
        try:
            await super().send_packed_command(command, check_health)
        finally:
            self.socket_timeout = timeout
