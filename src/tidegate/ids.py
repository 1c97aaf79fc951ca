"""ULID generation: 26 Crockford base32 chars, 48-bit ms timestamp + 80 random bits, monotonic."""

from __future__ import annotations

import os
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
# every 10-bit value as two characters: 26 characters = 13 pairs = 130 bits, the top two always 0
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]
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
    p = _PAIRS  # unrolled: every generation id is made here, and a comprehension's frame cost more than the work
    return "".join(
        (
            p[value >> 120],
            p[(value >> 110) & 1023],
            p[(value >> 100) & 1023],
            p[(value >> 90) & 1023],
            p[(value >> 80) & 1023],
            p[(value >> 70) & 1023],
            p[(value >> 60) & 1023],
            p[(value >> 50) & 1023],
            p[(value >> 40) & 1023],
            p[(value >> 30) & 1023],
            p[(value >> 20) & 1023],
            p[(value >> 10) & 1023],
            p[value & 1023],
        )
    )


def is_ulid(value: str) -> bool:
    return len(value) == 26 and all(c in _ALPHABET for c in value.upper())
