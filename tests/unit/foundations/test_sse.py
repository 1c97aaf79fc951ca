"""The WHATWG SSE cases, each fed whole, byte by byte, and split at every offset."""

from __future__ import annotations

import pytest

from tidegate.sse import SSEDecoder, SSEEvent, SSEProtocolError, encode_comment, encode_event


def decode_split(data: bytes, cut: int | None = None, cut2: int | None = None) -> list[SSEEvent]:
    d = SSEDecoder()
    if cut is None:
        return d.feed(data)
    parts = [data[:cut], data[cut:cut2], data[cut2:]] if cut2 is not None else [data[:cut], data[cut:]]
    out: list[SSEEvent] = []
    for p in parts:
        out.extend(d.feed(p))
    return out


def all_splits(data: bytes) -> list[list[SSEEvent]]:
    results = [decode_split(data)]
    for i in range(len(data) + 1):
        results.append(decode_split(data, i))
    d = SSEDecoder()
    byte_by_byte: list[SSEEvent] = []
    for i in range(len(data)):
        byte_by_byte.extend(d.feed(data[i : i + 1]))
    results.append(byte_by_byte)
    return results


CASES: list[tuple[str, bytes, list[SSEEvent]]] = [
    ("lf", b"data: a\n\ndata: b\n\n", [SSEEvent("a"), SSEEvent("b")]),
    ("crlf", b"data: a\r\n\r\ndata: b\r\n\r\n", [SSEEvent("a"), SSEEvent("b")]),
    ("cr", b"data: a\r\rdata: b\r\r", [SSEEvent("a"), SSEEvent("b")]),
    ("mixed endings", b"data: a\r\n\rdata: b\n\r\n", [SSEEvent("a"), SSEEvent("b")]),
    ("bom at start stripped", b"\xef\xbb\xbfdata: a\n\n", [SSEEvent("a")]),
    ("multi-line data joined", b"data: a\ndata: b\ndata:\n\n", [SSEEvent("a\nb\n")]),
    ("no space after colon", b"data:x\n\n", [SSEEvent("x")]),
    ("only one leading space removed", b"data:  x\n\n", [SSEEvent(" x")]),
    ("comments skipped", b": keep-alive\n\n:x\ndata: a\n\n", [SSEEvent("a")]),
    ("event name", b"event: delta\ndata: {}\n\n", [SSEEvent("{}", event="delta")]),
    ("event without data dispatches nothing", b"event: x\n\ndata: y\n\n", [SSEEvent("y")]),
    ("id persists", b"id: 7\ndata: a\n\ndata: b\n\n", [SSEEvent("a", id="7"), SSEEvent("b", id="7")]),
    (
        "id with NUL ignored",
        b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n",
        [SSEEvent("a", id="1"), SSEEvent("b", id="1")],
    ),
    ("empty id resets", b"id: 1\ndata: a\n\nid\ndata: b\n\n", [SSEEvent("a", id="1"), SSEEvent("b", id=None)]),
    ("retry digits", b"retry: 1500\ndata: a\n\n", [SSEEvent("a", retry=1500)]),
    ("retry non-digit ignored", b"retry: +5\ndata: a\n\nretry: 1x\ndata: b\n\n", [SSEEvent("a"), SSEEvent("b")]),
    ("unterminated last event dropped", b"data: a\n\ndata: b\n", [SSEEvent("a")]),
    ("field without colon", b"data\n\n", [SSEEvent("")]),
    ("unknown field ignored", b"foo: bar\ndata: a\n\n", [SSEEvent("a")]),
    ("a field that starts like data is not data", b"datum: x\ndata:y\n\n", [SSEEvent("y")]),
    ("colons in the value kept", b"data: a: b\n\n", [SSEEvent("a: b")]),
    ("blank lines between events", b"\n\ndata: a\n\n\n\ndata: b\n\n", [SSEEvent("a"), SSEEvent("b")]),
    ("invalid utf-8 replaced", b"data: \xff\n\n", [SSEEvent("\ufffd")]),
    (
        "whole events after an event name and a retry",
        b"retry: 9\nevent: e\ndata: a\n\ndata: b\n\ndata: c\n\n",
        [SSEEvent("a", event="e", retry=9), SSEEvent("b", retry=9), SSEEvent("c", retry=9)],
    ),
    ("utf-8 multibyte", "data: héllo €\n\n".encode(), [SSEEvent("héllo €")]),
]


