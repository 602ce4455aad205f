"""Persistence backends behind one protocol; see :mod:`tmy.store.base`."""

from tmy.store.base import MISSING, STORE_FORMAT, Snapshot, Store
from tmy.store.url import open_store

__all__ = ["MISSING", "STORE_FORMAT", "Snapshot", "Store", "open_store"]
