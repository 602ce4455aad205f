"""QQ's webhook signatures: ed25519 with a key derived from the bot's AppSecret.

QQ documents the key (bot.q.qq.com/wiki, "签名校验"): the secret, repeated until it
is at least 32 bytes long, cut to 32 bytes, is the ed25519 **seed**; the platform
signs ``X-Signature-Timestamp + body`` with that key and sends the hex signature in
``X-Signature-Ed25519``. The same key answers the callback-URL validation (op 13):
the bot signs ``event_ts + plain_token``. Both sides derive the key from the one
secret, so there is no public key to configure.
"""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

SEED_SIZE = 32
SIGNATURE_SIZE = 64


def signing_key(secret: str) -> Ed25519PrivateKey:
    """The ed25519 key QQ derives from ``secret`` (repeated to 32 bytes)."""
    seed = secret.encode()
    if not seed:
        raise ValueError("the QQ bot secret is empty")
    while len(seed) < SEED_SIZE:
        seed = seed * 2
    return Ed25519PrivateKey.from_private_bytes(seed[:SEED_SIZE])


def sign(key: Ed25519PrivateKey, timestamp: str, body: bytes) -> str:
    """The hex signature of ``timestamp + body`` (what QQ puts in X-Signature-Ed25519)."""
    return key.sign(timestamp.encode() + body).hex()


def verify(key: Ed25519PrivateKey, timestamp: str, body: bytes, signature: str) -> bool:
    """True when ``signature`` (hex) signs ``timestamp + body`` with ``key``'s public half."""
    try:
        raw = bytes.fromhex(signature)
    except ValueError:
        return False
    # QQ's reference check: 64 bytes, and the top three bits of the last byte clear
    if len(raw) != SIGNATURE_SIZE or raw[63] & 224:
        return False
    try:  # a header aiohttp decoded from bytes that are not UTF-8 cannot be what QQ signed
        message = timestamp.encode() + body
    except UnicodeEncodeError:
        return False
    try:
        key.public_key().verify(raw, message)
    except InvalidSignature:
        return False
    return True


def validation_answer(key: Ed25519PrivateKey, event_ts: str, plain_token: str) -> dict[str, str]:
    """The answer to QQ's callback-URL validation (op 13): the token and its signature."""
    return {"plain_token": plain_token, "signature": sign(key, event_ts, plain_token.encode())}
