"""The key check's digest: CPython's own SHA-256, the same digest as hashlib's (keys stored before
the change still match), and the Authenticator over it."""

from __future__ import annotations

import hashlib
import importlib.util

import pytest

from tidegate import keys
from tidegate.keys import MASTER_ID, Authenticator, hash_secret, make_key
from tidegate.store.sqlite import SQLiteStore


@pytest.mark.parametrize(
    "secret",
    ["", "tg-bench-master-key-0123456789", "tg-" + "x" * 509, "clé-ünïcode-🔑", "a\tb c"],
)
def test_hash_secret_is_hashlibs_sha256(secret: str) -> None:
    assert hash_secret(secret) == hashlib.sha256(secret.encode("utf-8")).hexdigest()


def test_the_key_check_uses_cpythons_own_sha256_where_it_exists() -> None:
    own = importlib.util.find_spec("_sha2") or importlib.util.find_spec("_sha256")
    if own is None:
        pytest.skip("this CPython has no built-in SHA-256")
    assert keys._sha256 is not hashlib.sha256  # OpenSSL's: ~3x the time per call on a cold core


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
