"""API keys: creation (the secret is shown once, stored as a SHA-256 hash) and verification."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time

from .ids import new_ulid
from .records import ApiKey
from .store.base import KeyStore

KEY_PREFIX = "tg-"
MASTER_ID = "master"


def hash_secret(secret: str) -> str:
    digest: str = hashlib.sha256(secret.encode("utf-8")).hexdigest()
    return digest


def new_secret() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def make_key(name: str, credits: float | None = None) -> tuple[ApiKey, str]:
    secret = new_secret()
    key = ApiKey(
        id="key_" + new_ulid(),
        name=name,
        secret_hash=hash_secret(secret),
        created_at=time.time(),
        credits=credits,
    )
    return key, secret


class Authenticator:
    """Resolves `Authorization: Bearer <key>` to an ApiKey (revoked and expired ones included: see
    `unusable`), comparing in constant time."""

    def __init__(self, store: KeyStore, master_key: str | None = None) -> None:
        self.store = store
        master = master_key if master_key is not None else os.environ.get("TIDEGATE_MASTER_KEY")
        self._master_hash = hash_secret(master) if master else None

    async def authenticate(self, authorization: str | None) -> ApiKey | None:
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or len(token) > 512:
            return None
        digest = hash_secret(token)
        if self._master_hash is not None and hmac.compare_digest(digest, self._master_hash):
            return ApiKey(id=MASTER_ID, name="master", secret_hash=digest, created_at=0.0, is_master=True)
        key = await self.store.find_key_by_hash(digest)
        if key is None or not hmac.compare_digest(key.secret_hash, digest):
            return None
        return key  # revoked or expired: the caller says which (401 either way)


def unusable(key: ApiKey, now: float) -> str | None:
    """Why `key` cannot be used now (docs/api-operations.md §11: 401), or None."""
    if key.revoked:
        return "this API key was revoked"
    if key.expires_at is not None and key.expires_at <= now:
        return "this API key has expired"
    return None
