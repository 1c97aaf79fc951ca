"""Request headers are decoded from the ASGI scope once per request, and the copy is dropped when the
response starts (a stream does not keep it)."""

from __future__ import annotations

from typing import Any

from tidegate.server.http import Request


async def _receive() -> dict[str, Any]:
    return {"type": "http.disconnect"}


async def _send(message: Any) -> None:
    return None


def _request(headers: list[tuple[bytes, bytes]]) -> Request:
    return Request.from_scope({"type": "http", "headers": headers}, _receive, _send)


def test_a_header_is_found_by_its_lower_case_name() -> None:
    req = _request([(b"authorization", b"Bearer tg-1"), (b"accept", b"text/event-stream")])
    assert req.header("authorization") == "Bearer tg-1"
    assert req.header("accept") == "text/event-stream"


def test_repeated_headers_are_joined_in_order() -> None:
    req = _request([(b"accept", b"application/json"), (b"x-other", b"1"), (b"accept", b"text/event-stream")])
    assert req.header("accept") == "application/json, text/event-stream"


def test_a_missing_header_gives_the_default() -> None:
    req = _request([(b"authorization", b"Bearer tg-1")])
    assert req.header("idempotency-key") is None
    assert req.header("accept", "") == ""


def test_a_name_sent_in_capitals_by_a_non_conforming_server_still_matches() -> None:
    req = _request([(b"Idempotency-Key", b"k-1")])
    assert req.header("idempotency-key") == "k-1"


def test_values_are_latin_1_as_http_defines_them() -> None:
    req = _request([(b"x-note", "caf\u00e9".encode("latin-1"))])
    assert req.header("x-note") == "caf\u00e9"


async def test_the_decoded_copy_is_dropped_when_the_response_starts() -> None:
    req = _request([(b"authorization", b"Bearer tg-1"), (b"accept", b"text/event-stream")])
    assert req.header("accept") == "text/event-stream"
    assert req._headers is not None  # decoded once, for the ~5 lookups before the answer
    await req.start(200, "text/event-stream")
    assert req._headers is None  # not kept for the stream's life
    assert req.header("authorization") == "Bearer tg-1"  # a later lookup still answers
