"""Configuration: ``config/tmy.yaml``, then ``TMY_*`` environment variables, then CLI flags.

:func:`load_settings` reads and checks everything once; the rest of tmy reads the
result. The sections live in their own modules: :mod:`tmy.config.settings` (the
file, the environment, the top-level keys), :mod:`tmy.config.llm` (``llm:``) and
:mod:`tmy.config.memory` (``llm.memory:``).
"""

from __future__ import annotations

from tmy.config.settings import (
    ADAPTER_SECTIONS,
    CHECKOUT_CONFIG,
    DEFAULT_CONFIG,
    ENV,
    PLATFORM_SECTIONS,
    Settings,
    load_settings,
)

__all__ = [
    "ADAPTER_SECTIONS",
    "CHECKOUT_CONFIG",
    "DEFAULT_CONFIG",
    "ENV",
    "PLATFORM_SECTIONS",
    "Settings",
    "load_settings",
]
