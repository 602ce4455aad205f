"""Scheduled rules: each occurrence runs once across every daemon sharing the store.

A rule with ``schedule:`` fires on a five-field ``cron`` expression (APScheduler
3's :class:`~apscheduler.triggers.cron.CronTrigger` computes the times) or
``every`` N seconds/minutes/hours/days, aligned to the Unix epoch, so every
daemon computes the same fire times from the schedule alone, never from its
own clock's ticks. Each firing runs the rule's steps once per ``send_to``
target (``USER`` = ``cron``, ``PLATFORM``/``CHAT`` from the target; without
targets one run with ``PLATFORM`` = ``cron`` whose reply is only logged), with
the local ``FIRE_TIME`` (the scheduled time, ISO 8601, identical everywhere).

**Exactly once.** An occurrence is (rule, target, fire time). A daemon takes
the store's lease named after the occurrence's done mark
(``cron/done/<rule>/<target>/<fire>``), checks the mark, runs the rule's steps
on a buffer (:mod:`tmy.cron.buffered`: nothing reaches the store yet), then applies
the steps' writes, the done mark and the outbox entry of its reply in ONE
``Store.commit`` fenced by the lease's token. A daemon paused (SIGSTOP) or cut
off from the store past the lease's length has lost it: its commit is refused
(``LeaseLost``), it writes and sends nothing more and logs ``cron.lease_lost``;
the daemon that took the lease over found no done mark and ran the occurrence
itself. If the holder dies, its lease frees (at once for a dead process of the
same machine, else after the lease's 5 s) and a waiting daemon runs the
occurrence while it is still inside ``misfire_grace``. Side effects outside the
store (HTTP and LLM steps) of a run that lost its lease have happened; its
store writes have not.

**Sending.** The reply is posted after the commit, under the same lease, which
is checked right before the send. The outbox entry is committed in state
``sending`` first, and nobody resends an entry in that state: a holder paused
*between* that check and the send (microseconds, plus the adapter's own
queueing) still posts once, late, and the new holder does not post it again —
so a post goes out at most once per occurrence. A holder that finds its lease
lost before sending puts the entry back to ``retry`` (it knows it did not
send). A failed send (the adapter raised: NapCat not connected, a platform
error) stays in the outbox (``cron/outbox/<occurrence>``, indexed in
``cron/pending``) and is retried with backoff (2 s, doubling, at most 60 s)
while the occurrence is inside ``send_retry`` (default: ``misfire_grace``); each
resend is claimed by the same lease, so one daemon resends. Failures log
``cron.send_failed`` (warning) and count ``tmy_cron_send_failures{outcome=retry|
gave_up}``; ``run.py cron`` and ``/healthz`` show what waits. At most
:data:`MAX_OUTBOX` sends wait at once; past that a failed send is given up.

**Switched-off chats.** ``.tmy off`` in a chat (the engine's chat switch) stops
the scheduled runs for that chat: the occurrence is not run at all (a rotating
list does not advance), is marked done and kept in the history as
``skipped: chat off``; a pending resend to it is dropped the same way.

**Edge values.** ``misfire_grace`` and ``send_retry`` are at most
:data:`MAX_GRACE` (a day); done marks live that long plus two minutes, so a
reload that raises the grace never makes an occurrence that already ran
runnable again. ``misfire_grace: 0`` means on time only: a firing the timer
wakes up to (within :data:`ON_TIME_SLACK`) runs, a missed one never does.

**Coalescing.** A daemon that starts (or falls behind) runs only the latest
occurrence still inside ``misfire_grace``, not one per missed tick.

**Firing now.** ``cron fire RULE`` (:meth:`Cron.fire_now`) runs one occurrence
at once through the same claim, fenced commit, outbox and send: its done mark
has a name of its own (``…/manual-<time>-<nonce>``), so the scheduled
occurrences and the next fire time are untouched, and its history entry says
``manual`` and who fired it.

**History.** Every run is logged (``cron.fired`` / ``cron.done`` with its
trace id) and kept in ``cron/hist/<rule>``: the last :data:`HISTORY` runs with
fire time, daemon, target, trace id, outcome and send result.
"""

from __future__ import annotations

from tmy.cron.occurrence import OUTBOX_INDEX, cron_message, fire_time_text
from tmy.cron.outbox import MAX_OUTBOX, outbox_entries, outbox_summary
from tmy.cron.report import format_report, jobs_report
from tmy.cron.schedule import Schedule, Timing, validate_schedule
from tmy.cron.service import Cron, Fired, scheduled_rules
from tmy.extension import Extension, RuleKey

__all__ = [
    "EXTENSION",
    "MAX_OUTBOX",
    "OUTBOX_INDEX",
    "Cron",
    "Fired",
    "Schedule",
    "Timing",
    "cron_message",
    "fire_time_text",
    "format_report",
    "jobs_report",
    "outbox_entries",
    "outbox_summary",
    "scheduled_rules",
    "validate_schedule",
]


def _fire_time_local(_schedule: Schedule) -> tuple[str, ...]:
    return ("FIRE_TIME",)


EXTENSION = Extension(
    name="cron",
    rule_keys={"schedule": RuleKey(validate_schedule, locals=_fire_time_local)},
    doc="scheduled rules (schedule:), fired once across every daemon sharing the store",
)
"""The ``schedule:`` rule key (with the run local ``FIRE_TIME``). The scheduler itself
(:class:`Cron`) is started by the app when it serves and this extension is installed."""
