"""Whether a compiled rule would compile the same whatever variables are declared later.

The loader compiles each rule as soon as its file hands it over (so its raw
form is freed before the next one is read), before every file's ``variables:``
is known. A rule is *closed* when that cannot matter: it reads only run locals
(which no declaration may shadow), saves nowhere, has no INPUT path, calls no
leaderboard and carries no extension key. Any other rule keeps its raw form and
is compiled again at the end if a declaration came after it.
"""

from __future__ import annotations

from tmy.rulebook.model import RUN_LOCALS, Rule


def closed(rule: Rule) -> bool:
    """True when ``rule`` names no variable a later declaration could turn persistent."""
    if rule.extras:
        return False
    if rule.on_error is not None and not rule.on_error.names <= RUN_LOCALS:
        return False
    reply = rule.cooldown.reply if rule.cooldown is not None else None
    if reply is not None and not reply.names <= RUN_LOCALS:
        return False
    for step in rule.steps:
        if step.INPUT is not None or step.save is not None or step.extras or step.boards:
            return False
        for value in (step.input, step.list_mode, step.when, step.stop, *step.options.values()):
            if value is not None and not value.names <= RUN_LOCALS:
                return False
    return True
