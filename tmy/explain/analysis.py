"""What the engine would decide for a message, and why: reads the store, writes nothing.

Matching is the trigger index's (:meth:`~tmy.rulebook.index.TriggerIndex.explain_matches`
walks the same order as ``match``), refusals are the filters' own (``Filters.refusal``).
"""

from __future__ import annotations

from typing import Any

from tmy.engine.core import Engine
from tmy.engine.keys import conversation_key
from tmy.errors import TmyError
from tmy.explain.events import analyse_event
from tmy.explain.model import Explanation
from tmy.logs import preview
from tmy.message import Message, id_problem
from tmy.rulebook.triggers import KIND_RANK, Match, fold, normalise, strip_invisible
from tmy.store.base import MISSING
from tmy.values.compiled import to_text

KINDS = {rank: kind for kind, rank in KIND_RANK.items()}


async def analyse(engine: Engine, rulebook: Any, message: Message) -> Explanation:
    """What the engine would decide for ``message``, and why; reads the store, writes nothing."""
    ex = _start(engine, message)
    if _refused_early(engine, message, ex):
        return ex
    if message.event is not None:  # no trigger: the rules listing the event's kind
        match = analyse_event(engine, rulebook, message, ex)
        if match is not None:
            ex.matched = match.rule.id
            ex.match, ex.rule = match, match.rule
            await _gates(engine, match.rule, message, ex)
        return ex
    found, winner = _candidates(rulebook, message, ex)
    session_rule = await _session(engine, rulebook, message, ex)
    match = _choose(winner, session_rule, message, ex)
    if match is None:
        ex.reason = _unmatched_reason(found, message, ex)
        return ex
    ex.matched = match.rule.id
    ex.match, ex.rule = match, match.rule
    await _gates(engine, match.rule, message, ex)
    return ex


def _start(engine: Engine, message: Message) -> Explanation:
    """The explanation's header: the text as sent and as triggers see it, and the sender."""
    text = message.text if isinstance(message.text, str) else to_text(message.text)
    if not text.isascii():
        text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    ex = Explanation(text=text)
    ex.normalised = normalise(text)
    ex.folded = fold(ex.normalised)
    if not message.is_admin and engine.admins:
        message.is_admin = engine.admins.admits(message.platform, message.user)
    ex.message = {
        "user": message.user,
        "user_name": message.user_name,
        "chat": message.chat,
        "platform": message.platform,
        "private": bool(message.private),
        "admin": bool(message.is_admin),
        "chat_admin": bool(message.chat_admin),
        "mention": bool(message.mentions_bot),
    }
    return ex


def _refused_early(engine: Engine, message: Message, ex: Explanation) -> bool:
    """Whether the engine stops before matching (too long, a bad id, an admin command)."""
    settings, text = engine.settings, ex.text
    if len(text) > settings.max_message_chars:
        ex.reason = (
            f"message too long: {len(text)} characters (the limit is {settings.max_message_chars})"
        )
        return True
    for name in ("user", "chat", "platform"):
        problem = id_problem(name, getattr(message, name), settings.max_id_chars)
        if problem is not None:
            ex.reason = f"bad message: {problem}"
            return True
    commands = engine.commands
    if commands is not None and text.startswith(commands.prefix) and commands.is_command(text):
        ex.reason = f"an admin command ({commands.prefix} …): it never reaches the rules" + (
            "" if message.is_admin else "; you are not an admin, so it gets no reply at all"
        )
        return True
    return False


def _candidates(rulebook: Any, message: Message, ex: Explanation) -> tuple[list[Any], Any]:
    """Every matching trigger (best first) and near misses into ``ex``; the winner or None."""
    index = rulebook.index
    text = ex.text
    found = index.explain_matches(text)
    ex.looked_up = True
    winner = next((c for c in found if c.rule.filters.admits(message)), None)
    ex.candidates = [_candidate(c, winner, message) for c in found]
    seen_rules: set[str] = set()
    for c, row in zip(found, ex.candidates, strict=True):
        if row["refused"] and c.rule.id not in seen_rules:
            seen_rules.add(c.rule.id)
            ex.near_misses.append(
                _near(c.rule, c.trigger.source, f"its filters refuse the message: {row['refused']}")
            )
    refused_too = []
    for miss in index.near_misses(text, skip=[c.trigger for c in found]):
        if winner is not None and miss.rule is winner.rule:  # the winner's other triggers: noise
            continue
        refusal = _refusal(miss.rule, message)
        if refusal is None:
            ex.near_misses.append(_near(miss.rule, miss.trigger.source, miss.why))
        else:  # listed after the others: it would not answer this sender anyway
            why = f"{miss.why}; its filters would refuse this message anyway ({refusal})"
            refused_too.append(_near(miss.rule, miss.trigger.source, why))
    ex.near_misses.extend(refused_too)
    return found, winner


