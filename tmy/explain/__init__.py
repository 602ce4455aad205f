"""``explain``: why the bot answers (or does not answer) one message, step by step.

``explain TEXT [--user U --chat C --platform P --private/--group --mention
--admin] [--run] [--json]`` and the admin command ``.tmy explain TEXT`` (both
:mod:`tmy.commands.explain`) show, for one message:

* the first line: ``matched rule X …`` or ``no reply: <why, in one line>``;
* the text as sent and as the triggers see it (normalised, case-folded);
* every trigger that matched, filters ignored, best first — the order the
  engine walks — with why the winner won (priority, trigger kind, literal
  length, file order) and which filters refused the others;
* near misses: triggers whose literal is in the message but not where their
  kind needs it, case differences under ``case_sensitive``, rules refused by
  their filters, an open session, a chat switched off, a cooldown;
* each step: input, result, error, time, whether ``when:`` skipped it, the
  random draws it made (``drew: 3 from randint(1, 6)``), and for HTTP and LLM
  steps what they would send; then the reply.

``explain --event KIND [--data JSON]`` explains a platform event instead
(:mod:`~tmy.explain.events`): the rules listening for that kind in rulebook
order, which one the filters admit, and its dry run — with the request's
decision (APPROVE) and the reply's parts (images, buttons) shown.

``seed`` pins the random draws (:func:`tmy.values.randomness.seeded`), as a
rule test's ``seed:`` does: the same seed shows the same draws every time.

By default nothing changes (:mod:`~tmy.explain.dryrun`): the message is run by a
second engine on an overlay store whose network is recorded, not used. ``--run``
sends the message through the real engine instead and explains what it did.

The engine is reused, not re-implemented: :mod:`~tmy.explain.analysis` asks the
trigger index and the filters, the run is ``Engine.run_rule``;
:mod:`~tmy.explain.outcome` folds the run in, :mod:`~tmy.explain.render` shows it.
Explain is given the open engine; it never opens an app.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from typing import Any

from tmy.engine.core import Engine
from tmy.explain.analysis import analyse
from tmy.explain.dryrun import dry_run
from tmy.explain.model import Explanation, copy_message, message_for
from tmy.explain.outcome import take_reply
from tmy.message import Message
from tmy.values import randomness

__all__ = ["Explanation", "copy_message", "explain", "explain_text", "message_for"]


async def explain(
    engine: Engine, message: Message, *, run: bool = False, seed: int | str | None = None
) -> Explanation:
    """Explain ``message``: a dry run by default (nothing changes), the real run with ``run``;
        ``explain --event KIND [--data JSON]`` explains a platform event instead
    (:mod:`~tmy.explain.events`): the rules listening for that kind in rulebook
    order, which one the filters admit, and its dry run — with the request's
    decision (APPROVE) and the reply's parts (images, buttons) shown.

    ``seed`` pins the random draws (same seed, same draws)."""
    with randomness.seeded(seed) if seed is not None else nullcontext():
        return await _explain(engine, message, run)


async def _explain(engine: Engine, message: Message, run: bool) -> Explanation:
    rulebook = engine.rulebook  # one rulebook for the whole explanation, like a run
    ex = await analyse(engine, rulebook, message)
    ex.dry_run = not run
    if run:

        def drew(call: str, value: Any) -> None:  # the real run: steps not told apart
            ex.draws.append({"uri": "", "call": call, "value": value})

        with randomness.recording(drew):
            reply = await engine.handle(copy_message(message, ex.text))
        take_reply(ex, rulebook, reply)
        return ex
    if ex.answers_anyway and ex.match is not None:  # a cooldown: what it answers instead
        left = float(await engine.cooldown_left(ex.match.rule, message))
        cooled = await engine.cooldown_reply(ex.match, message, ex.text, max(left, 1.0))
        ex.reply = {"text": cooled.text, "error": cooled.error}
        return ex
    if ex.match is None or ex.blocked:
        return ex
    ex.trace_id = f"explain-{os.urandom(6).hex()}"
    reply, captured, writes = await dry_run(engine, rulebook, ex.match, message, ex)
    ex.requests = captured
    ex.writes = writes
    take_reply(ex, rulebook, reply)
    return ex


async def explain_text(engine: Engine, message: Message, text: str) -> str:
    """``text`` explained, compact, as if ``message``'s sender sent it there (dry)."""
    if not text.strip():
        return "usage: explain TEXT"
    ex = await explain(engine, copy_message(message, text))
    return ex.render(compact=True)
