"""Rules as loaded: YAML compiled once into rules, triggers, the trigger index and variables.

Read top-down:

- :mod:`~tmy.rulebook.loader` — files to a :class:`~tmy.rulebook.model.Rulebook`, every problem
  reported as ``file:line``; built on :mod:`~tmy.rulebook.rules` (one rule),
  :mod:`~tmy.rulebook.steps` (one step) and :mod:`~tmy.rulebook.fields` (one field);
- :mod:`~tmy.rulebook.atomic` — what a rule's steps read, write and must hold locked;
- :mod:`~tmy.rulebook.model` — the compiled objects the engine runs;
- :mod:`~tmy.rulebook.index` — the trigger index (the rule for a message, without a loop over
  rules); :mod:`~tmy.rulebook.nearmiss` — triggers that almost fired (``explain``);
- :mod:`~tmy.rulebook.triggers` — one trigger; :mod:`~tmy.rulebook.textform` — the text
  triggers match on; :mod:`~tmy.rulebook.regexrisk` — regex triggers that can backtrack.
"""
