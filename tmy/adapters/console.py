"""Console adapter: one user typing at a terminal (``serve`` with a TTY, and ``chat``).

Standard input is read with the event loop's reader callback, never with a
blocking ``input()`` in a worker thread: such a thread cannot be interrupted, so
a daemon stopped with SIGTERM would hang until someone pressed Enter. Stopping
the adapter stops reading; a message being answered is answered first.
"""

from __future__ import annotations

import asyncio
import io
import os
import sys
from typing import Any, TextIO

from tmy.adapters.base import Handler
from tmy.message import Message, Target


class ConsoleAdapter:
    name = "console"

    def __init__(self, user: str = "console", chat: str = "", platform: str = "console",
                 out: TextIO | None = None, prompt: str = "> ",
                 user_name: str = "") -> None:  # fmt: skip
        self.user, self.chat, self.platform = user, chat, platform
        self.user_name = user_name
        self.out = out or sys.stdout
        self.prompt = prompt
        self.done = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._stopping = False
        self._fd: int | None = None
        self._pending = b""

    async def start(self, handle: Handler) -> None:
        self._fd = _stdin_fd()
        if self._fd is not None:
            asyncio.get_running_loop().add_reader(self._fd, self._readable)
        self._task = asyncio.create_task(self._loop(handle), name="console")

    async def send(self, target: Target, text: str) -> None:
        """Print a message the bot sends on its own (a cron rule's reply, say)."""
        print(f"[{target.chat or target.user}] {text}", file=self.out, flush=True)

    def health(self) -> dict[str, Any]:
        return {"state": "stopped" if self.done.is_set() else "connected"}

    def routes(self) -> list[Any]:
        """None: a terminal needs no web route."""
        return []

    async def stop(self) -> None:
        """Stop reading; a run in flight finishes and prints its reply (not cancelled)."""
        self._stopping = True
        self._stop_reading()
        self._lines.put_nowait(None)

    def _stop_reading(self) -> None:
        if self._fd is not None:
            asyncio.get_running_loop().remove_reader(self._fd)
            self._fd = None

    def _readable(self) -> None:
        try:
            chunk = os.read(self._fd, 65536) if self._fd is not None else b""
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:  # end of input (Ctrl-D, closed pipe)
            self._stop_reading()
            if self._pending:
                self._lines.put_nowait(self._pending.decode("utf-8", "replace"))
                self._pending = b""
            self._lines.put_nowait(None)
            return
        *lines, self._pending = (self._pending + chunk).split(b"\n")
        for line in lines:
            self._lines.put_nowait(line.decode("utf-8", "replace").rstrip("\r"))

    async def _next_line(self) -> str | None:
        if self._fd is None and not self._stopping and self._lines.empty():
            line = sys.stdin.readline() if sys.stdin is not None else ""  # a StringIO in tests
            return line.rstrip("\n") if line else None
        return await self._lines.get()

    async def _loop(self, handle: Handler) -> None:
        interactive = self._fd is not None and os.isatty(self._fd)
        try:
            while not self._stopping:
                if interactive:
                    print(self.prompt, end="", file=self.out, flush=True)
                line = await self._next_line()
                if line is None or self._stopping:
                    break
                if not line.strip():
                    continue
                if line.strip() in ("/quit", "/exit"):
                    break
                reply = await handle(
                    Message.new(
                        line,
                        user=self.user,
                        chat=self.chat,
                        platform=self.platform,
                        user_name=self.user_name,
                    )
                )
                if reply.error:
                    print(f"[{reply.rule}] error: {reply.error}", file=sys.stderr)
                if reply.text:
                    print(reply.text, file=self.out, flush=True)
                elif reply.rule is None:
                    print(f"(no reply: {reply.reason or 'no rule matched'})", file=sys.stderr)
        finally:
            self._stop_reading()
            self.done.set()


def _stdin_fd() -> int | None:
    """The file descriptor behind sys.stdin, or None (closed, or replaced in tests)."""
    try:
        return sys.stdin.fileno() if sys.stdin is not None else None
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
        return None
