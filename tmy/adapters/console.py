"""Console adapter: one user typing at a terminal (``serve`` with a TTY, and ``chat``)."""

from __future__ import annotations

import asyncio
import sys
from typing import TextIO

from tmy.adapters.base import Handler
from tmy.message import Message


class ConsoleAdapter:
    name = "console"

    def __init__(self, user: str = "console", chat: str = "", platform: str = "console",
                 out: TextIO | None = None, prompt: str = "> ") -> None:  # fmt: skip
        self.user, self.chat, self.platform = user, chat, platform
        self.out = out or sys.stdout
        self.prompt = prompt
        self._task: asyncio.Task[None] | None = None
        self.done = asyncio.Event()

    async def start(self, handle: Handler) -> None:
        self._task = asyncio.create_task(self._loop(handle), name="console")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _loop(self, handle: Handler) -> None:
        try:
            while True:
                try:
                    line = await asyncio.to_thread(input, self.prompt)
                except EOFError:
                    break
                if not line.strip():
                    continue
                if line.strip() in ("/quit", "/exit"):
                    break
                reply = await handle(
                    Message(line, user=self.user, chat=self.chat, platform=self.platform)
                )
                if reply.error:
                    print(f"[{reply.rule}] error: {reply.error}", file=sys.stderr)
                if reply.text:
                    print(reply.text, file=self.out, flush=True)
                elif reply.rule is None:
                    print("(no rule matched)", file=sys.stderr)
        finally:
            self.done.set()
