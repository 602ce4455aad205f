"""The value language rules are written in: paths, ``{templates}``, ``?=`` expressions.

It sits below both the rulebook (which compiles every value once, at load time)
and the engine (which evaluates them per run), and imports neither:

- :mod:`tmy.values.paths` — ``a.b[0]["k"]`` paths into nested values;
- :mod:`tmy.values.expressions` — the sandboxed expression evaluator;
- :mod:`tmy.values.cost` — the size/time cost model that bounds every evaluation;
- :mod:`tmy.values.compiled` — constants, templates and expressions compiled into
  :class:`~tmy.values.compiled.Value` objects.
"""
