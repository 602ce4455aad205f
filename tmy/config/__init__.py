"""Configuration: ``config/tmy.yaml``, then ``TMY_*`` environment variables, then CLI flags.

:func:`load_settings` reads and checks everything once into a frozen
:class:`Settings`; the rest of tmy reads it and checks nothing again. One module per
concern: :mod:`~tmy.config.load` (the file, the environment, the flags),
:mod:`~tmy.config.schema` (the keys each section takes), :mod:`~tmy.config.settings`
(the Settings and its ``limits``/``log`` sections), :mod:`~tmy.config.adapters`
(``adapters:``), :mod:`~tmy.config.llm` (``llm:``), :mod:`~tmy.config.memory`
(``llm.memory:``), :mod:`~tmy.config.store` (the store URL's syntax),
:mod:`~tmy.config.timezone` (time zone names).
"""

from __future__ import annotations

from tmy.config.adapters import ADAPTER_SECTIONS, PLATFORM_SECTIONS, Adapters, parse_listen
from tmy.config.load import (
    CHECKOUT_CONFIG,
    DEFAULT_CONFIG,
    ENV,
    key_line,
    load_settings,
    setting_error,
    with_sections,
)
from tmy.config.settings import Limits, LogConfig, LogRotate, Settings
from tmy.config.store import StoreURL, parse_store_url
from tmy.config.timezone import zone_of

__all__ = [
    "ADAPTER_SECTIONS",
    "CHECKOUT_CONFIG",
    "DEFAULT_CONFIG",
    "ENV",
    "PLATFORM_SECTIONS",
    "Adapters",
    "Limits",
    "LogConfig",
    "LogRotate",
    "Settings",
    "StoreURL",
    "key_line",
    "load_settings",
    "parse_listen",
    "parse_store_url",
    "setting_error",
    "with_sections",
    "zone_of",
]
