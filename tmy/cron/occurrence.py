"""One occurrence of a scheduled rule: its message, its names in the store, its done mark.

An occurrence is (rule, target, fire time); its done mark
(``cron/done/<rule>/<target>/<fire>``) is also the name of the lease that
claims it, and its outbox entry (``cron/outbox/<occurrence>``) holds its reply
until it is sent.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime
from typing import Any

from tmy.cron.schedule import MAX_GRACE, Schedule
from tmy.logs import get_logger
from tmy.message import Message, Target

log = get_logger("tmy.cron")

DONE_TTL = MAX_GRACE + 120
OUTBOX_PREFIX = "cron/outbox/"
OUTBOX_INDEX = "cron/pending"  # {occurrence: fire time} of the entries waiting for a resend
SKIPPED_OFF = "skipped: chat off"


def cron_message(schedule: Schedule, target: Target | None) -> Message:
    """The message a scheduled run answers: its input, from user "cron", in the target's chat
    (a rule test's ``fire:`` builds the same one)."""
    return Message(
        schedule.input,
        user="cron",
        chat=target.chat if target else "cron",
        platform=target.platform if target else "cron",
        user_name="cron",
        private=False,
    )


def fire_time_text(fire: datetime) -> str:
    return fire.isoformat(timespec="seconds")


def target_key(target: Target | None) -> str:
    return "-" if target is None else f"{target.platform}:{target.chat}:{target.user}"


def history_key(rule_id: str) -> str:
    return f"cron/hist/{rule_id}"


def occurrence_id(rule_id: str, target: Target | None, fire: datetime) -> str:
    return f"{rule_id}/{target_key(target)}/{int(fire.timestamp())}"


def manual_occurrence_id(rule_id: str, target: Target | None, fire: datetime) -> str:
    """A fired-now occurrence (``cron fire``): its own name, never a scheduled one's, so its
    done mark cannot make the scheduler skip the occurrence due at the same second."""
    return f"{rule_id}/{target_key(target)}/manual-{int(fire.timestamp())}-{os.urandom(4).hex()}"


def done_key(occ: str) -> str:
    """The occurrence's done mark; also the name of its claim lease (one slot on a cluster)."""
    return f"cron/done/{occ}"


def outbox_key(occ: str) -> str:
    return f"{OUTBOX_PREFIX}{occ}"


def _mark(entry: dict[str, Any]) -> dict[str, Any]:
    """The done mark: small (an every-second rule keeps a day of them)."""
    return {"daemon": entry["daemon"], "trace_id": entry["trace_id"], "outcome": entry["outcome"]}


def _log_chat_off(rule_id: str, fire_text: str, target: Target | None) -> None:
    log.info("cron.skipped", rule=rule_id, fire_time=fire_text, target=target_key(target),
             reason="chat off")  # fmt: skip


def daemon_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"