@pytest.mark.parametrize(("name", "data", "expected"), CASES, ids=[c[0] for c in CASES])
def test_whatwg_cases_at_every_split(name: str, data: bytes, expected: list[SSEEvent]) -> None:
    for result in all_splits(data):
        assert result == expected


def test_every_pair_of_splits_for_crlf_stream() -> None:
    data = b"id: 1\r\nevent: e\r\ndata: x\r\n\r\n: c\r\ndata: y\r\n\r\n"
    expected = [SSEEvent("x", event="e", id="1"), SSEEvent("y", id="1")]
    for i in range(len(data) + 1):
        for j in range(i, len(data) + 1):
            assert decode_split(data, i, j) == expected


def test_bom_only_at_start() -> None:
    data = b"data: a\n\n\xef\xbb\xbfdata: b\n\n"
    for result in all_splits(data):
        # a BOM later in the stream is not stripped: it becomes part of the field name
        assert result == [SSEEvent("a")]


def test_crlf_split_across_reads_is_one_line_ending() -> None:
    d = SSEDecoder()
    assert d.feed(b"data: a\r") == []
    assert d.feed(b"\n") == []
    assert d.feed(b"\r\n") == [SSEEvent("a")]


def test_comments_are_counted() -> None:
    d = SSEDecoder()
    d.feed(b": TIDEGATE PROCESSING\n\n: again\n\ndata: x\n\n")
    assert d.comments_seen == 2


def test_line_cap() -> None:
    d = SSEDecoder(max_line_bytes=16)
    with pytest.raises(SSEProtocolError):
        d.feed(b"data: " + b"x" * 64 + b"\n\n")
    d2 = SSEDecoder(max_line_bytes=16)
    with pytest.raises(SSEProtocolError):  # no newline yet: still capped
        d2.feed(b"data: " + b"x" * 64)
    d3 = SSEDecoder(max_line_bytes=16)
    with pytest.raises(SSEProtocolError):  # CR line endings take the other path: capped the same
        d3.feed(b"data: " + b"x" * 64 + b"\r\n\r\n")


def test_event_cap() -> None:
    d = SSEDecoder(max_line_bytes=64, max_event_bytes=32)
    with pytest.raises(SSEProtocolError):
        d.feed(b"data: 0123456789\ndata: 0123456789\ndata: 0123456789\n\n")
    d2 = SSEDecoder(max_line_bytes=64, max_event_bytes=8)
    with pytest.raises(SSEProtocolError):  # one whole data-line event per read (the fast path) is capped too
        d2.feed(b"data: a\n\ndata: 0123456789\n\n")


@pytest.mark.parametrize("eol", [b"\n", b"\r\n"])
@pytest.mark.parametrize(
    "bad",
    [
        b"data: " + b"x" * 64 + b"\n\n",  # a whole line over the cap
        b"data: " + b"x" * 64,  # an unfinished one
        b"data: 0123456789\ndata: 0123456789\ndata: 0123456789\n\n",  # an event over the cap
    ],
)
def test_a_cap_error_carries_the_events_decoded_before_it(eol: bytes, bad: bytes) -> None:
    d = SSEDecoder(max_line_bytes=48, max_event_bytes=32)
    good = b"id: 7\ndata: first\n\ndata: second\n\n"
    with pytest.raises(SSEProtocolError) as caught:
        d.feed((good + bad).replace(b"\n", eol))
    assert caught.value.events == [SSEEvent("first", id="7"), SSEEvent("second", id="7")]
    with pytest.raises(SSEProtocolError) as alone:
        SSEDecoder(max_line_bytes=48, max_event_bytes=32).feed(bad.replace(b"\n", eol))
    assert alone.value.events == []


