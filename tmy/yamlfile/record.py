"""A whole rule of the commonest shape read in one regex match (for :mod:`tmy.yamlfile.fast`).

::

    - id: r1
      triggers: ['kw1*']
      steps:
        - plugin: ADJUST
          input: ok-r1

Read line by line this is 5 line matches and 3 collections opened and closed in Python;
here it is one match, when the next line starts the next rule or ends the list (else
the reader reads its lines one by one). What it builds is what the lines would read
as, with the same lines: the differential test holds it to libyaml.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tmy.yamlfile.lines import LineDict, LineList

INDICATORS = frozenset("-?:,[]{}#&*!|>'\"%@`")  # a plain scalar cannot start with one
# a whole rule of the commonest shape (one trigger, one step of plugin and input), read in
# one match when the next line starts the next rule or closes the list (else line by line)
_RECORD = re.compile(
    r"( *)- id: ([A-Za-z0-9_][A-Za-z0-9_.\-]*)\n"
    r"\1  triggers: \['([^'\n]*)'\]\n"
    r"\1  steps:\n"
    r"\1  ( *)- plugin: ([A-Za-z_][A-Za-z0-9_]*)\n"
    r"\1  \4  input: ([^\n]+)\n"
    r"(?=\1-[ \n]|\Z|[^ \n#])"
).match


def read_record(
    text: str, at: int, line: int, plain: Callable[[str], Any], plain_first: frozenset[str]
) -> tuple[LineDict, int] | None:
    """The rule written at ``at`` (its first line is ``line``) and the position after it;
    None when it is not of that shape. ``plain`` resolves a plain scalar (``yes``, ``12``);
    one starting with a character of ``plain_first`` is a string as written."""
    m = _RECORD(text, at)
    if m is None:
        return None
    _, rid, trigger, _, plugin, given = m.groups()
    if given[0] in INDICATORS or ": " in given or " #" in given or given[-1] in ": ":
        return None
    if given[0] not in plain_first:
        given = plain(given)
    if rid[0] not in plain_first:
        rid = plain(rid)
    if plugin[0] not in plain_first:
        plugin = plain(plugin)
    # each line number made once: those a compiled rule keeps are not left as garbage
    # among them (a line number is an object from 257 on)
    line1, line3 = line + 1, line + 3
    triggers = LineList((trigger,))
    triggers.line = line1
    triggers.item_lines = [line1]
    step = LineDict(plugin=plugin, input=given)
    step.line = line3
    step.key_lines = {"plugin": line3, "input": line + 4}
    steps = LineList((step,))
    steps.line = line3
    steps.item_lines = [line3]
    rule = LineDict(id=rid, triggers=triggers, steps=steps)
    rule.line = line
    rule.key_lines = {"id": line, "triggers": line1, "steps": line + 2}
    return rule, m.end()
