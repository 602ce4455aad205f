"""The locals a run reads from its message: the event, the attachments, the quote, a burst.

``EVENT`` (the kind, ``""`` for a chat message), ``EVENT_DATA`` (the normalised
fields, ``{}``), ``EVENT_RAW`` (the platform's own name, ``""``), ``IMAGES`` (the
image attachments as maps), ``ATTACHMENTS`` (all of them), ``REPLY_TO`` (the
quoted message ``{text, user, id}``, or None), ``BURST`` (a debounced session's
messages, in order), ``APPROVE`` (None until a step decides a request event),
``APPROVE_REASON`` (``""``) and ``SOURCES`` (the knowledge passages an LLM step used, ``[]``).

They are not put into every run's locals: :class:`~tmy.engine.variables.Variables`
asks :func:`context_local` the first time a run names one, so the per-message path
of a rule that never reads them costs nothing more. What the engine knows before
the run (the quoted message it fetched, a burst's list) it sets as locals itself;
:func:`quoted` is that fetch, and :func:`decision` reads a run's APPROVE afterwards.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tmy.errors import EvalError
from tmy.logs import get_logger
from tmy.message import Message
from tmy.values.compiled import to_text

log = get_logger("tmy")

QUOTE_TIMEOUT = 2.0  # s the platform may take to fetch a quoted message (REPLY_TO)


def context_local(message: Message, name: str, locals_: dict[str, Any]) -> Any:
    """The value of the context local ``name`` (see the module docstring) for ``message``.

    ``locals_`` are the run's (``BURST`` defaults to ``[QUESTION]``, or ``[]`` when the
    question is empty, so ``"\\n".join(BURST) == QUESTION`` holds for every run).
    KeyError when ``name`` is no context local.
    """
    event = message.event
    if name == "EVENT":
        return event.kind if event is not None else ""
    if name == "EVENT_DATA":
        return dict(event.data) if event is not None else {}
    if name == "EVENT_RAW":
        return event.raw if event is not None else ""
    if name == "IMAGES":
        return [a.as_dict() for a in message.attachments if a.kind == "image"]
    if name == "ATTACHMENTS":
        return [a.as_dict() for a in message.attachments]
    if name == "REPLY_TO" or name == "APPROVE":
        return None
    if name == "APPROVE_REASON":
        return ""
    if name == "SOURCES":  # set by an LLM step's knowledge: (tmy.llm.knowledge); none before
        return []
    if name == "BURST":
        question = locals_.get("QUESTION", "")
        return [question] if question else []
    raise KeyError(name)


async def quoted(message: Message) -> dict[str, Any] | None:
    """The message ``message`` quotes, from its platform (``REPLY_TO``), or None.

    Asked only when the message quotes one and its adapter can fetch it; bounded
    by :data:`QUOTE_TIMEOUT`, and a platform that fails or is slow costs the run
    only its ``REPLY_TO`` (logged at info), never the answer.
    """
    api = message.api
    if api is None or not message.reply_to:
        return None
    try:
        async with asyncio.timeout(QUOTE_TIMEOUT):
            found = await api.quoted(message)
    except TimeoutError:
        log.info("reply_to.failed", reply_to=message.reply_to, error="timed out")
        return None
    except Exception as exc:  # the adapter's failure: REPLY_TO is None, the run goes on
        log.info("reply_to.failed", reply_to=message.reply_to, error=str(exc) or repr(exc))
        return None
    if found is None:
        return None
    if not isinstance(found, dict):
        log.info("reply_to.failed", reply_to=message.reply_to, error="not a map")
        return None
    return {
        "text": to_text(found.get("text", "")),
        "user": to_text(found.get("user", "")),
        "id": to_text(found.get("id", message.reply_to)),
    }


def decision(loc: dict[str, Any]) -> tuple[bool | None, str]:
    """A run's ``APPROVE`` and ``APPROVE_REASON`` as ``(approve, reason)``.

    ``APPROVE`` is true, false, None (no decision), or a map ``{approve, reason}``;
    anything else is an EvalError naming what it got (the run then fails: an
    accidental ``"no"`` must not accept a request).
    """
    approve = loc.get("APPROVE")
    reason = loc.get("APPROVE_REASON", "")
    if isinstance(approve, dict):
        unknown = set(approve) - {"approve", "reason"}
        if unknown:
            raise EvalError(
                f"APPROVE as a map holds approve and reason, not {sorted(unknown)[0]!r}"
            )
        reason = approve.get("reason", reason)
        approve = approve.get("approve")
    if approve is not None and not isinstance(approve, bool):
        raise EvalError(
            f"APPROVE must be true or false (or {{approve: true, reason: …}}), "
            f"got {type(approve).__name__} {approve!r}"
        )
    return approve, "" if reason is None else to_text(reason)
