"""Log runs packed into one blob, so a flush writes one row per kind instead of one per chunk (the
store's cost per streamed chunk dominated the relay's CPU otherwise), and deflated when that saves
pages: a log is mostly the same JSON envelope around a few bytes of text, and every page a write
saves is written twice (the WAL, then the checkpoint)."""

from __future__ import annotations

import asyncio
import struct
import zlib

# A blob is one run of entries `first_seq`, `first_seq + 1`, ...: a marker byte, the first seq and
# the count, every entry's length, then the entries' bytes back to back (no per-entry header to build
# for every frame of a stream's log).
_RUN = b"\x02"
_RUN_HEAD = struct.Struct(">qI")  # first seq, count
# Older blobs hold a (seq, length) head before each entry. Their seq is big-endian, so their first
# byte is 0 for any seq below 2**56; `unpack` still reads them.
_ENTRY_HEAD = struct.Struct(">qI")
_DEFLATED = b"\x01"  # a deflated blob of either kind
_DEFLATE_FROM = 8 * 1024  # smaller blobs would save no page
_DEFLATE_ON_THREAD_FROM = 64 * 1024


def pack(first_seq: int, items: list[bytes]) -> bytes:
    """Entries `first_seq`, `first_seq + 1`, ... as one blob."""
    count = len(items)
    parts = [_RUN, _RUN_HEAD.pack(first_seq, count), struct.pack(f">{count}I", *map(len, items))]
    parts += items
    return b"".join(parts)


def packed(blob: bytes) -> bool:
    """Whether `blob` is a run packed by `pack`, deflated or not: a Redis log member is either that
    or, written by versions before, one entry behind its 8-byte big-endian seq (first byte 0)."""
    return blob[:1] in (_RUN, _DEFLATED)


def deflate(blob: bytes) -> bytes:
    """A packed blob deflated (zlib level 1: ~400 MB/s, OpenAI-style chunk frames shrink ~30x),
    unless it is too small to save a page. `unpack` reads either."""
    if len(blob) < _DEFLATE_FROM:
        return blob
    return _DEFLATED + zlib.compress(blob, 1)


async def deflated(blob: bytes) -> bytes:
    """`deflate(blob)` for a store that keeps logs in RAM and writes them from the event loop (Redis,
    in-memory SQLite): a large blob is deflated on a thread (zlib lets go of the GIL), so a long
    stream's flush does not hold the loop (~0.5 ms per 200 KB)."""
    if len(blob) >= _DEFLATE_ON_THREAD_FROM:
        return await asyncio.to_thread(deflate, blob)
    return deflate(blob)


def unpack(blob: bytes) -> list[tuple[int, bytes]]:
    """Every (seq, bytes) entry of a blob, whichever way it was written."""
    if blob[:1] == _DEFLATED:
        blob = zlib.decompress(blob[1:])
    if blob[:1] == _RUN:
        return _unpack_run(blob)
    out: list[tuple[int, bytes]] = []
    pos, end = 0, len(blob)
    while pos < end:
        seq, size = _ENTRY_HEAD.unpack_from(blob, pos)
        pos += _ENTRY_HEAD.size
        out.append((seq, blob[pos : pos + size]))
        pos += size
    return out


def _unpack_run(blob: bytes) -> list[tuple[int, bytes]]:
    first_seq, count = _RUN_HEAD.unpack_from(blob, 1)
    pos = 1 + _RUN_HEAD.size
    sizes: tuple[int, ...] = struct.unpack_from(f">{count}I", blob, pos)
    pos += 4 * count
    out: list[tuple[int, bytes]] = []
    for seq, size in enumerate(sizes, first_seq):
        out.append((seq, blob[pos : pos + size]))
        pos += size
    return out
