"""Property tests of the incremental SSE decoder (`tidegate.sse`), the one every upstream
stream and the client SDK read through: any bytes, split anywhere, give the same events, the same
last event id and comment count; nothing escapes but `SSEProtocolError`, and only past the caps.
"""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidegate.sse import SSEDecoder, SSEEvent, SSEProtocolError

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PIECES = [
    b"data: ",
    b"data:",
    b"event: x",
    b"id: 3",
    b"id: 4\x00",
    b"retry: 10",
    b": comment",
    b"\n",
    b"\r",
    b"\r\n",
    b"\n\n",
    b"field",
    b"[DONE]",
    b'{"a": 1}',
    b"\xef\xbb\xbf",  # a BOM
    b"\xff",
    "é✓".encode(),
]
streams = st.one_of(
    st.lists(st.one_of(st.sampled_from(PIECES), st.binary(max_size=8)), max_size=60).map(b"".join),
    st.binary(max_size=400),
)


def _decode(data: bytes, cuts: list[int], max_line: int) -> tuple[list[SSEEvent], str | None, int] | str:
    decoder = SSEDecoder(max_line_bytes=max_line, max_event_bytes=max_line * 4)
    events: list[SSEEvent] = []
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(data)}), len(data)]
    try:
        for a, b in itertools.pairwise(bounds):
            events.extend(decoder.feed(data[a:b]))
    except SSEProtocolError:
        return "over the cap"
    return events, decoder.last_event_id, decoder.comments_seen


@FUZZ
@given(data=streams, cuts=st.lists(st.integers(0, 500), max_size=10))
def test_any_bytes_split_anywhere_decode_the_same(data: bytes, cuts: list[int]) -> None:
    assert _decode(data, cuts, 1 << 20) == _decode(data, [], 1 << 20)


@FUZZ
@given(data=streams, cuts=st.lists(st.integers(0, 500), max_size=10))
def test_past_a_small_cap_only_the_protocol_error_escapes(data: bytes, cuts: list[int]) -> None:
    whole = _decode(data, [], 16)
    split = _decode(data, cuts, 16)
    if whole == "over the cap" or split == "over the cap":
        longest = max((len(line) for line in data.replace(b"\r", b"\n").split(b"\n")), default=0)
        assert longest > 16 or len(data) > 16  # a cap was really passed
    else:
        assert split == whole


def _via_fast_path(before: bytes, read: bytes, after: bytes) -> list[SSEEvent] | str:
    """`read` through the fast path where it takes it (its payloads dispatched as the OpenAI decoder
    does: `message` events with the decoder's id and retry), through `feed` otherwise."""
    decoder = SSEDecoder(max_line_bytes=64, max_event_bytes=256)
    try:
        events = decoder.feed(before)
        payloads = decoder.whole_data_payloads(read)
        if payloads is None:
            events += decoder.feed(read)
        else:
            events += [SSEEvent(p.decode("utf-8", "replace"), "message", decoder.last_event_id) for p in payloads]
        return events + decoder.feed(after)
    except SSEProtocolError:
        return "over the cap"


def _via_reference(before: bytes, read: bytes, after: bytes) -> list[SSEEvent] | str:
    decoder = SSEDecoder(max_line_bytes=64, max_event_bytes=256)
    try:
        return decoder.feed(before) + decoder.feed(read) + decoder.feed(after)
    except SSEProtocolError:
        return "over the cap"


data_reads = st.lists(
    st.one_of(st.sampled_from([b'{"a": 1}', b"[DONE]", b"x", "é✓".encode(), b"\xff", b""]), st.binary(max_size=6)),
    min_size=1,
    max_size=6,
).map(lambda payloads: b"".join(b"data: " + p.replace(b"\n", b"").replace(b"\r", b"") + b"\n\n" for p in payloads))


@FUZZ
@given(before=streams, read=st.one_of(data_reads, streams), after=streams)
def test_the_fast_path_decodes_as_the_reference_decoder(before: bytes, read: bytes, after: bytes) -> None:
    """Differential: whatever came before, a read the fast path takes gives the events
    `feed` gives, and leaves the decoder as `feed` would for what comes after."""
    fast = _via_fast_path(before, read, after)
    reference = _via_reference(before, read, after)
    if isinstance(fast, str) or isinstance(reference, str):
        return  # past a cap: the reference raises; the fast path refuses what is over its caps
    assert [(e.data, e.event, e.id) for e in fast] == [(e.data, e.event, e.id) for e in reference]


@FUZZ
@given(read=data_reads)
def test_the_fast_path_takes_every_read_of_whole_one_line_data_events(read: bytes) -> None:
    payloads = SSEDecoder(max_line_bytes=64, max_event_bytes=256).whole_data_payloads(read)
    assert payloads is not None and len(payloads) == read.count(b"\n\n")