def test_pending_bytes_reports_truncation() -> None:
    d = SSEDecoder()
    d.feed(b"data: a\n\ndata: partial")
    assert d.pending_bytes > 0


def test_encoder_roundtrip() -> None:
    frame = encode_event('{"a":1}', event="delta", id=3)
    assert frame == b'id: 3\nevent: delta\ndata: {"a":1}\n\n'
    assert SSEDecoder().feed(frame) == [SSEEvent('{"a":1}', event="delta", id="3")]
    multi = encode_event("a\nb")
    assert SSEDecoder().feed(multi) == [SSEEvent("a\nb")]
    assert encode_comment("x\ny") == b": x y\n"


def assert_decodes_as_fresh(d: SSEDecoder, read: bytes) -> None:
    """`d`, after a shortcut refused `read`, decodes it as a fresh decoder does (events or the error)."""
    fresh = SSEDecoder(max_line_bytes=48)
    try:
        expected: list[SSEEvent] | type[SSEProtocolError] = fresh.feed(read)
    except SSEProtocolError:
        expected = SSEProtocolError
    if expected is SSEProtocolError:
        with pytest.raises(SSEProtocolError):
            d.feed(read)
    else:
        assert d.feed(read) == expected


@pytest.mark.parametrize(
    "before",
    [
        b"data: a\ndata: b",  # an unfinished line waits
        b"data: a\n",  # a data line waits for its blank line
        b"data: a\n\nda",  # the start of a line waits
        b"event: x\n",  # an event type waits
        b"data: a\r",  # a CR whose LF may come next
    ],
)
def test_the_fast_path_refuses_a_read_while_anything_is_pending(before: bytes) -> None:
    d, fresh = SSEDecoder(), SSEDecoder()
    d.feed(before)
    fresh.feed(before)
    read = b"data: z\n\n"
    assert d.whole_data_payloads(read) is None
    assert d.feed(read) == fresh.feed(read)


def test_whole_data_payloads_takes_a_read_of_whole_one_line_data_events() -> None:
    d = SSEDecoder()
    assert d.whole_data_payloads(b'data: {"a":1}\n\ndata:[DONE]\n\n') == [b'{"a":1}', b"[DONE]"]
    assert d.whole_data_payloads(b"data: x\n\n") == [b"x"]
    assert d.feed(b"data: next\n\n") == [SSEEvent("next")]  # it left nothing behind


@pytest.mark.parametrize(
    "read",
    [
        b"data: a\n\ndata: b\r\n\r\n",  # CR endings
        b"data: a\n\ndata: a\rb\n\n",  # a CR inside
        b"data: a\n\ndata: b\n",  # the last event unfinished
        b"data: a\n\ndata: b",  # the last line unfinished
        b"data: a\n\n\n\ndata: b\n\n",  # a blank line between events
        b"data: a\n\nid: 1\ndata: b\n\n",  # another field
        b"data: a\n\nevent: x\ndata: b\n\n",
        b"data: a\ndata: b\n\n",  # one event of two data lines
        b"data: a\n\n: ping\n\n",  # a comment
        b"\xef\xbb\xbfdata: a\n\ndata: b\n\n",  # a BOM
        b"data: a\n\ndata: " + b"x" * 64 + b"\n\n",  # over the line cap
        b"\n\n",
        b"data:a\n\nevent: x\ndata: a\n\n",
        b"\xef\xbb\xbfdata: a\n\n",  # a BOM
        b"data: a\r\n\r\n",  # CR endings
    ],
)
def test_whole_data_payloads_refuses_any_other_read_and_changes_nothing(read: bytes) -> None:
    d = SSEDecoder(max_line_bytes=48)
    assert d.whole_data_payloads(read) is None
    assert_decodes_as_fresh(d, read)


def test_whole_data_payloads_refuses_an_event_over_the_event_cap() -> None:
    d = SSEDecoder(max_event_bytes=8)
    assert d.whole_data_payloads(b"data: a\n\ndata: 12345678\n\n") is None
    with pytest.raises(SSEProtocolError):
        d.feed(b"data: a\n\ndata: 12345678\n\n")
