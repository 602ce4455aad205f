"""The value language rules are written in: paths, ``{templates}``, ``?=`` expressions.

It sits below both the rulebook (which compiles every value once, at load time)
and the engine (which evaluates them per run), and imports neither. Bottom up:

- :mod:`tmy.values.paths` — ``a.b[0]["k"]`` paths into nested values;
- :mod:`tmy.values.cost` — the size/time cost model that bounds every evaluation;
- :mod:`tmy.values.randomness` — where every random draw comes from (seedable);
- :mod:`tmy.values.operators`, :mod:`tmy.values.functions` — the operators,
  built-ins and methods an expression may use, each charged to the cost model
  (the random ones in :mod:`tmy.values.draws`, ``top``/``rank_of`` in
  :mod:`tmy.values.ranks`);
- :mod:`tmy.values.expressions` — the sandboxed expression evaluator;
- :mod:`tmy.values.value` — the :class:`~tmy.values.value.Value` type, constants,
  how values read as text;
- :mod:`tmy.values.templates` — ``{path}`` references and templates;
- :mod:`tmy.values.compiled` — any rule value compiled into a ``Value``
  (the entry point the rulebook and engine import from).
"""
