"""The engine: a Message in, a Reply out — matching, gates, the run of a rule's chain, replies.

Read top-down:

- :mod:`~tmy.engine.core` — :class:`Engine`, the one entry point (``handle``);
- :mod:`~tmy.engine.gates` — what a message passes first (sizes, ids, admins, commands, the
  chat switch); :mod:`~tmy.engine.cooldowns` — a rule's cooldown window;
- :mod:`~tmy.engine.scheduler` — a rule's chain (``when:``, ``stop:``, errors, hooks, atomic
  spans); :mod:`~tmy.engine.execute` — one step; :mod:`~tmy.engine.run` — the run's state and
  the context an executor gets; :mod:`~tmy.engine.variables` — locals and declared variables;
- :mod:`~tmy.engine.replies` — the answer, error texts, summaries and sessions;
- :mod:`~tmy.engine.tracing` — trace ids and the run's log lines;
  :mod:`~tmy.engine.inflight` — runs in flight and draining them;
- :mod:`~tmy.engine.services` — what runs and executors reach (settings, store, registry,
  extension state, HTTP); :mod:`~tmy.engine.switch` — chats where the bot is off.
"""
