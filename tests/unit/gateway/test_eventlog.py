from __future__ import annotations

import pytest

from tidegate.events import (
    Event,
    Failed,
    Finished,
    Image,
    PartialImage,
    Progress,
    RawFrame,
    ReasoningDelta,
    Started,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from tidegate.gateway.eventlog import decode_event, encode_event
from tidegate.store import logpack

EVENTS: list[Event] = [
    Started("p", "served", "up-1"),
    RawFrame(b'{"id":"x"}\xff'),
    TextDelta("héllo"),
    ReasoningDelta("think", "text", "sig==", None, 2),
    ReasoningDelta("", "encrypted", None, "opaque", 0),
    ToolCallDelta(1, '{"q":', "call_1", "lookup"),
    Finished("tool_calls"),
    UsageReport(10, 5, 2, 3, True),
    Failed("upstream_timeout", "no data", "p", False, 0),
    Progress(40, "generating"),
    PartialImage(0, "aGk="),
    Image("aGk=", "a cat", {"size": "1024x1024"}),
]


@pytest.mark.parametrize("event", EVENTS, ids=[type(e).__name__ for e in EVENTS])
def test_every_event_round_trips(event: Event) -> None:
    assert decode_event(encode_event(event)) == event


def test_logpack_round_trip() -> None:
    items = [b"", b"abc", b"\x00" * 1000]
    assert logpack.unpack(logpack.pack(5, items)) == [(5, b""), (6, b"abc"), (7, b"\x00" * 1000)]
    assert logpack.unpack(logpack.pack(0, [])) == []


def test_logpack_writes_one_run_head_and_every_length_before_the_bytes() -> None:
    blob = logpack.pack(5, [b"ab", b"c"])
    head = b"\x02" + (5).to_bytes(8, "big") + (2).to_bytes(4, "big")
    assert blob == head + (2).to_bytes(4, "big") + (1).to_bytes(4, "big") + b"abc"


def test_logpack_reads_blobs_written_with_a_head_per_entry() -> None:
    """The layout before runs (older databases): a big-endian (seq, length) head per entry."""
    frames = [b'data: {"choices":[{"delta":{"content":"w%d"}}]}\n\n' % i for i in range(300)]
    older = b"".join(seq.to_bytes(8, "big") + len(f).to_bytes(4, "big") + f for seq, f in enumerate(frames, 7))
    assert older[:1] == b"\x00"
    assert logpack.unpack(older) == list(enumerate(frames, 7))
    deflated = logpack.deflate(older)
    assert deflated[:1] == b"\x01" and logpack.unpack(deflated) == list(enumerate(frames, 7))


def test_logpack_deflates_what_saves_pages_and_reads_both_forms() -> None:
    frames = [b'id: %d\ndata: {"choices":[{"index":0,"delta":{"content":"w%d"}}]}\n\n' % (i, i) for i in range(500)]
    packed = logpack.pack(0, frames)
    deflated = logpack.deflate(packed)
    assert deflated[:1] == b"\x01" and len(deflated) < len(packed) // 10
    assert logpack.unpack(deflated) == logpack.unpack(packed) == list(enumerate(frames))
    small = logpack.pack(3, [b"abc"])
    assert logpack.deflate(small) == small  # too small to save a page: stored as it is
    assert small[:1] == b"\x02"  # a run's marker: never the 0 of an older blob's seq, nor the deflated mark
