"""Time zone names, resolved once: ``timezone:`` in the config and a schedule's own.

``settings.tz`` holds the config's zone (None: the machine's local time); a rule's
``schedule: {timezone: …}`` goes through the same :func:`zone_of`, so both refuse a
bad name with the same words.
"""

from __future__ import annotations

from datetime import tzinfo
from zoneinfo import ZoneInfo

from tzlocal import get_localzone  # APScheduler's own dependency

from tmy.errors import ConfigError, TmyError

LOCAL = ("", "local")


def zone_of(name: str | None, error: type[TmyError] = ConfigError) -> tzinfo | None:
    """The IANA zone ``name`` names, None for the machine's local time (``local``/empty).

    A name no zone answers to raises ``error`` (ConfigError for the config; the
    rulebook passes RuleError for a schedule's ``timezone:``).
    """
    if name is None or name in LOCAL:
        return None
    try:
        return ZoneInfo(name)
    except Exception:
        raise error(f"unknown timezone {name!r} (use an IANA name like 'Asia/Shanghai')") from None


def concrete(tz: tzinfo | None) -> tzinfo:
    """``tz``, or the machine's own zone for None: cron triggers need a real zone."""
    return tz if tz is not None else get_localzone()