def _choose(winner: Any, session_rule: Any, message: Message, ex: Explanation) -> Match | None:
    """The match the engine would run: the winning trigger, else the open session's rule."""
    if winner is not None:
        ex.via, ex.trigger = "trigger", winner.trigger.source
        if session_rule is not None and session_rule is not winner.rule:
            ex.near_misses.append(
                _near(
                    session_rule,
                    "<session>",
                    "its session is open, but a message that hits a trigger goes to that "
                    "trigger's rule",
                )
            )
        return winner.match
    if session_rule is None:
        return None
    refusal = _refusal(session_rule, message)
    if refusal is not None:
        ex.near_misses.append(
            _near(session_rule, "<session>", f"its session is open, but {refusal}")
        )
        return None
    ex.via, ex.trigger = "session", None
    if session_rule.debounce:
        ex.notes.append(
            f"rule {session_rule.id!r} debounces its session: this follow-up would wait "
            f"{session_rule.debounce:g} s for more from the same user and be answered with "
            "them at once (QUESTION joined by line breaks, BURST the list); explained alone here"
        )
    return Match(session_rule, None, "", strip_invisible(ex.text).strip())


async def _gates(engine: Engine, rule: Any, message: Message, ex: Explanation) -> None:
    """After a match: the chat switch and the rule's cooldown, which may block the run."""
    switch = engine.switch
    if switch is not None:
        try:
            off = await switch.is_off(message)
        except TmyError:
            off = False
        if off:
            prefix = engine.commands.prefix if engine.commands is not None else ".tmy"
            ex.reason = (
                f"the bot is switched off in this chat (an admin can say '{prefix} on'); "
                f"rule {rule.id!r} would answer otherwise"
            )
            ex.blocked = True
            ex.near_misses.insert(0, _near(rule, ex.trigger or "<session>", ex.reason))
            return
    if rule.cooldown is None:
        return
    try:
        left = await engine.cooldown_left(rule, message)
    except TmyError:
        left = 0.0
    if left > 0:
        answers = (
            "it answers its cooldown reply instead"
            if rule.cooldown.reply is not None
            else "it stays silent"
        )
        ex.reason = f"rule {rule.id!r} is cooling down ({left:.0f} s left): {answers}"
        ex.blocked = True
        ex.answers_anyway = rule.cooldown.reply is not None
        ex.near_misses.insert(0, _near(rule, ex.trigger or "<session>", ex.reason))


def _refusal(rule: Any, message: Message) -> str | None:
    return rule.filters.refusal(message)


def _candidate(cand: Any, winner: Any, message: Message) -> dict[str, Any]:
    rule, trig = cand.rule, cand.trigger
    refused = _refusal(rule, message)
    won = cand is winner
    if won:
        why = "the best-ranked trigger whose rule's filters admit the message"
    elif refused is not None and (winner is None or cand.key < winner.key):
        why = f"refused: {refused}"
    elif winner is not None:
        why = _lost(cand, winner)
        if refused is not None:
            why += f" (and refused: {refused})"
    else:
        why = f"refused: {refused}"
    return {
        "rule": rule.id,
        "trigger": trig.source,
        "kind": trig.kind,
        "priority": rule.priority,
        "literal_length": len(trig.literal),
        "file": rule.file,
        "line": trig.line or rule.line,
        "order": cand.key[3],
        "MAGIC": cand.match.magic,
        "QUESTION": cand.match.question,
        "won": won,
        "refused": refused,
        "why": why,
    }


def _lost(cand: Any, winner: Any) -> str:
    """Why ``cand`` ranks below ``winner`` (the first part of the rank key that differs)."""
    if cand.rule is winner.rule:
        return f"another trigger of the same rule; {winner.trigger.source!r} ranks first"
    key, best = cand.key, winner.key
    if key[0] != best[0]:
        return f"lower priority ({-key[0]} < {-best[0]})"
    if key[1] != best[1]:
        kind = KINDS[key[1]]
        article = "an" if kind[0] in "aeiou" else "a"
        return f"{article} {kind} trigger ranks below {KINDS[best[1]]}"
    if key[2] != best[2]:
        return f"shorter literal ({-key[2]} < {-best[2]} characters)"
    w = winner.rule
    return f"later in file order ({cand.rule.file}:{cand.rule.line} comes after {w.file}:{w.line})"


def _near(rule: Any, trigger: str, why: str) -> dict[str, Any]:
    return {"rule": rule.id, "trigger": trigger, "why": why, "file": rule.file, "line": rule.line}


async def _session(engine: Engine, rulebook: Any, message: Message, ex: Explanation) -> Any:
    """The rule whose session is open for this conversation (or None), noted in ``ex``."""
    if not rulebook.has_sessions:
        return None
    try:
        rule_id = await engine.services.store.get(conversation_key("session", message))
    except TmyError as exc:
        ex.notes.append(f"the session could not be read: {exc}")
        return None
    if rule_id is MISSING or not isinstance(rule_id, str):
        return None
    rule = rulebook.by_id.get(rule_id)
    ex.session = {"rule": rule_id, "exists": rule is not None}
    if rule is None:
        ex.notes.append(f"a session is open for rule {rule_id!r}, which no longer exists")
    return rule


def _unmatched_reason(found: list[Any], message: Message, ex: Explanation) -> str:
    if found:
        first = found[0]
        why = _refusal(first.rule, message) or "its filters refused it"
        more = len({c.rule.id for c in found}) - 1
        tail = f" (and {more} more rules matched and were refused)" if more else ""
        return f"rule {first.rule.id!r} matched but {why}{tail}"
    reason = f"no trigger matched {preview(ex.normalised, 60)!r}"
    for miss in ex.near_misses:
        if miss["trigger"] != "<session>":
            return f"{reason}; nearest: rule {miss['rule']!r}: {miss['why']}"
    return reason
