"""Who the bot is at the homeserver, kept across restarts: the login and the sync token.

**Login.** With ``access_token`` the homeserver is asked ``whoami`` (the token's
user and device); a refused token is the adapter's ``failed`` state. With
``password`` (and ``user_id``) tmy logs in with ``m.login.password`` once and
keeps what the homeserver gives back, the **device id and access token**, in
tmy's store under ``matrix/<user_id>/session``: the next start checks that token
with ``whoami`` and goes on with the same device, instead of adding a new device
to the account at every start (a homeserver never forgets a device by itself).
When the kept token has been revoked (the device was logged out), tmy logs in
again with the password, asking for the same ``device_id``, so the device is
reused still.

**The sync token.** :class:`StoredSyncToken` is mautrix's own
:class:`~mautrix.client.state_store.SyncStore` interface backed by tmy's store
(``matrix/<user_id>/next_batch``): each ``/sync`` answer's ``next_batch`` is put
there once its events are handed on, and a restart continues from it, so what
was answered before is not answered again. Without a token (the very first
start) the adapter takes the first sync's ``next_batch`` and answers none of the
history it carries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mautrix.client import ClientAPI
from mautrix.client.state_store import SyncStore
from mautrix.errors import MatrixInvalidToken
from mautrix.types import SyncToken

from tmy import redact
from tmy.adapters.matrix.http import describe
from tmy.config.matrix import MatrixConfig
from tmy.errors import StoreError
from tmy.logs import get_logger
from tmy.store.base import MISSING, Store

log = get_logger("tmy.adapter.matrix")

DEVICE_NAME = "tmy"  # the device's display name in the account's session list


class StoredSyncToken(SyncStore):
    """``next_batch`` in tmy's store (in memory only when the adapter has no store)."""

    def __init__(self, store: Store | None, user_id: str) -> None:
        self.store = store
        self.key = f"matrix/{user_id}/next_batch"
        self._token: str | None = None

    async def put_next_batch(self, next_batch: SyncToken) -> None:
        self._token = str(next_batch)
        if self.store is None:
            return
        try:
            await self.store.set(self.key, self._token)
        except StoreError as exc:  # kept in memory: a restart may replay, a sync must go on
            log.warning("matrix.sync_token_unsaved", error=str(exc))

    async def get_next_batch(self) -> SyncToken:
        if self._token is None and self.store is not None:
            value = await self.store.get(self.key)
            if isinstance(value, str) and value:
                self._token = value
        return SyncToken(self._token or "")


@dataclass(frozen=True, slots=True)
class Credentials:
    """What ``adapters.matrix`` gave (already read from the key or its ``_env``)."""

    user_id: str
    access_token: str = field(repr=False)
    password: str = field(repr=False)


async def log_in(client: ClientAPI, given: Credentials, store: Store | None) -> None:
    """Make ``client`` the bot's account (its ``mxid``, ``device_id`` and token set).

    Raises mautrix's ``MatrixInvalidToken`` for a refused token and ``MForbidden``
    for a wrong password (the caller shows ``failed``); network errors go up too.
    """
    if given.access_token:
        client.api.token = given.access_token
        await _who_am_i(client)
        return
    key = f"matrix/{given.user_id}/session"
    kept = await _kept_session(store, key)
    if kept.get("access_token"):
        client.api.token = kept["access_token"]
        redact.add(client.api.token)
        try:
            await _who_am_i(client)
            if client.mxid == given.user_id:
                log.info("matrix.session_reused", device_id=client.device_id)
                return
        except MatrixInvalidToken:
            log.info("matrix.session_expired", device_id=kept.get("device_id"))
        client.api.token = ""
    response = await client.login(
        identifier=given.user_id,
        password=given.password,
        device_id=kept.get("device_id") or None,
        device_name=DEVICE_NAME,
    )
    redact.add(response.access_token)
    log.info("matrix.logged_in", user_id=response.user_id, device_id=response.device_id)
    if store is not None:
        session = {"device_id": response.device_id, "access_token": response.access_token}
        try:
            await store.set(key, session)
        except StoreError as exc:
            log.warning("matrix.session_unsaved", error=str(exc))


async def _who_am_i(client: ClientAPI) -> None:
    me = await client.whoami()
    client.mxid = me.user_id
    client.device_id = me.device_id or client.device_id


async def _kept_session(store: Store | None, key: str) -> dict[str, Any]:
    if store is None:
        return {}
    try:
        value = await store.get(key)
    except StoreError as exc:
        log.warning("matrix.session_unreadable", error=str(exc))
        return {}
    return value if value is not MISSING and isinstance(value, dict) else {}


def refusal(given: Credentials, config: MatrixConfig, exc: BaseException, again: bool) -> str:
    """What ``failed`` says when the homeserver refused the credentials: what to fix.
    ``again``: the password worked, and the new session was refused at once."""
    if again:
        return (
            f"the homeserver refused the session of {given.user_id} again right after a "
            f"new password login ({describe(exc)}): is the account locked or deactivated, "
            "or are its devices being logged out?"
        )
    if given.access_token:
        return (
            f"the homeserver refused the access token in {config.access_token_env} "
            f"({describe(exc)}); make a new one (Element: Settings > Help & About)"
        )
    return (
        f"the homeserver refused the password login of {given.user_id} "
        f"({describe(exc)}); check {config.password_env}"
    )


def missing_credential(given: Credentials, config: MatrixConfig) -> str:
    """What ``failed`` says when the credentials cannot work as given ("" when they can)."""
    if not given.access_token and not given.password:
        return (
            f"no access token: set the environment variable {config.access_token_env} "
            f"(or {config.password_env} with user_id for a password login)"
        )
    if not given.access_token and not given.user_id:
        return (
            f"a password login needs the user id: set adapters.matrix.user_id or "
            f"{config.user_id_env} (@bot:example.org)"
        )
    if given.user_id and not (given.user_id.startswith("@") and ":" in given.user_id):
        return f"user_id must look like @bot:example.org (got {given.user_id!r})"
    return ""
