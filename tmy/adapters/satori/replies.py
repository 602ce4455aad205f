"""Running one Satori message or event and answering it (the adapter's half that talks back).

For each :class:`~tmy.adapters.satori.events.Incoming`, in its chat's turn:

* with ``admins_from`` set, ``Message.chat_admin`` says whether the sender is
  owner/admin of the guild (:mod:`~tmy.adapters.satori.admins`);
* ``Message.api`` downloads attachments and gives the quoted message
  (:mod:`~tmy.adapters.satori.media`);
* a request's ``APPROVE`` is answered with ``friend.approve``, ``guild.approve`` or
  ``guild.member.approve`` (``{message_id, approve, comment}``: the reason goes as
  the comment); no decision leaves it pending on the platform; a failed run of a
  request says nothing;
* the reply goes to the channel, through the account that received the message,
  quoting the answered message in a group (:mod:`~tmy.adapters.satori.compose`).

Streaming: replies go whole. Satori's ``message.update`` is optional and many
platforms behind it cannot edit (QQ), so a growing message cannot be relied on; a
``stream:`` step's answer is sent when the run ends. There is no "typing…" either:
the protocol has no such call.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Hashable
from pathlib import Path

from tmy.adapters.base import AdapterHealth, Handler
from tmy.adapters.fairness import ChatQueues
from tmy.adapters.satori.admins import ChatAdmins
from tmy.adapters.satori.api import SatoriHttp
from tmy.adapters.satori.compose import compose
from tmy.adapters.satori.events import Incoming
from tmy.adapters.satori.logins import Logins
from tmy.adapters.satori.media import SatoriPlatformApi
from tmy.adapters.satori.sending import QueuedReply, send_piece
from tmy.errors import AdapterError
from tmy.logs import get_logger
from tmy.message import Outgoing, Reply, Target

log = get_logger("tmy.adapter.satori")

MAX_SENT_IDS = 4096  # ids of the bot's own messages remembered per account (reply-to-bot)


class Answering:
    """The answering half of :class:`~tmy.adapters.satori.adapter.SatoriAdapter`."""

    backoff_base: float
    backoff_cap: float
    rules_dir: Path | None
    _handle: Handler | None
    _http: SatoriHttp | None
    _health: AdapterHealth
    _logins: Logins
    _outbound: ChatQueues[QueuedReply]
    _admins: ChatAdmins
    _proxy_urls: tuple[str, ...]
    _sent_ids: dict[tuple[str, str], OrderedDict[str, None]]

    async def _answer(self, chat: Hashable, incoming: Incoming) -> None:
        """Run the rules on one message or event and answer it (a ChatQueues work); never raises."""
        message, http = incoming.message, self._http
        assert self._handle is not None
        try:
            if http is None:
                return None
            if not message.private and not incoming.approve_with:  # a requester is no member
                key = (incoming.platform, incoming.self_id, incoming.guild, message.user)
                message.chat_admin = await self._admins.is_admin(key, incoming.member_roles)
            message.api = SatoriPlatformApi(
                http, platform=incoming.platform, self_id=incoming.self_id,
                channel=incoming.channel, quoted=incoming.quoted, proxy_urls=self._proxy_urls,
            )  # fmt: skip
            reply = await self._handle(message)
            if incoming.approve_with:
                await self._decide(http, incoming, reply)
                if reply.error is not None:
                    return None  # a failed decision is logged; nobody hears of it
            await self._deliver(incoming, reply)
        except Exception as exc:
            log.exception("satori.message_failed", message_id=message.message_id, error=repr(exc))
        return None

    async def _decide(self, http: SatoriHttp, incoming: Incoming, reply: Reply) -> None:
        """APPROVE on a request: accept or decline it at the platform (None: leave it)."""
        event = incoming.message.event
        assert event is not None
        flag = str(event.data.get("flag") or "")
        if reply.approve is None or not flag:
            log.info("satori.request_pending", kind=event.kind, user=incoming.message.user,
                     rule=reply.rule, reason=reply.reason or reply.error)  # fmt: skip
            return
        body: dict[str, object] = {"message_id": flag, "approve": reply.approve}
        if reply.approve_reason:
            body["comment"] = reply.approve_reason
        try:
            await http.call(incoming.approve_with, body, platform=incoming.platform,
                            user_id=incoming.self_id)  # fmt: skip
        except AdapterError as exc:
            log.warning("satori.request_failed", method=incoming.approve_with,
                        user=incoming.message.user, error=str(exc))  # fmt: skip
            return
        log.info("satori.request_answered", method=incoming.approve_with,
                 user=incoming.message.user, approve=reply.approve, rule=reply.rule)  # fmt: skip

    async def _deliver(self, incoming: Incoming, reply: Reply) -> None:
        """The reply's text and parts to the message's channel (a request: the user's)."""
        text, parts = reply.text, reply.outgoing
        if not text.strip() and not parts:
            return
        asked = parts is not None and parts.reply_to == ""  # reply: true, in a private chat too
        quote = incoming.quote_id if asked or not incoming.message.private else None
        try:
            contents = compose(text, parts, platform=incoming.platform, quote=quote,
                               rules_dir=self.rules_dir)  # fmt: skip
        except AdapterError as exc:  # a bad part: say so, and send the text alone
            log.error("satori.reply_invalid", channel=incoming.channel, error=str(exc))
            contents = compose(text, None, platform=incoming.platform, quote=quote)
        channel = incoming.channel
        if not channel:  # a request's answer: the requester's private channel
            channel = await self._direct_channel(incoming.platform, incoming.self_id,
                                                 incoming.message.user)  # fmt: skip
        self._queue(incoming.platform, incoming.self_id, channel, contents)

    # -- sending -----------------------------------------------------------------------------

    async def send(self, target: Target, text: str, outgoing: Outgoing | None = None) -> None:
        """Post to ``target``: platform ``satori:<platform>``, ``chat`` a channel id (or
        ``user`` alone: their private channel, made with ``user.channel.create``), through
        the first online account of that platform."""
        platform = target.platform.partition(":")[2].strip()
        if not platform:
            raise AdapterError(
                "satori: the target platform must name the platform behind the server, "
                f"satori:<platform> such as satori:qq (got {target.platform!r})"
            )
        if not text.strip() and not outgoing:
            raise AdapterError("satori: refusing to send an empty message")
        if self._http is None:
            raise AdapterError(f"satori: not connected ({self._health.error or 'starting'})")
        login = self._logins.first(platform)
        if login is None:
            raise AdapterError(f"satori: the server has no account on {platform!r} "
                               f"(it serves {self._platforms() or 'none'})")  # fmt: skip
        channel = target.chat.strip()
        if not channel and target.user.strip():
            channel = await self._direct_channel(platform, login.user_id, target.user.strip())
        if not channel:
            raise AdapterError("satori: the target names no channel and no user")
        contents = compose(text, outgoing, platform=platform, rules_dir=self.rules_dir)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue(platform, login.user_id, channel, contents, done)
        await done

    async def _direct_channel(self, platform: str, self_id: str, user: str) -> str:
        assert self._http is not None
        found = await self._http.call("user.channel.create", {"user_id": user},
                                      platform=platform, user_id=self_id)  # fmt: skip
        channel = str(found.get("id") or "") if isinstance(found, dict) else ""
        if not channel:
            raise AdapterError(f"satori: user.channel.create gave no channel for {user}")
        return channel

    def _queue(
        self,
        platform: str,
        self_id: str,
        channel: str,
        contents: list[str],
        done: asyncio.Future[None] | None = None,
    ) -> None:
        out = QueuedReply(platform, self_id, channel, contents, done, self._remember_sent)
        out.backoff.base, out.backoff.cap = self.backoff_base, self.backoff_cap
        if not contents:
            out.finish(None)
            return
        self._outbound.put((platform, self_id, channel), out)

    async def _send_step(self, key: Hashable, out: QueuedReply) -> float | None:
        return await send_piece(self._http, out)

    def _remember_sent(self, platform: str, self_id: str, ids: list[str]) -> None:
        """Keep the ids of the bot's messages: a quote of one is a reply to the bot."""
        seen = self._sent_ids.setdefault((platform, self_id), OrderedDict())
        for message_id in ids:
            seen[message_id] = None
        while len(seen) > MAX_SENT_IDS:
            seen.popitem(last=False)

    def _platforms(self) -> str:
        return ", ".join(sorted({f"satori:{d['platform'].split(':', 1)[1]}"
                                 for d in self._logins.as_list()}))  # fmt: skip
