"""Log runs packed into one blob, so a flush writes one row per kind instead of one per chunk (the
store's cost per streamed chunk dominated the relay's CPU otherwise)."""

from __future__ import annotations

import struct

_HEAD = struct.Struct(">qI")  # seq, length


def pack(first_seq: int, items: list[bytes]) -> bytes:
    """Entries `first_seq`, `first_seq + 1`, ...: each a (seq, length) head and its bytes."""
    head = _HEAD.pack
    parts: list[bytes] = []
    add = parts.append
    for seq, data in enumerate(items, first_seq):
        add(head(seq, len(data)))
        add(data)
    return b"".join(parts)


def unpack(blob: bytes) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    pos, end = 0, len(blob)
    while pos < end:
        seq, size = _HEAD.unpack_from(blob, pos)
        pos += _HEAD.size
        out.append((seq, blob[pos : pos + size]))
        pos += size
    return out
