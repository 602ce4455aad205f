"""Per-chat queues served fairly, so one busy chat cannot starve the others.

``queues`` is :class:`ChatQueues` (why and how: its module docstring),
``slots`` the first-come-first-served limit it hands slots out with, and
``pending`` the base of each adapter's queued send (who waits for its outcome).
"""

from tmy.adapters.fairness.pending import PendingSend
from tmy.adapters.fairness.queues import LOG_EVERY, ChatQueues, Work
from tmy.adapters.fairness.slots import FairSlots

__all__ = ["LOG_EVERY", "ChatQueues", "FairSlots", "PendingSend", "Work"]
