"""Harnesses that drive the whole bot, for our tests and for rule and plugin authors' own.

    async with Bot({"demo.yaml": RULES}) as bot:          # the engine, no adapters
        assert (await bot.ask("joke")).text == "A"

    async with serving({"demo.yaml": RULES}) as daemon:   # the daemon, as ``run.py serve``
        assert (await daemon.push("joke")).text == "A"
        sent = await daemon.pop()                         # a cron post or ``send``

Messages go through the real engine, store, executors and extensions — nothing
is mocked. The pytest plugin (:mod:`tmy.testing.plugin`, entry point
``pytest11``) gives tests the same as the fixtures ``bot`` and ``daemon``.
"""

from tmy.testing.bot import Bot
from tmy.testing.loopback import LoopbackAdapter, Sent
from tmy.testing.serving import Daemon, serving

__all__ = ["Bot", "Daemon", "LoopbackAdapter", "Sent", "serving"]
