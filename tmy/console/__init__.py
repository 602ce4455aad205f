"""The web console: the daemon's fourth front end (after the CLI, chat and the HTTP
admin API), served under ``console.path`` on the one web listener for the people
who run the bot — rules, a playground that explains, variables, schedules, live
runs, memory, chats and health, behind a password.

:func:`routes` is what the app mounts when ``console.enabled``: every page
module's ``ROUTES`` (see :mod:`tmy.console.web`) behind the login
(:mod:`tmy.console.guard`); mounting also sets the engine's observer to the live
feed (:func:`tmy.console.feed.attach`). A page module may also have
``setup(site)``, called once when the console is mounted (to start what its pages
share). The modules are imported here, when the
console is mounted, not when :mod:`tmy.app` is: a one-shot CLI command pays
for neither aiohttp nor Jinja.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING

from tmy.config.console import ENV_PASSWORD, ENV_VIEWER_PASSWORD
from tmy.errors import ConfigError

if TYPE_CHECKING:
    from aiohttp import web

    from tmy.types import AppLike


def page_modules() -> list[ModuleType]:
    """The page modules, in the nav's order (imported now: see the module docstring)."""
    from tmy.console import (  # deferred: aiohttp and Jinja, for a console only
        chats,
        live,
        memory,
        overview,
        playground,
        rules,
        schedules,
        variables,
    )

    return [overview, rules, playground, live, variables, schedules, memory, chats]


def mounted(app: AppLike, *, listener: object | None) -> list[web.RouteDef]:
    """What the app mounts on its ``listener``: the console's routes when ``console.enabled``
    (ConfigError when there is no listener or no password), else none."""
    if not app.settings.web_console.enabled:
        return []
    if listener is None:
        raise ConfigError(
            "console.enabled needs the HTTP listener, but adapters.http.enabled is false"
        )
    defs = routes(app)
    # the passwords live on as hashes only: not in the environment plugins, steps and child
    # processes inherit (/proc/PID/environ), once the config has read them
    for name in (ENV_PASSWORD, ENV_VIEWER_PASSWORD):
        os.environ.pop(name, None)
    return defs


def routes(app: AppLike) -> list[web.RouteDef]:
    """The console's routes for ``app``'s listener (ConfigError when it has no password)."""
    from tmy.console import feed  # deferred: what only a console needs is imported now
    from tmy.console.guard import mount  # deferred: aiohttp and Jinja, for a console only

    # the engine reports its runs to the console from now on (the overview's counters, the
    # live views): one bounded append per run, see tmy.console.feed
    feed.attach(app.engine, app.settings.tz)
    modules = page_modules()
    pairs = [(m.__name__.rsplit(".", 1)[1], tuple(getattr(m, "ROUTES", ()))) for m in modules]
    defs, site = mount(app, pairs)
    for module in modules:
        setup = getattr(module, "setup", None)
        if setup is not None:
            setup(site)
    return defs
