"""The key check's digest (hashlib's SHA-256) and the Authenticator over it."""

from __future__ import annotations

import hashlib

import pytest

from tidegate.keys import MASTER_ID, Authenticator, hash_secret, make_key
from tidegate.store.sqlite import SQLiteStore


@pytest.mark.parametrize(
    "secret",
    ["", "tg-bench-master-key-0123456789", "tg-" + "x" * 509, "clé-ünïcode-🔑", "a\tb c"],
)
def test_hash_secret_is_hashlibs_sha256(secret: str) -> None:
    assert hash_secret(secret) == hashlib.sha256(secret.encode("utf-8")).hexdigest()


async def test_authenticator_takes_the_master_key_and_stored_keys_and_nothing_else() -> None:
    store = SQLiteStore("sqlite:///:memory:")
    await store.open()
    try:
        key, secret = make_key("team")
        assert key.secret_hash == hashlib.sha256(secret.encode()).hexdigest()
        await store.create_key(key)
        auth = Authenticator(store, master_key="tg-master-secret")
        master = await auth.authenticate("Bearer tg-master-secret")
        assert master is not None and master.id == MASTER_ID and master.is_master
        found = await auth.authenticate(f"Bearer {secret}")
        assert found is not None and found.id == key.id and not found.is_master
        for header in (None, "", f"Basic {secret}", f"Bearer {secret}x", "Bearer ", "Bearer " + "x" * 513):
            assert await auth.authenticate(header) is None
    finally:
        await store.close()
