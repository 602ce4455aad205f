"""What ``check`` (and the daemon, once it serves) warns about beyond the rulebook alone.

:attr:`Rulebook.warnings <tmy.rulebook.model.Rulebook.warnings>` knows the rules;
two more mistakes need the config or the files side by side:

* **an adapter that is not enabled**: a rule whose ``platforms:`` or
  ``schedule.send_to`` names onebot, discord, telegram, … while the config leaves
  that adapter off answers nowhere / posts nowhere, silently;
* **a trigger two files claim**: a newcomer's ``ai *`` beside a demo file's
  ``ai *`` — only one rule answers, decided by priority, trigger kind, literal
  length and file order. The collision is found with the trigger index's own
  matching (:meth:`Side.candidates <tmy.rulebook.index.Side.candidates>`): two
  triggers of different files collide when each matches the text the other one
  claims (its literal: ``ai`` for ``ai *``), so ``hello`` and ``hello *`` collide
  but ``a*`` and ``ai *`` (one merely broader) do not. Regex and catch-all
  (``*``) triggers cannot be probed: they collide when written the same.

Every warning is one ``file:line: …`` line, as errors are. A dead trigger the
rulebook reports that is also a collision across files is reported once, here
(the collision names both places and which rule wins).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tmy.errors import RuleError
from tmy.rulebook.index import TriggerIndex
from tmy.rulebook.model import Filters, Rule, Rulebook, dead_trigger_warning
from tmy.rulebook.textform import fold
from tmy.rulebook.triggers import KIND_RANK, Trigger
from tmy.yamlfile.source import read_yaml

_PROBED = frozenset({"exact", "prefix", "suffix", "contains"})
_KIND_BY_RANK = {rank: kind for kind, rank in KIND_RANK.items()}
Entry = tuple[tuple[int, int, int, int], Rule, Trigger]


Disabled = Callable[[str], "str | None"]
"""platform -> the config key that would enable its adapter when the config leaves it off,
else None (:func:`tmy.daemon.disabled_adapter` with the settings bound)."""


def rule_warnings(rulebook: Rulebook, disabled: Disabled | None = None) -> list[str]:
    """Every warning for ``check``: the rulebook's own, trigger collisions between files,
    and (given ``disabled``) rules naming adapters the config does not enable."""
    found = collisions(rulebook)
    superseded = {dead_trigger_warning(*pair) for pair in found.dead}
    out = [w for w in rulebook.warnings if w not in superseded]
    out += found.lines
    if disabled is not None:
        out += adapter_warnings(rulebook, disabled)
    return out


# -- adapters the config does not enable ------------------------------------------------------


def adapter_warnings(rulebook: Rulebook, disabled: Disabled) -> list[str]:
    """``platforms:`` and ``send_to:`` naming an adapter the config leaves off."""
    out = []
    files: dict[str, Any] = {}  # each rules file read once, for this call only
    for rule in rulebook.rules:
        platforms = rule.filters.platforms
        if platforms is not None:
            off = {p: key for p in sorted(platforms) if (key := disabled(p)) is not None}
            if off:
                where = _key_line(rule, ("platforms",), files)
                never = len(off) == len(platforms)
                out.append(
                    f"{rule.file}:{where}: rule {rule.id!r} answers on {', '.join(off)} "
                    f"(platforms:), but {_not_enabled(off)}"
                    + ("; it answers nowhere" if never else "")
                )
        schedule = rule.extras.get("schedule")
        for i, target in enumerate(getattr(schedule, "send_to", ())):
            key = disabled(target.platform)
            if key is not None:
                where = _key_line(rule, ("schedule", "send_to", i), files)
                out.append(
                    f"{rule.file}:{where}: rule {rule.id!r} posts to "
                    f"{target.platform}:{target.chat or target.user} (send_to), but "
                    f"{_not_enabled({target.platform: key})}; "
                    "each post fails until that adapter is enabled"
                )
    return out


def _not_enabled(off: dict[str, str]) -> str:
    """``the config does not enable the satori adapter (set adapters.satori.enabled: true)``:
    each adapter once, however many of its platforms (``satori:qq``, ``satori:kook``) ask."""
    adapters = {key: key.split(".")[1] for key in off.values()}  # adapters.<name>.enabled
    noun = "adapter" if len(adapters) == 1 else "adapters"
    keys = ", ".join(f"{key}: true" for key in adapters)
    return f"the config does not enable the {', '.join(adapters.values())} {noun} (set {keys})"


def _key_line(rule: Rule, path: tuple[Any, ...], files: dict[str, Any]) -> int:
    """The line of ``path`` (keys, list positions) inside ``rule``'s YAML; the rule's line
    when the file cannot be read again (rules given as text, or changed since).

    ``files``: the files read so far by this warning pass (a process-wide cache would
    keep every version of every file a long-running daemon reloads)."""
    if rule.file not in files:
        try:
            files[rule.file] = read_yaml(Path(rule.file))
        except (RuleError, OSError):
            files[rule.file] = None
    data = files[rule.file]
    if data is None:
        return rule.line
    node = next((r for r in _rules_of(data) if r.get("id") == rule.id), None)
    line = rule.line
    for part in path:
        if node is None or not hasattr(node, "line_of"):
            break
        try:
            line = node.line_of(part) or line
            node = node[part]
        except (KeyError, IndexError, TypeError):
            break
    return line


def _rules_of(data: Any) -> list[Any]:
    rules = data.get("rules") if isinstance(data, dict) else None
    return [r for r in rules if isinstance(r, dict)] if isinstance(rules, list) else []


# -- triggers two files claim ------------------------------------------------------------------


class Collisions:
    """The collision warnings, and the (loser, trigger, winner, trigger) pairs that are
    dead triggers too (the rulebook's own line for those is dropped)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.dead: list[tuple[Rule, Trigger, Rule, Trigger]] = []


def collisions(rulebook: Rulebook) -> Collisions:
    """Triggers of different files that answer the same text (see the module docstring)."""
    index = rulebook.index
    dead = {(id(t), id(ut)) for _, t, _, ut in index.dead_triggers()}
    out = Collisions()
    seen: set[frozenset[int]] = set()
    for winner, loser in _pairs(index, rulebook):
        pair = frozenset((id(winner[2]), id(loser[2])))
        if pair in seen:
            continue
        seen.add(pair)
        never = (id(loser[2]), id(winner[2])) in dead
        out.lines.append(_collision_line(winner, loser, never))
        if never:
            out.dead.append((loser[1], loser[2], winner[1], winner[2]))
    return out


def _pairs(index: TriggerIndex, rulebook: Rulebook) -> Iterator[tuple[Entry, Entry]]:
    """(winner, loser) for each two triggers of different files that collide."""
    cache: dict[str, dict[int, Entry]] = {}

    def matching(probe: str) -> dict[int, Entry]:
        hit = cache.get(probe)
        if hit is None:
            hit = cache[probe] = _matching(index, probe)
        return hit

    alike: dict[tuple[str, str, bool], list[Entry]] = {}  # regex and catch-all, as written
    for order, rule in enumerate(rulebook.rules):
        for trig in rule.triggers:
            key = (-rule.priority, KIND_RANK[trig.kind], -len(trig.literal), order)
            entry: Entry = (key, rule, trig)
            if trig.kind not in _PROBED:
                alike.setdefault((trig.kind, trig.magic, trig.case_sensitive), []).append(entry)
                continue
            for other in matching(_probe(trig)).values():
                if other[1].file == rule.file or other[2] is trig:
                    continue
                if id(trig) not in matching(_probe(other[2])):
                    continue  # the other one is merely broader ("a*" beside "ai *")
                if _disjoint(rule.filters, other[1].filters):
                    continue
                yield (entry, other) if key < other[0] else (other, entry)
    for entries in alike.values():
        entries.sort(key=lambda e: e[0])
        for loser in entries[1:]:
            winner = next((e for e in entries if e[1].file != loser[1].file), None)
            if winner is None or winner[0] > loser[0]:
                continue
            if not _disjoint(winner[1].filters, loser[1].filters):
                yield winner, loser


def _probe(trig: Trigger) -> str:
    """The text a trigger claims: its literal without the space of ``word *``."""
    return trig.literal.strip() or trig.literal


def _matching(index: TriggerIndex, probe: str) -> dict[int, Entry]:
    """Every probed-kind trigger the index matches on ``probe`` (filters ignored)."""
    out: dict[int, Entry] = {}
    for side, text in ((index.folded, fold(probe)), (index.sensitive, probe)):
        if not side.used:
            continue
        for entry, _, _ in side.candidates(text, probe, _PROBED):
            out.setdefault(id(entry[2]), entry)
    return out


def _disjoint(a: Filters, b: Filters) -> bool:
    """Whether no message can pass both rules' filters (different platforms, chats, …)."""
    if a.platforms is not None and b.platforms is not None and not a.platforms & b.platforms:
        return True
    if a.chats is not None and b.chats is not None and not a.chats & b.chats:
        return True
    return a.private is not None and b.private is not None and a.private != b.private


def _collision_line(winner: Entry, loser: Entry, never: bool) -> str:
    (wkey, wrule, wtrig), (lkey, lrule, ltrig) = winner, loser
    why = _why(wkey, lkey, wrule, lrule)
    if not wrule.filters.is_open:
        why += ", when its filters admit the message"
    tail = (
        f"; {ltrig.source!r} can never fire" if never else ""
    ) + " (give one rule a higher 'priority:', or another trigger)"
    shared = ltrig.magic if ltrig.kind in _PROBED else ltrig.source
    return (
        f"{lrule.file}:{ltrig.line or lrule.line}: trigger {ltrig.source!r} of rule {lrule.id!r} "
        f"collides with trigger {wtrig.source!r} of rule {wrule.id!r} "
        f"({wrule.file}:{wtrig.line or wrule.line}): both answer {shared!r}, and rule "
        f"{wrule.id!r} wins ({why}){tail}"
    )


def _why(wkey: tuple[int, ...], lkey: tuple[int, ...], wrule: Rule, lrule: Rule) -> str:
    if wkey[0] != lkey[0]:
        return f"priority {wrule.priority} over {lrule.priority}"
    if wkey[1] != lkey[1]:
        return f"{_KIND_BY_RANK[wkey[1]]} before {_KIND_BY_RANK[lkey[1]]} triggers"
    if wkey[2] != lkey[2]:
        return "its literal is longer"
    return f"same priority and kind: {wrule.file} is read first"
