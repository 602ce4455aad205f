"""Who is logged in to the web console: passwords, sessions, CSRF tokens, the lock-out.

* **Passwords** are only ever held as scrypt hashes (:class:`~tmy.config.console.PasswordHash`,
  made when the config is read); a login attempt checks every configured password,
  so how long it takes does not say which role a password came close to.
* **Sessions** live in the daemon's memory (a restart logs everyone out). The cookie
  carries the session's random id and an HMAC of it under a key drawn when the
  console starts: a forged or altered cookie is refused before any lookup, and logging
  out ends the session on the server, not only in the browser. Each session has its
  own CSRF token, which every POST carries (form field ``csrf`` or header
  ``X-CSRF-Token``). Sessions end after :data:`SESSION_SECONDS`; at most
  :data:`MAX_SESSIONS` are kept (the oldest gives way).
* **The lock-out**: after :data:`FREE_FAILURES` wrong passwords in a row from one
  address, that address must wait before it may try again — 2 s, doubling with each
  further failure up to :data:`MAX_DELAY` — and a right password during the wait is
  refused too. The waiting is the client's: nothing here sleeps, so a guessing client
  holds no connection or request slot of the listener.
* **The throttle**: past :data:`THROTTLE_FAILURES` wrong passwords within
  :data:`THROTTLE_WINDOW` from *all* addresses together (a guesser rotating its
  source address never meets the per-address lock-out), every attempt is refused for
  :data:`THROTTLE_SECONDS` without checking it — a right password too, so the throttle
  cannot be used to probe. It keeps the hashing (a core's ~40 ms a try) from being
  spent on a flood.

Nothing here knows HTTP; :mod:`tmy.console.guard` puts it on the listener.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

from tmy.config.console import WebConsoleConfig

ADMIN, VIEWER = "admin", "viewer"
SESSION_SECONDS = 12 * 3600.0
MAX_SESSIONS = 1000
FREE_FAILURES = 5  # wrong passwords in a row from one address before the lock-out starts
FIRST_DELAY = 2.0
MAX_DELAY = 300.0
MAX_TRACKED = 10_000  # addresses whose failures are remembered (the oldest forgotten first)
THROTTLE_FAILURES = 30  # wrong passwords from all addresses within the window before all wait
THROTTLE_WINDOW = 60.0
THROTTLE_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class Session:
    """One logged-in browser: its role, its CSRF token, when it ends."""

    id: str
    role: str
    csrf: str
    expires: float


@dataclass(slots=True)
class _Failures:
    count: int = 0
    until: float = 0.0  # no attempt before this (monotonic) time


class LockOut:
    """Wrong passwords per client address, and how long each must wait now."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._clients: OrderedDict[str, _Failures] = OrderedDict()

    def wait(self, client: str) -> float:
        """Seconds ``client`` must still wait before its next attempt (0: it may try)."""
        failures = self._clients.get(client)
        if failures is None:
            return 0.0
        return max(0.0, failures.until - self.clock())

    def failed(self, client: str) -> float:
        """Count a wrong password from ``client``; the wait it has earned (0: none yet)."""
        failures = self._clients.pop(client, None) or _Failures()
        self._clients[client] = failures  # the most recent last
        while len(self._clients) > MAX_TRACKED:
            self._clients.popitem(last=False)
        failures.count += 1
        over = failures.count - FREE_FAILURES
        if over < 0:
            return 0.0
        delay = min(MAX_DELAY, FIRST_DELAY * 2.0 ** min(over, 20))
        failures.until = self.clock() + delay
        return delay

    def succeeded(self, client: str) -> None:
        self._clients.pop(client, None)


class Throttle:
    """Wrong passwords from every address together; how long every attempt must wait now."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._times: deque[float] = deque(maxlen=THROTTLE_FAILURES + 1)
        self.until = 0.0

    def wait(self) -> float:
        """Seconds every attempt must still wait (0: attempts are checked)."""
        return max(0.0, self.until - self.clock())

    def failed(self) -> float:
        """Count a wrong password (from anywhere); the wait it starts for all (0: none)."""
        now = self.clock()
        self._times.append(now)
        full = len(self._times) == self._times.maxlen
        if full and now - self._times[0] <= THROTTLE_WINDOW:
            self.until = now + THROTTLE_SECONDS
            self._times.clear()  # after the pause, a fresh count
            return THROTTLE_SECONDS
        return 0.0


class Auth:
    """The console's passwords, sessions and lock-out, for one running console."""

    def __init__(
        self, config: WebConsoleConfig, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self.clock = clock
        self.lockout = LockOut(clock)
        self.throttle = Throttle(clock)
        self._key = secrets.token_bytes(32)  # signs session ids; new at every start
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def role_of(self, password: str) -> str | None:
        """The role ``password`` logs in as, or None. Every configured hash is checked."""
        role = None
        for name, hashed in ((VIEWER, self.config.viewer), (ADMIN, self.config.admin)):
            if hashed is not None and hashed.matches(password):
                role = name
        return role

    def start(self, role: str) -> tuple[Session, str]:
        """A new session for ``role`` and the cookie value that names it."""
        session = Session(
            secrets.token_urlsafe(24),
            role,
            secrets.token_urlsafe(24),
            self.clock() + SESSION_SECONDS,
        )
        self._sessions[session.id] = session
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        return session, f"{session.id}.{self._sign(session.id)}"

    def session(self, cookie: str | None) -> Session | None:
        """The live session a cookie value names, or None (absent, forged, ended)."""
        if not cookie or cookie.count(".") != 1:
            return None
        sid, signature = cookie.split(".")
        if not hmac.compare_digest(signature.encode(), self._sign(sid).encode()):
            return None
        session = self._sessions.get(sid)
        if session is None:
            return None
        if session.expires <= self.clock():
            del self._sessions[sid]
            return None
        return session

    def alive(self, session: Session) -> bool:
        """Whether ``session`` is still logged in (not ended, evicted or expired) — a live
        stream asks, so that logging out ends it."""
        return self._sessions.get(session.id) is session and session.expires > self.clock()

    def end(self, session: Session) -> None:
        """Log ``session`` out (its cookie names nothing any more)."""
        self._sessions.pop(session.id, None)

    def _sign(self, sid: str) -> str:
        return hmac.new(self._key, sid.encode(errors="replace"), hashlib.sha256).hexdigest()


def csrf_ok(session: Session, given: str | None) -> bool:
    """Whether ``given`` is ``session``'s CSRF token (compared in constant time)."""
    return bool(given) and hmac.compare_digest(
        str(given).encode(errors="replace"), session.csrf.encode()
    )
