"""Persistence backends behind one protocol; see :mod:`tmy.store.base`."""

from tmy.store.base import MISSING, Store
from tmy.store.url import open_store

__all__ = ["MISSING", "Store", "open_store"]
