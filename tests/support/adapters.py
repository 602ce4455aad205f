"""What the chat-adapter tests share: waiting for an adapter's reported state."""

from __future__ import annotations

import asyncio
from typing import Any


async def wait_state(adapter: Any, state: str, timeout: float = 10.0) -> None:
    """Until ``adapter.health()`` reports ``state`` (connected, failed, reconnecting …);
    TimeoutError after ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while adapter.health()["state"] != state:
            await asyncio.sleep(0.01)
