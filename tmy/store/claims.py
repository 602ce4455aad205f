"""Claims asked in one pass of the event loop, sent to the store together.

Under load a OneBot daemon de-duplicates dozens of messages per pass of its
event loop, each with :meth:`~tmy.store.base.Store.claim`: gathered by a
:class:`~tmy.store.passes.PassBatcher`, they are one transaction on SQLite and
one pipeline on Redis. What each claim answers is the same either way: the store
decides every key on its own, in the order asked.
"""

from __future__ import annotations

from tmy.store.passes import PassBatcher


class ClaimBatcher(PassBatcher[tuple[str, float], bool]):
    """``(key, ttl)`` claims gathered until the loop's next pass; ``send`` gets them in
    the order asked and answers one bool per claim."""

    async def claim(self, key: str, ttl: float) -> bool:
        return await self.ask((key, ttl))
