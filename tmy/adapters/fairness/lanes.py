"""A chat adapter's two fair queues, and its graceful stop, in one place.

Every chat adapter keeps the same pair of :class:`ChatQueues`: the messages
waiting to run in the engine, and the replies waiting for their chat's turn to
be sent. Both are bounded per chat and in total the same way, and a stop lets
the work already taken finish the same way: no new message is taken, the runs
in flight get up to ``shutdown_grace`` seconds (their replies are queued as they
end), the replies get what is left of the same deadline, and whatever is still
waiting then is dropped (its sender told). :class:`ChatLanes` is that pair and
that stop; the limits stay each adapter's own (its module constants).
"""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

from tmy.adapters.fairness.pending import PendingSend
from tmy.adapters.fairness.queues import ChatQueues, Work

M = TypeVar("M")
R = TypeVar("R", bound=PendingSend)


class ChatLanes(Generic[M, R]):
    """``inbound`` (messages to answer) and ``outbound`` (replies to send) of one adapter.

    ``runs`` / ``runs_per_chat`` bound the messages in the engine at once (all chats /
    one chat), ``sends`` the send requests in flight; ``per_chat`` and ``total`` bound
    what waits, in each queue apart; ``interval`` paces one chat's sends.
    """

    def __init__(
        self,
        adapter: str,
        answer: Work[M],
        send_step: Work[R],
        *,
        per_chat: int,
        total: int,
        runs: int,
        runs_per_chat: int,
        sends: int,
        interval: float = 0.0,
    ) -> None:
        self.inbound: ChatQueues[M] = ChatQueues(
            adapter, "message", answer, per_chat=per_chat, total=total,
            in_flight=runs, per_chat_in_flight=runs_per_chat,
        )  # fmt: skip
        self.outbound: ChatQueues[R] = ChatQueues(
            adapter, "reply", send_step, per_chat=per_chat, total=total,
            in_flight=sends, interval=interval,
            on_drop=PendingSend.dropped, on_fail=PendingSend.failed, on_stop=PendingSend.stopped,
        )  # fmt: skip

    def open(self) -> None:
        """Take messages and replies again (a start, also after a stop)."""
        self.inbound.accepting = self.outbound.accepting = True

    def waiting(self) -> dict[str, int]:
        """What waits in each queue, as ``/healthz`` shows it."""
        return {"messages": self.inbound.waiting, "replies": self.outbound.waiting}

    async def settle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the runs, then the replies they queued, to end
        (one deadline for both); True when all did."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        runs_done = await self.inbound.join(timeout)  # runs end; their replies are queued
        return await self.outbound.join(deadline - loop.time()) and runs_done

    async def drain(self, grace: float) -> None:
        """The graceful stop: no new messages, up to ``grace`` s for what was taken, then
        both queues closed (what still waits is dropped, what runs is cancelled)."""
        self.inbound.accepting = False
        await self.settle(grace)
        await self.inbound.close()
        await self.outbound.close()
