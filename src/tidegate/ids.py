"""ULID generation: 26 Crockford base32 chars, 48-bit ms timestamp + 80 random bits, monotonic."""

from __future__ import annotations

import os
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]  # every 10-bit value as two characters
_SHIFTS = tuple(range(120, -1, -10))  # 26 characters = 13 pairs = 130 bits, the top two always 0
_lock = threading.Lock()
_last_ms = -1
_last_rand = 0


def new_ulid() -> str:
    """A new ULID; ids made in the same millisecond by this process sort in creation order."""
    global _last_ms, _last_rand
    with _lock:
        now_ms = time.time_ns() // 1_000_000
        if now_ms == _last_ms:
            _last_rand = (_last_rand + 1) & ((1 << 80) - 1)
        else:
            _last_ms = now_ms
            _last_rand = int.from_bytes(os.urandom(10), "big")
        value = (now_ms << 80) | _last_rand
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in _SHIFTS])


def is_ulid(value: str) -> bool:
    return len(value) == 26 and all(c in _ALPHABET for c in value.upper())
