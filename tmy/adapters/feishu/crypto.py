"""Webhook security: the encrypted body and the request signature of Feishu's event callbacks.

With an *Encrypt Key* set in the developer console, Feishu posts
``{"encrypt": "<base64>"}``: AES-256-CBC with key ``sha256(encrypt_key)``, the
first 16 bytes of the decoded data the IV, PKCS#7 padding, the plaintext the
event JSON. It also signs each request: ``X-Lark-Signature`` is the hex
``sha256(timestamp + nonce + encrypt_key + raw body)`` with the
``X-Lark-Request-Timestamp`` and ``X-Lark-Request-Nonce`` headers. Both are
written here on ``cryptography`` (already a dependency) — the SDK's own
decryptor needs pycryptodome and a whole-package import for ten lines.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from tmy.errors import AdapterError


def decrypt(encrypted: str, encrypt_key: str) -> bytes:
    """The plaintext of an ``encrypt`` field; AdapterError when it does not decrypt."""
    try:
        data = base64.b64decode(encrypted, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise AdapterError("feishu: the encrypted event is not base64") from exc
    if len(data) < 32 or len(data) % 16:
        raise AdapterError("feishu: the encrypted event has a wrong length")
    key = hashlib.sha256(encrypt_key.encode()).digest()
    decryptor = Cipher(algorithms.AES(key), modes.CBC(data[:16])).decryptor()
    padded = decryptor.update(data[16:]) + decryptor.finalize()
    pad = padded[-1]
    if not 1 <= pad <= 16 or padded[-pad:] != bytes([pad]) * pad:
        raise AdapterError("feishu: the encrypted event does not decrypt with encrypt_key")
    return padded[:-pad]


def signature(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    """``X-Lark-Signature`` for a request: hex sha256 of timestamp, nonce, key and body."""
    digest = hashlib.sha256()
    # "surrogatepass": a header byte that is not UTF-8 reaches here as a lone surrogate
    # (aiohttp's surrogateescape); it must make a wrong signature, not an exception
    digest.update((timestamp + nonce + encrypt_key).encode("utf-8", "surrogatepass"))
    digest.update(body)
    return digest.hexdigest()


def signed(given: str, timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> bool:
    """Whether ``given`` is the request's signature (compared in constant time)."""
    want = signature(timestamp, nonce, encrypt_key, body)
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), want.encode())
