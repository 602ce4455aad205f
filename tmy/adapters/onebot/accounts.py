"""The OneBot adapter's open sockets and the bot account each one serves.

Several bot accounts may be connected at once; a new connection for an account
replaces (and closes) the old one. The most recently connected account is the
one ``send(target, …)`` uses on the bot's own initiative. The ids of the
messages each account sent are remembered, so a reply quoting one counts as
addressed to the bot.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Collection
from typing import Any

from tmy import metrics
from tmy.adapters.base import AdapterHealth
from tmy.adapters.onebot.connection import Connection
from tmy.logs import get_logger

log = get_logger("tmy.adapter.onebot")

MAX_SENT_IDS = 1000  # ids of sent messages remembered per account (a reply to one = a mention)


class Accounts:
    """Live connections by account (most recent last), every open socket, sent message ids."""

    def __init__(self, health: AdapterHealth, *, reverse: bool) -> None:
        self.health = health  # the adapter's: connected while any account is
        self.reverse = reverse  # reverse mode: no account connected means "reconnecting"
        self.bots: dict[str, Connection] = {}  # account -> live connection, most recent last
        self.conns: set[Connection] = set()  # every open socket, accounts known or not
        self.stopping = False
        self._sent: dict[str, OrderedDict[str, None]] = {}  # account -> ids of sent messages
        self._aux: set[asyncio.Task[Any]] = set()  # closing replaced sockets
        self._connected_before: set[str] = set()  # accounts (reverse) / "" (forward), for metrics

    def latest(self) -> str | None:
        """The most recently connected account, or None when none is."""
        return next(reversed(self.bots), None)

    def count_connect(self, account: str) -> None:
        """Metrics: a socket was established; a reconnect when this account had one before."""
        again = account in self._connected_before
        if not again and len(self._connected_before) < metrics.MAX_LABEL_VALUES:
            self._connected_before.add(account)
        metrics.adapter_connected("onebot", reconnect=again)

    def register(self, conn: Connection) -> None:
        """``conn`` now serves its account; an older connection for it is closed."""
        self.conns.add(conn)
        old = self.bots.pop(conn.self_id, None)
        self.bots[conn.self_id] = conn  # re-inserted: the most recently connected is last
        self.health.set("connected")
        log.info("onebot.account_connected", self_id=conn.self_id, peer=conn.peer)
        if old is not None and old is not conn:
            log.warning("onebot.replaced", self_id=conn.self_id, old=old.peer, new=conn.peer)
            task = asyncio.create_task(old.close("replaced by a newer connection"))
            self._aux.add(task)
            task.add_done_callback(self._aux.discard)

    def drop(self, conn: Connection, why: str) -> None:
        """``conn`` ended (``why``); the health says what is left."""
        self.conns.discard(conn)
        if conn.self_id and self.bots.get(conn.self_id) is conn:
            del self.bots[conn.self_id]
        if not self.stopping:
            log.warning(
                "onebot.disconnected", self_id=conn.self_id, peer=conn.peer, reason=why,
                failure=conn.failure,
            )  # fmt: skip
        if self.stopping:
            self.health.set("stopped")
        elif self.bots:
            self.health.set("connected")
        elif self.reverse:
            self.health.set("reconnecting", f"no OneBot implementation connected ({why})")

    def sent(self, self_id: str) -> Collection[str]:
        """Ids of the messages ``self_id`` sent lately."""
        return self._sent.get(self_id, ())

    def remember_sent(self, self_id: str, message_id: str) -> None:
        ids = self._sent.get(self_id)
        if ids is None:  # not setdefault: that builds an OrderedDict on every send
            ids = self._sent[self_id] = OrderedDict()
        ids[message_id] = None
        if len(ids) > MAX_SENT_IDS:
            ids.popitem(last=False)

    async def close_all(self) -> None:
        """Close every socket (tmy is stopping) and wait for the replaced ones to close."""
        import aiohttp  # deferred: aiohttp is ~120 ms of every CLI start

        for conn in list(self.conns):
            await conn.close("tmy is shutting down", code=aiohttp.WSCloseCode.GOING_AWAY)
        for task in list(self._aux):
            task.cancel()
        await asyncio.gather(*self._aux, return_exceptions=True)
