"""Log batches: many (seq, data) entries packed into one blob, so a flush writes one row per kind
instead of one per chunk (the store's cost per streamed chunk dominated the relay's CPU otherwise)."""

from __future__ import annotations

import struct
from collections import defaultdict

_HEAD = struct.Struct(">qI")  # seq, length


def pack(entries: list[tuple[int, bytes]]) -> bytes:
    return b"".join(_HEAD.pack(seq, len(data)) + data for seq, data in entries)


def unpack(blob: bytes) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    pos, end = 0, len(blob)
    while pos < end:
        seq, size = _HEAD.unpack_from(blob, pos)
        pos += _HEAD.size
        out.append((seq, blob[pos : pos + size]))
        pos += size
    return out


def by_kind(entries: list[tuple[str, int, bytes]]) -> dict[str, list[tuple[int, bytes]]]:
    grouped: dict[str, list[tuple[int, bytes]]] = defaultdict(list)
    for kind, seq, data in entries:
        grouped[kind].append((seq, data))
    return grouped
