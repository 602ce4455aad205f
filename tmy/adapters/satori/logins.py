"""The bot accounts a Satori server serves (its ``Login`` resources), kept current.

``READY`` lists them all; ``login-added``, ``login-updated`` and ``login-removed``
events change the list while connected. A login is one account on one platform,
told apart by ``(platform, user id)`` — the pair every API call names in its
``Satori-Platform`` and ``Satori-User-ID`` headers. ``login.sn`` only identifies a
Login object within one connection (login events may lack user and platform
while an account is still connecting: they are matched by it).

Older servers (Satori before 1.1: Chronocat 0.0.x, Koishi's server plugin of 2023)
write ``self_id`` where newer ones write ``user.id``: both are read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

STATUS = {0: "offline", 1: "online", 2: "connecting", 3: "disconnecting", 4: "reconnecting"}
ONLINE = 1


@dataclass(slots=True)
class Login:
    """One bot account behind the server."""

    platform: str  # Satori's platform name: qq, discord, kook … (PLATFORM is satori:<it>)
    user_id: str
    name: str = ""
    status: int = ONLINE
    sn: int | None = None
    adapter: str = ""
    features: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.platform, self.user_id)

    def as_dict(self) -> dict[str, Any]:
        """What ``/healthz`` shows of it."""
        return {
            "platform": f"satori:{self.platform}",
            "user_id": self.user_id,
            "name": self.name,
            "status": STATUS.get(self.status, str(self.status)),
        }


def read_login(raw: Any) -> Login | None:
    """A Login resource (either protocol version), or None when it names no account yet."""
    if not isinstance(raw, dict):
        return None
    user = raw.get("user") if isinstance(raw.get("user"), dict) else {}
    user_id = str(user.get("id") or raw.get("self_id") or raw.get("selfId") or "")
    platform = str(raw.get("platform") or "")
    sn = raw.get("sn")
    status = raw.get("status")
    features = raw.get("features")
    return Login(
        platform=platform,
        user_id=user_id,
        name=str(user.get("nick") or user.get("name") or ""),
        status=status if isinstance(status, int) and not isinstance(status, bool) else ONLINE,
        sn=sn if isinstance(sn, int) and not isinstance(sn, bool) else None,
        adapter=str(raw.get("adapter") or ""),
        features=tuple(str(f) for f in features) if isinstance(features, list) else (),
    )


class Logins:
    """The accounts, in the order the server announced them."""

    def __init__(self) -> None:
        self._all: list[Login] = []

    def __len__(self) -> int:
        return len(self._all)

    def replace(self, raw: Any) -> None:
        """READY's ``logins``: the whole list anew."""
        items = raw if isinstance(raw, list) else []
        self._all = [login for login in map(read_login, items) if login is not None]

    def added(self, raw: Any) -> Login | None:
        login = read_login(raw)
        if login is None:
            return None
        old = self._match(login)
        if old is not None:
            self._all[self._all.index(old)] = login
        else:
            self._all.append(login)
        return login

    def updated(self, raw: Any) -> Login | None:
        return self.added(raw)

    def removed(self, raw: Any) -> Login | None:
        login = read_login(raw)
        old = self._match(login) if login is not None else None
        if old is not None:
            self._all.remove(old)
        return old

    def find(self, platform: str, user_id: str) -> Login | None:
        for login in self._all:
            if login.platform == platform and login.user_id == user_id:
                return login
        return None

    def first(self, platform: str) -> Login | None:
        """The account to post to ``platform`` with on the bot's own initiative: the first
        online one (the first of any state when none is online)."""
        on_platform = [login for login in self._all if login.platform == platform and login.user_id]
        online = [login for login in on_platform if login.status == ONLINE]
        return (online or on_platform or [None])[0]

    def as_list(self) -> list[dict[str, Any]]:
        return [login.as_dict() for login in self._all]

    def _match(self, login: Login) -> Login | None:
        if login.platform and login.user_id:
            found = self.find(login.platform, login.user_id)
            if found is not None:
                return found
        if login.sn is not None:
            for old in self._all:
                if old.sn == login.sn:
                    return old
        return None
