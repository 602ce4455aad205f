"""What adapters hand the engine (:class:`Message`), get back (:class:`Reply`) and address
(:class:`Target`), and the rule every user, chat and platform id meets (:func:`id_problem`).

Besides text, a message may carry **attachments** (:class:`Attachment`: images,
files, voice, stickers) or be a platform **event** (:class:`Event`: a member
joined, a request, a poke, a reaction, a recall, a button press); a reply may
carry **structured parts** (:class:`Outgoing`: images, files, mentions, a quote,
buttons) beside its text, which stays the fallback for platforms that cannot
send them, and, for a request event, the run's decision (``approve``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tmy.types import PlatformApi, StreamSink

# the one event vocabulary every adapter maps its platform's events onto (EVENT)
EVENT_KINDS = (
    "member_join",
    "member_leave",
    "friend_request",
    "group_invite",
    "join_request",
    "poke",
    "reaction",
    "message_recall",
    "button",
)
_new = object.__new__
# the events a run answers with APPROVE (the adapter accepts or declines the request)
REQUEST_EVENTS = frozenset({"friend_request", "group_invite", "join_request"})
ATTACHMENT_KINDS = ("image", "file", "voice", "video", "sticker")


@dataclass(frozen=True, slots=True)
class Attachment:
    """One image, file, voice message, video or sticker a message carries.

    ``url`` is where it can be downloaded (may be "" when the platform gives only
    a file id); ``file_id`` the platform's own handle; ``inline``: the URL needs
    the platform's credentials or expires, so whoever hands it on (an LLM step)
    downloads it and sends the bytes (a data URL) instead of the URL. How to
    download is the adapter's (:meth:`tmy.types.PlatformApi.media_source`).
    """

    kind: str  # one of ATTACHMENT_KINDS
    url: str = ""
    file_id: str = ""
    size: int | None = None  # bytes, when the platform says
    mime: str = ""
    name: str = ""
    inline: bool = False

    def as_dict(self) -> dict[str, Any]:
        """What rules see in ATTACHMENTS / IMAGES (plain data, no credentials)."""
        return {
            "kind": self.kind,
            "url": self.url,
            "file_id": self.file_id,
            "size": self.size,
            "mime": self.mime,
            "name": self.name,
        }


@dataclass(frozen=True, slots=True)
class Event:
    """A platform event that is not a chat message (EVENT, EVENT_DATA, EVENT_RAW).

    ``kind`` is one of :data:`EVENT_KINDS`; ``raw`` the platform's own name for it
    (``notice.group_increase``, ``new_chat_members``, ``GUILD_MEMBER_ADD`` …);
    ``data`` the normalised fields (see docs/events.md: ``user``, ``operator``,
    ``target``, ``message_id``, ``emoji``, ``data``, ``comment`` …).
    """

    kind: str
    raw: str
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def is_request(self) -> bool:
        return self.kind in REQUEST_EVENTS


@dataclass(slots=True, init=False)
class Message:
    """One incoming chat message, platform-neutral.

    Its ``__init__`` is written out (the dataclass's own plus ``__post_init__``, in one
    frame): every adapter builds one per message. Same keywords, order and defaults.
    """

    text: str
    user: str = "anonymous"
    chat: str = ""  # "" means the user's private chat with the bot
    platform: str = "console"
    user_name: str = ""
    private: bool | None = None  # None: private when chat is "" or "private:<id>"
    is_admin: bool = False
    raw: Any = None  # the platform's own event, for adapters and plugins
    mentions_bot: bool = False  # the bot was @-mentioned or replied to (group chats)
    reply_to: str | None = None  # the platform's id of the message this one quotes
    self_id: str = ""  # which bot account received it (several accounts on one platform)
    message_id: str = ""  # the platform's id of this message
    # an identity that lasts one request (the OpenAI facade without a user or an API key):
    # no LLM history, dialogue record or memory entry is kept for it, so nothing piles up
    # under one-off ids and nothing could ever be recalled by someone else
    ephemeral: bool = False
    attachments: tuple[Attachment, ...] = ()  # images, files, voice … (ATTACHMENTS, IMAGES)
    event: Event | None = None  # set: a platform event, not a chat message (text is "")
    chat_admin: bool = False  # an admin of this chat by the platform's roles (admins_from)
    # what the platform can do for this message's run (download media, fetch a quoted
    # message); None on surfaces without a platform (console, HTTP, rule tests)
    api: PlatformApi | None = None
    stream: StreamSink | None = None  # where a stream: step sends its tokens as they come
    # whom ``admins:`` judge for is_admin: None, the sender (USER); else the identity a
    # credential proved — an API key's, ``key:…``, on the listener's /v1 routes, whose
    # USER a key holder merely names — and "" no one (no credential: nobody is an admin)
    admin_as: str | None = None

    def __init__(
        self,
        text: str,
        user: str = "anonymous",
        chat: str = "",
        platform: str = "console",
        user_name: str = "",
        private: bool | None = None,
        is_admin: bool = False,
        raw: Any = None,
        mentions_bot: bool = False,
        reply_to: str | None = None,
        self_id: str = "",
        message_id: str = "",
        ephemeral: bool = False,
        attachments: tuple[Attachment, ...] = (),
        event: Event | None = None,
        chat_admin: bool = False,
        api: PlatformApi | None = None,
        stream: StreamSink | None = None,
        admin_as: str | None = None,
    ) -> None:
        self.text = text
        self.user = user
        # "" is the user's private chat, and so is "private:<id>"
        if private is None:
            private = chat == "" or str(chat).startswith("private:")
        self.chat = chat if chat else f"private:{user}"
        self.platform = platform
        self.user_name = user_name if user_name else user
        self.private = private
        self.is_admin = is_admin
        self.raw = raw
        self.mentions_bot = mentions_bot
        self.reply_to = reply_to
        self.self_id = self_id
        self.message_id = message_id
        self.ephemeral = ephemeral
        self.attachments = attachments
        self.event = event
        self.chat_admin = chat_admin
        self.api = api
        self.stream = stream
        self.admin_as = admin_as

    @staticmethod
    def new(
        text: str,
        user: str = "anonymous",
        chat: str = "",
        platform: str = "console",
        user_name: str = "",
        private: bool | None = None,
        is_admin: bool = False,
        raw: Any = None,
        mentions_bot: bool = False,
        reply_to: str | None = None,
        self_id: str = "",
        message_id: str = "",
        ephemeral: bool = False,
        attachments: tuple[Attachment, ...] = (),
        event: Event | None = None,
        chat_admin: bool = False,
        api: PlatformApi | None = None,
        stream: StreamSink | None = None,
        admin_as: str | None = None,
    ) -> Message:
        """``Message(…)``, same keywords, order and defaults, made without the class call:
        Python 3.11 hands a class's keyword arguments to ``__init__`` through a dict
        built and unpacked per call (~1,400 instructions of a FAQ answer's ~44,000);
        a function takes them as they are. The adapters build each message this way;
        ``tests/test_message.py`` holds the two to the same fields."""
        self = _new(Message)
        self.text = text
        self.user = user
        # "" is the user's private chat, and so is "private:<id>"
        if private is None:
            private = chat == "" or str(chat).startswith("private:")
        self.chat = chat if chat else f"private:{user}"
        self.platform = platform
        self.user_name = user_name if user_name else user
        self.private = private
        self.is_admin = is_admin
        self.raw = raw
        self.mentions_bot = mentions_bot
        self.reply_to = reply_to
        self.self_id = self_id
        self.message_id = message_id
        self.ephemeral = ephemeral
        self.attachments = attachments
        self.event = event
        self.chat_admin = chat_admin
        self.api = api
        self.stream = stream
        self.admin_as = admin_as
        return self


@dataclass(slots=True)
class StepRecord:
    """What one step did, for ``ask --json`` and tests."""

    uri: str
    plugin: str
    input: Any = None
    result: Any = None
    error: str = ""
    ms: float = 0.0
    skipped: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. LLM model, tokens, retries

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if not out["extra"]:
            del out["extra"]
        out["error"] = self.error or None  # null when none, as in the log and explain
        return out


@dataclass(frozen=True, slots=True)
class Button:
    """A button under a reply: pressing it sends a ``button`` event carrying ``data``
    (or, with ``url``, opens the link and sends nothing)."""

    text: str
    data: str = ""
    url: str = ""


@dataclass(slots=True)
class Outgoing:
    """The structured parts of a reply beside its text (a step result map, see
    :func:`tmy.engine.replies.outgoing_of`); adapters send what their platform
    can and fall back to the reply's text for the rest."""

    images: list[str] = field(default_factory=list)  # http(s) URLs, data: URLs or file paths
    files: list[str] = field(default_factory=list)
    mentions: list[str] = field(default_factory=list)  # user ids to @
    reply_to: str | None = None  # quote this message id ("": the message being answered)
    buttons: list[list[Button]] = field(default_factory=list)  # rows of buttons

    def __bool__(self) -> bool:
        return (
            bool(self.images or self.files or self.mentions or self.buttons)
            or self.reply_to is not None
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class Reply:
    """The engine's answer to one message."""

    text: str
    rule: str | None
    trace_id: str
    error: str | None = None
    steps: list[StepRecord] = field(default_factory=list)
    stopped: bool = False  # a step's ``stop:`` ended the run (an answer, not an error)
    reason: str | None = None  # why there is no run: no trigger, a filter, a cooldown, …
    outgoing: Outgoing | None = None  # images, files, mentions, a quote, buttons
    approve: bool | None = None  # a request event's decision (APPROVE); None: none taken
    approve_reason: str = ""  # why (APPROVE_REASON), for platforms that pass one on

    @property
    def matched(self) -> bool:
        return self.rule is not None

    def as_dict(self, *, steps: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rule": self.rule,
            "answer": self.text,
            "error": self.error,
            "trace_id": self.trace_id,
        }
        if self.stopped:
            out["stopped"] = True
        if self.reason is not None:
            out["reason"] = self.reason
        if self.outgoing:
            out["outgoing"] = self.outgoing.as_dict()
        if self.approve is not None:
            out["approve"] = self.approve
            if self.approve_reason:
                out["approve_reason"] = self.approve_reason
        if steps:
            out["steps"] = [s.as_dict() for s in self.steps]
        return out


@dataclass(frozen=True, slots=True)
class Target:
    """Where a message sent on the bot's own initiative goes.

    ``chat`` uses the platform's chat ids as rules see them in ``CHAT``
    (``group:<id>`` or ``private:<user>`` on OneBot, a channel id on Discord
    and Telegram); ``user`` is optional (a private chat, or someone to @).
    """

    platform: str
    chat: str
    user: str = ""


def adapter_of(platform: str) -> str:
    """The adapter serving ``platform``: itself, or for a platform reached through a
    bridge (``satori:qq``, ``satori:kook``: PLATFORM names the platform behind it) the
    bridge's adapter (``satori``), which rules' ``platforms:`` and ``send_to`` also take."""
    return platform.partition(":")[0]


def id_problem(name: str, value: Any, limit: int) -> str | None:
    """Why ``value`` cannot be a user/chat/platform id, or None when it can.

    Ids become store keys, log fields and lock names: they must be text, valid
    UTF-8 (no lone surrogates) and short.
    """
    if not isinstance(value, str):
        return f"{name!r} must be a string, not {type(value).__name__}"
    if len(value) > limit:
        return f"{name!r} is {len(value)} characters long (the limit is {limit})"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{name!r} contains a lone surrogate (not valid Unicode text)"
    return None
