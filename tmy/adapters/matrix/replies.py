"""Running one message or event and answering it (the adapter's half that talks back).

For each :class:`~tmy.adapters.matrix.incoming.Incoming`, in its room's turn:

* an ``m.room.encrypted`` event is not run: tmy cannot decrypt it, and says so
  once per room (an ``m.notice``, which shows in every client although the room
  is encrypted; the notice is remembered in the store so it is said only once);
* the room is known as a DM or a group (:mod:`~tmy.adapters.matrix.rooms`), a
  reply to one of the bot's own events counts as a mention, and with
  ``admins_from`` set ``Message.chat_admin`` comes from the room's power levels;
* ``Message.api`` downloads attachments and gives the quoted message;
  ``Message.stream`` is a :class:`~tmy.adapters.streaming.GrowingMessage`: a
  ``stream:`` step's answer is posted, then replaced by edits (``m.replace``) at
  most once per :attr:`Answering.stream_interval` seconds, the reply's final text
  being the last edit;
* while the run works longer than :attr:`Answering.typing_after` seconds the
  room shows "typing…" (``PUT /rooms/{room}/typing/{user}``), taken back when the
  run ends;
* the reply goes to the room — into the thread the message came from —, quoting
  the answered message in a group room (not in a DM, where nothing else is said
  in between, unless the rule asks with ``reply:``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext, suppress
from typing import Any

from mautrix.client import ClientAPI
from mautrix.types import EventType, RoomID

from tmy.adapters.base import AdapterHealth, Backoff, Handler
from tmy.adapters.fairness import ChatQueues
from tmy.adapters.matrix.compose import MediaLoader, Piece, compose
from tmy.adapters.matrix.incoming import Incoming, Me, Recent
from tmy.adapters.matrix.media import MatrixApi, fetch_event
from tmy.adapters.matrix.rooms import Rooms
from tmy.adapters.matrix.sending import QueuedReply, Reauth, relations, send_piece
from tmy.adapters.matrix.text import MAX_TEXT, split_text
from tmy.adapters.streaming import GrowingMessage, typing_while
from tmy.config.matrix import MatrixConfig
from tmy.errors import AdapterError
from tmy.logs import get_logger
from tmy.message import Outgoing, Reply, Target
from tmy.store.base import MISSING, Store

log = get_logger("tmy.adapter.matrix")

ENCRYPTED_NOTICE = (
    "This room is end-to-end encrypted, and this bot cannot read encrypted messages. "
    "Talk to it in a room without encryption."
)


class Answering:
    """The answering half of :class:`~tmy.adapters.matrix.adapter.MatrixAdapter`."""

    typing_after = 1.0  # seconds a run works before "typing…" shows (tests shrink it)
    stream_interval = 1.0  # seconds between edits of a growing answer
    backoff_base: float
    backoff_cap: float
    config: MatrixConfig
    store: Store | None
    _handle: Handler | None
    _client: ClientAPI | None
    _me: Me | None
    _health: AdapterHealth
    _rooms: Rooms
    _recent: Recent
    _loader: MediaLoader
    _outbound: ChatQueues[QueuedReply]
    _told_encrypted: set[str]
    _reauth: Reauth  # the adapter's: log in again after a refused token (password logins)

    async def _answer(self, chat: Hashable, incoming: Incoming) -> None:
        """Run the rules on one message or event and answer it (a ChatQueues work); never raises."""
        message, client = incoming.message, self._client
        assert self._handle is not None
        try:
            if client is None or self._me is None:
                return None
            if incoming.encrypted:
                await self._say_encrypted(incoming.room)
                return None
            message.private = await self._rooms.is_private(incoming.room)
            if incoming.in_reply_to and not message.mentions_bot:
                message.mentions_bot = await self._from_bot(client, incoming)
            if self.config.admins_from and not message.private:
                role = await self._rooms.role(incoming.room, message.user)
                message.chat_admin = role in self.config.admins_from
            message.api = MatrixApi(client, self._recent, incoming.room)
            stream = self._growing(client, incoming) if message.event is None else None
            message.stream = stream
            async with self._typing(client, incoming):
                reply = await self._handle(message)
            await self._deliver(incoming, reply, stream)
        except Exception as exc:
            log.exception("matrix.message_failed", event_id=message.message_id, error=repr(exc))
            if isinstance(message.stream, GrowingMessage):
                await message.stream.finish(message.stream.shown)
        return None

    async def _from_bot(self, client: ClientAPI, incoming: Incoming) -> bool:
        """Whether the event ``incoming`` replies to is the bot's."""
        assert incoming.in_reply_to is not None and self._me is not None
        seen = self._recent.get(incoming.in_reply_to)
        if seen is None:
            try:
                event = await fetch_event(client, incoming.room, incoming.in_reply_to)
            except Exception:
                return False
            return event.get("sender") == self._me.user_id
        return seen["user"] == self._me.user_id

    async def _say_encrypted(self, room: str) -> None:
        """Tell an encrypted room once that tmy cannot read it (see the module doc)."""
        if room in self._told_encrypted:
            return
        self._told_encrypted.add(room)
        key = f"matrix/{self._me.user_id if self._me else ''}/encrypted_notice/{room}"
        if self.store is not None and await self.store.get(key) is not MISSING:
            return
        log.warning(
            "matrix.encrypted_room",
            room=room,
            hint="end-to-end encryption is not supported: messages there are not read",
        )
        content = {"msgtype": "m.notice", "body": ENCRYPTED_NOTICE, "m.mentions": {}}
        self._queue(room, [Piece(content)])
        if self.store is not None:
            await self.store.set(key, True)

    def _typing(self, client: ClientAPI, incoming: Incoming) -> AbstractAsyncContextManager[Any]:
        if incoming.message.event is not None:
            return nullcontext()
        return _typing_in(client, RoomID(incoming.room), self.typing_after)

    def _growing(self, client: ClientAPI, incoming: Incoming) -> GrowingMessage:
        room = incoming.room
        first = QueuedReply(
            room,
            [],
            reply_to=self._quote(incoming, None),
            thread=incoming.thread,
            last=incoming.message.message_id,
        )

        async def post(text: str) -> str:
            content = _text(text)
            related = relations(first)
            if related:
                content["m.relates_to"] = related
            event_id = await client.send_message_event(
                RoomID(room), EventType.ROOM_MESSAGE, content
            )
            self._sent(room, str(event_id), content)
            return str(event_id)

        async def edit(event_id: str, text: str) -> None:
            content = {
                **_text("* " + text),
                "m.new_content": _text(text),
                "m.relates_to": {"rel_type": "m.replace", "event_id": event_id},
            }
            await client.send_message_event(RoomID(room), EventType.ROOM_MESSAGE, content)
            self._recent.keep(event_id, self._me.user_id if self._me else "", text)

        return GrowingMessage(post, edit, interval=self.stream_interval, limit=MAX_TEXT)

    async def _deliver(
        self, incoming: Incoming, reply: Reply, stream: GrowingMessage | None
    ) -> None:
        """The reply's text and parts to the room (after a growing answer, what it lacks)."""
        text, parts = reply.text, reply.outgoing
        quote = self._quote(incoming, parts)
        if stream is not None:
            text = text.strip()  # as split_text cuts it: the head is then a prefix of it
            head = (split_text(text) or [""])[0]
            if await stream.finish(head):  # the head is on screen: send only what it lacks
                text = text[len(head) :].lstrip() if text.startswith(head) else ""
                quote = None
                if parts:  # mentions cannot be added to a message already shown
                    parts = Outgoing(parts.images, parts.files, buttons=parts.buttons)
        if not text.strip() and not parts:
            return
        names = {incoming.message.user: incoming.message.user_name}
        names.update(self._rooms.room(incoming.room).names)
        try:
            pieces = compose(text, parts, names)
        except AdapterError as exc:  # a bad part: say so, and send the text alone
            log.error("matrix.reply_invalid", room=incoming.room, error=str(exc))
            pieces = compose(text, None)
        self._queue(
            incoming.room,
            pieces,
            reply_to=quote,
            thread=incoming.thread,
            last=incoming.message.message_id,
        )

    def _quote(self, incoming: Incoming, parts: Outgoing | None) -> str | None:
        """The event the reply quotes: ``reply_to`` of its parts ("" the answered message),
        else the answered message in a group room; events quote nothing."""
        message = incoming.message
        if message.event is not None:
            return None
        if parts is not None and parts.reply_to is not None:
            return parts.reply_to or message.message_id
        return None if message.private else message.message_id

    # -- sending -----------------------------------------------------------------------------

    async def send(self, target: Target, text: str, outgoing: Outgoing | None = None) -> None:
        """Post ``text`` (and ``outgoing``'s pictures, files and mentions) to the room id
        ``target.chat`` (``!room:server``; ``!<hash>`` in a version 12 room), or without
        one to ``target.user``'s DM room (the first the account's ``m.direct`` lists)."""
        room = target.chat.strip()
        if not room and target.user:
            rooms = self._rooms.direct_with.get(target.user.strip()) or []
            if not rooms:
                raise AdapterError(
                    f"matrix: no DM room with {target.user} in m.direct: "
                    "give the room id as the chat"
                )
            room = rooms[0]
        if not (room.startswith("!") and len(room) > 1 and not any(c.isspace() for c in room)):
            raise AdapterError(
                f"matrix: the target chat must be a room id like !abc:example.org "
                f"(in a version 12 room: !<hash>, no server name; got {target.chat!r})"
            )
        if not text.strip() and not outgoing:
            raise AdapterError("matrix: refusing to send an empty message")
        if self._client is None or self._me is None:
            raise AdapterError(f"matrix: not connected ({self._health.error or 'starting'})")
        pieces = compose(text, outgoing, self._rooms.room(room).names)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        quote = outgoing.reply_to if outgoing is not None and outgoing.reply_to else None
        self._queue(room, pieces, reply_to=quote, done=done)
        await done

    def _queue(
        self,
        room: str,
        pieces: list[Any],
        *,
        reply_to: str | None = None,
        thread: str | None = None,
        last: str | None = None,
        done: asyncio.Future[None] | None = None,
    ) -> None:
        out = QueuedReply(room, pieces, reply_to=reply_to, thread=thread, last=last, done=done)
        out.backoff = Backoff(self.backoff_base, self.backoff_cap)
        if not out.pieces:
            out.finish(None)
            return
        self._outbound.put(room, out)

    async def _send_step(self, key: Hashable, out: QueuedReply) -> float | None:
        """One event of ``out`` (a ChatQueues work; see ``sending``)."""
        return await send_piece(self._client, out, self._loader, self._sent, self._reauth)

    def _sent(self, room: str, event_id: str, content: dict[str, Any]) -> None:
        """Remember the bot's own event: a reply to it is a reply to the bot."""
        self._recent.keep(
            event_id, self._me.user_id if self._me else "", str(content.get("body", ""))
        )


def _text(body: str) -> dict[str, Any]:
    return {"msgtype": "m.text", "body": body, "m.mentions": {}}


@asynccontextmanager
async def _typing_in(client: ClientAPI, room: RoomID, after: float) -> AsyncIterator[None]:
    """ "typing…" in ``room`` while the body runs longer than ``after`` seconds (6 s
    notices renewed every 5 s), taken back when it ends: the homeserver would show it
    up to 6 s past the answer otherwise."""
    shown = False

    async def action() -> None:
        nonlocal shown
        await client.set_typing(room, timeout=6000)
        shown = True

    try:
        async with typing_while(action, after=after, every=5.0):
            yield
    finally:
        if shown:  # briefly: a stop() may be waiting for this run
            with suppress(Exception):
                async with asyncio.timeout(2.0):
                    await client.set_typing(room, timeout=0)  # {"typing": false}
