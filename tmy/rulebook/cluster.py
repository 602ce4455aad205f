"""Rules a Redis Cluster cannot run, refused at load time with their file and line."""

from __future__ import annotations

from tmy.errors import RuleError, RuleErrors
from tmy.rulebook.model import Rulebook


def check_store(rulebook: Rulebook, store_url: str) -> None:
    """Refuse (RuleErrors naming file:line) the rules the store at ``store_url`` cannot run.

    On a Redis Cluster (``redis+cluster://``, ``rediss+cluster://``) an atomic
    span's writes are applied by ONE script, which runs on one node: every key
    it writes and every lease fencing it must be in one hash slot. Each
    variable's keys are tagged by the variable's own key, so a span holding
    two or more variables spans several slots: such a rule is refused here
    rather than failing at every run.
    """
    scheme = store_url.split("://", 1)[0].lower()
    if not scheme.endswith("+cluster"):
        return
    errors = [
        RuleError(
            f"rule {r.id!r}: its atomic span holds {', '.join(r.atomic_vars)}, whose keys are "
            "in different hash slots on a Redis Cluster, so the span's writes cannot be "
            "committed together in one script; keep that state in one variable (a map such "
            "as {count: 0, last: ''}), or opt out with 'atomic: false'",
            r.file,
            r.line,
        )
        for r in rulebook.rules
        if len(r.atomic_vars) > 1
    ]
    if errors:
        raise RuleErrors(errors)
