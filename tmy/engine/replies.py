"""Reply assembly: the answer of a run, its error text, and what a finished run keeps.

A run answers ``PRE_ANSWER + STEP_RESULT + POST_ANSWER`` (the engine takes the
common case — a text result alone — inline); a structured reply map
(:func:`outgoing_of`, from :mod:`tmy.engine.structured`) answers its ``text``
there instead, with images, files, mentions, a quote or buttons beside it. A
failed run answers its rule's ``on_error`` text, else the configured ``error_reply``, else
:data:`LAST_RESORT_REPLY`, never longer than ``limits.max_reply_chars``. A
finished run keeps its ``STEP_SUMMARY`` and the rule's session for the
conversation; a follow-up message no trigger takes goes to the session's rule.
"""

from __future__ import annotations

from typing import Any

from tmy.config import Settings, setting_error
from tmy.engine.keys import conversation_key
from tmy.engine.run import Run
from tmy.engine.structured import outgoing_of
from tmy.errors import ConfigError, TmyError
from tmy.logs import get_logger, preview
from tmy.message import Message, Outgoing
from tmy.rulebook.model import RUN_LOCALS, Rulebook
from tmy.rulebook.triggers import Match, strip_invisible
from tmy.store.base import Store
from tmy.values.compiled import Value, compile_template, to_text

log = get_logger("tmy")

LAST_RESORT_REPLY = "Sorry, something went wrong."


def error_reply_template(settings: Settings) -> Value:
    """``error_reply`` compiled; a ConfigError (``file:line: error_reply: …`` when the
    config file holds it) when it names anything but run locals."""
    template = compile_template(settings.error_reply)
    unknown = template.names - RUN_LOCALS
    if unknown:
        raise setting_error(
            settings,
            "error_reply",
            ConfigError(
                f"error_reply {settings.error_reply!r} refers to {sorted(unknown)[0]!r}; "
                "it may use only run locals such as {STEP_ERROR}, {USER_NAME} or {QUESTION}"
            ),
        )
    return template


def assemble(pre: Any, result: Any, post: Any) -> str:
    """``PRE_ANSWER + STEP_RESULT + POST_ANSWER``, each rendered as text."""
    return to_text(pre) + to_text(result) + to_text(post)


def answer(pre: Any, result: Any, post: Any) -> tuple[str, Outgoing | None]:
    """The reply of a run whose result is not a plain text: a structured reply map
    (:func:`~tmy.engine.structured.outgoing_of`) gives its text and parts, anything
    else renders as text. EvalError when a structured map is malformed."""
    structured = outgoing_of(result)
    if structured is None:
        return assemble(pre, result, post), None
    text, outgoing = structured
    return assemble(pre, text, post), outgoing


def too_long(answer: str, limit: int) -> str:
    """The error of a reply over ``limits.max_reply_chars`` (the caller compared the length)."""
    return f"the reply is {len(answer)} characters long (limits.max_reply_chars is {limit})"


async def error_text(run: Run, error_reply: Value, limit: int) -> str:
    """The on_error text (else error_reply, else the last resort), never longer than
    ``limit``: an ``on_error`` quoting ``{STEP_RESULT}`` must not send the very reply
    the limit refused."""
    template = run.rule.on_error or error_reply
    try:
        await run.vars.fetch(template.names)
        await run.vars.fetch_boards(getattr(template, "boards", ()))
        text = to_text(template.evaluate(run.vars))
        if len(text) <= limit:
            return text
        log.warning(
            "on_error.failed",
            rule=run.rule.id,
            error=f"the error text is {len(text)} characters long "
            f"(limits.max_reply_chars is {limit})",
        )
    except TmyError as exc:
        log.warning("on_error.failed", rule=run.rule.id, error=str(exc))
    try:
        text = to_text(error_reply.evaluate(run.vars))
    except TmyError:  # a run local the failed run never set: the reply must still go out
        return LAST_RESORT_REPLY
    return text if len(text) <= limit else LAST_RESORT_REPLY


async def keep_conversation(run: Run, store: Store) -> None:
    """Keep STEP_SUMMARY and the rule's session for this conversation."""
    summary = run.locals.get("STEP_SUMMARY")
    try:
        if summary:
            if (
                isinstance(summary, list)
                and len(summary) == 2
                and all(isinstance(s, str) for s in summary)
            ):
                await store.set(conversation_key("summary", run.message), summary)
                log.info("summary.saved", ask=preview(summary[0]), answer=preview(summary[1]))
            else:
                log.warning(
                    "summary.invalid",
                    value=preview(summary),
                    hint='STEP_SUMMARY must be ["<ask>", "<answer>"]',
                )
        if run.rule.session > 0:
            await store.set(
                conversation_key("session", run.message), run.rule.id, ttl=run.rule.session
            )
    except TmyError as exc:
        log.warning("after_run.failed", error=str(exc))


async def session_match(
    rulebook: Rulebook, store: Store, message: Message, text: str
) -> Match | None:
    """The rule whose session this conversation is in, when its filters admit the message."""
    try:
        rule_id = await store.get(conversation_key("session", message))
    except TmyError as exc:
        log.warning("session.lookup_failed", error=str(exc))
        return None
    rule = rulebook.by_id.get(rule_id) if isinstance(rule_id, str) else None
    if rule is None or not rule.filters.admits(message):
        return None
    return Match(rule, None, "", strip_invisible(text).strip())  # as sent, not NFKC
