"""Per-chat queues served fairly, so one busy chat cannot starve the others.

``queues`` is :class:`ChatQueues` (why and how: its module docstring),
``draining`` its task-driven half (a chat's drain task, a work run on a task),
``slots`` the first-come-first-served limit it hands slots out with,
``lane`` one chat's share of a queue,
``step`` what a work returns when a callback ends it (a send awaiting its answer),
``pending`` the base of each adapter's queued send (who waits for its outcome;
which piece is next and its retries),
and ``lanes`` an adapter's pair of them (messages in, replies out) with its
graceful stop.
"""

from tmy.adapters.fairness.lanes import ChatLanes
from tmy.adapters.fairness.pending import PendingSend, PiecewiseSend
from tmy.adapters.fairness.queues import LOG_EVERY, ChatQueues, Work
from tmy.adapters.fairness.slots import FairSlots
from tmy.adapters.fairness.step import Step

__all__ = [
    "LOG_EVERY",
    "ChatLanes",
    "ChatQueues",
    "FairSlots",
    "PendingSend",
    "PiecewiseSend",
    "Step",
    "Work",
]
