"""Server-sent events: an incremental WHATWG decoder with size caps, and the encoder.

The decoder follows https://html.spec.whatwg.org/multipage/server-sent-events.html (9.2.6): CR, LF
and CRLF line endings (a CRLF split across reads included), one BOM stripped at the very start only,
comments skipped (counted, so callers can see keep-alives), `data` lines joined with "\\n", `id` with
NUL ignored, `retry` only when all ASCII digits, an unterminated event at EOF dropped.

Two paths, no more: `feed`, the reference decoder (any input: CR endings become LF, then one split
into lines), and `whole_data_payloads`, the fast path for the reads every OpenAI-compatible stream
sends (whole one-line `data:` events), which answers the same payloads `feed` would or declines and
changes nothing (a differential property test holds them to it: `tests/unit/fuzz/test_fuzz_sse.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

_BOM = b"\xef\xbb\xbf"

DEFAULT_MAX_LINE_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024


class SSEProtocolError(ValueError):
    """A line or event over the size cap: the stream cannot be decoded safely. `events` holds the
    events the same `feed` call decoded before it (they arrived whole: a caller passes them on
    before the failure)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.events: list[SSEEvent] = []


@dataclass(slots=True)  # not frozen: a frozen dataclass costs twice as much to build, once per event
class SSEEvent:
    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


class SSEDecoder:
    """Feed bytes with `feed`, get complete events back. Keeps all state between reads."""

    __slots__ = (
        "_buf",
        "_comments",
        "_data",
        "_data_size",
        "_event",
        "_have_data",
        "_last_id",
        "_max_event",
        "_max_line",
        "_retry",
        "_skip_lf",
        "_started",
    )

    def __init__(
        self,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        self._buf = b""
        self._started = False
        self._skip_lf = False
        self._data: list[str] = []
        self._data_size = 0
        self._have_data = False
        self._event = ""
        self._last_id: str | None = None
        self._retry: int | None = None
        self._max_line = max_line_bytes
        self._max_event = max_event_bytes
        self._comments = 0

    @property
    def last_event_id(self) -> str | None:
        return self._last_id

    @property
    def comments_seen(self) -> int:
        """Comment lines seen so far (keep-alives)."""
        return self._comments

    @property
    def pending_bytes(self) -> int:
        """Bytes of an unfinished line plus undispatched data (non-zero at EOF = truncated event)."""
        return len(self._buf) + self._data_size

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        try:
            return self._feed(chunk, events) if chunk else events
        except SSEProtocolError as exc:
            exc.events = events
            raise

    def whole_data_payloads(self, chunk: bytes) -> list[bytes] | None:
        """The fast path: the payloads of a read that is whole `data:` events of one line each, LF
        endings, nothing pending before it (every read of a paced OpenAI-compatible stream is one such
        event; an unpaced one's hold several). None for anything else (nothing has changed then:
        `feed`, the reference decoder, decodes the read). The caller dispatches each payload as a
        `message` event itself, with no `SSEEvent` and no str built for it. Tested against `feed`
        byte for byte (`tests/unit/fuzz/test_fuzz_sse.py`)."""
        if chunk[-2:] != b"\n\n" or chunk.find(b"\r") != -1 or self._buf or self._have_data or self._event:
            return None
        max_line, max_event = self._max_line, self._max_event
        if chunk.find(b"\n") == len(chunk) - 2:  # one event, a paced stream's every read: no split
            if chunk[:5] != b"data:" or len(chunk) - 2 > max_line:
                return None
            payload = chunk[6:-2] if chunk[5:6] == b" " else chunk[5:-2]
            if len(payload) + 1 > max_event:
                return None
            self._started = True
            self._skip_lf = False
            return [payload]
        payloads: list[bytes] = []
        for block in chunk[:-2].split(b"\n\n"):
            if block[:5] != b"data:" or block.find(b"\n") != -1 or len(block) > max_line:
                return None
            payload = block[6:] if block[5:6] == b" " else block[5:]
            if len(payload) + 1 > max_event:  # (bytes, not characters: the general path decides)
                return None
            payloads.append(payload)
        self._started = True  # (a read that starts with `data:` has no BOM to strip, no LF to skip)
        self._skip_lf = False
        return payloads

    def feed_to_error(self, chunk: bytes) -> tuple[list[SSEEvent], SSEProtocolError | None]:
        """`feed`, with a cap error that follows whole events in the same read returned next to
        them (the caller passes them on, then fails); one with no events before it is raised.
        (What every decoder calls once per upstream read: no call through `feed`.)"""
        events: list[SSEEvent] = []
        try:
            return (self._feed(chunk, events) if chunk else events), None
        except SSEProtocolError as exc:
            exc.events = events
            if not events:
                raise
            return events, exc

    def _feed(self, chunk: bytes, events: list[SSEEvent]) -> list[SSEEvent]:
        buf = self._buf + chunk if self._buf else chunk
        if not self._started:
            if len(buf) < len(_BOM) and _BOM.startswith(buf):
                self._buf = buf
                return []
            self._started = True
            if buf.startswith(_BOM):
                buf = buf[len(_BOM) :]
        if self._skip_lf and buf:
            if buf[0:1] == b"\n":
                buf = buf[1:]
            self._skip_lf = False
        # CR and CRLF end lines too (the SSE spec): as LF, so one split finds every line. A read that
        # ends in CR may be half a CRLF: the next read's first LF is then not a line of its own.
        # (`.find`, not `in`: CPython 3.11's `bytes in bytes` first tries the operand as an integer and
        # builds, then drops, a formatted TypeError on every test.)
        if buf.find(b"\r") != -1:
            self._skip_lf = buf.endswith(b"\r")
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        # one split instead of a search per line
        lines = buf.split(b"\n")
        rest = lines.pop()
        max_line = self._max_line
        for raw in lines:
            if not raw:
                ev = self._dispatch()
                if ev is not None:
                    events.append(ev)
                continue
            if len(raw) > max_line:
                raise SSEProtocolError(f"SSE line of {len(raw)} bytes exceeds {max_line}")
            if raw.startswith(b"data:"):  # the field name is ASCII: the value decodes on its own
                self._append_data((raw[6:] if raw[5:6] == b" " else raw[5:]).decode("utf-8", "replace"))
            else:
                self._line(raw)
        if len(rest) > max_line:
            raise SSEProtocolError(f"SSE line of over {len(rest)} bytes exceeds {max_line}")
        self._buf = rest
        return events

    def _append_data(self, value: str) -> None:
        self._data_size += len(value) + 1
        if self._data_size > self._max_event:
            raise SSEProtocolError(f"SSE event exceeds {self._max_event} bytes")
        self._data.append(value)
        self._have_data = True

    def _line(self, raw: bytes) -> SSEEvent | None:
        if not raw:
            return self._dispatch()
        if raw[0:1] == b":":
            self._comments += 1
            return None
        line = raw.decode("utf-8", "replace")
        colon = line.find(":")
        if colon == -1:
            name, value = line, ""
        else:
            name = line[:colon]
            value = line[colon + 1 :]
            if value.startswith(" "):
                value = value[1:]
        if name == "data":
            self._append_data(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\x00" not in value:
                self._last_id = value if value else None
        elif name == "retry":
            if value and value.isascii() and value.isdigit():
                self._retry = int(value)
        return None

    def _dispatch(self) -> SSEEvent | None:
        if not self._have_data:
            self._event = ""
            return None
        lines = self._data
        data = lines[0] if len(lines) == 1 else "\n".join(lines)
        ev = SSEEvent(data, self._event or "message", self._last_id, self._retry)
        self._data = []
        self._data_size = 0
        self._have_data = False
        self._event = ""
        return ev


def encode_event(data: bytes | str, *, event: str | None = None, id: int | str | None = None) -> bytes:
    """One SSE event: optional `id:` and `event:` lines, `data:` line(s), blank line."""
    if isinstance(data, str):
        data = data.encode()
    parts: list[bytes] = []
    if id is not None:
        parts.append(b"id: %s\n" % str(id).encode())
    if event is not None:
        parts.append(b"event: %s\n" % event.encode())
    if data.find(b"\n") != -1 or data.find(b"\r") != -1:
        for line in data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n"):
            parts.append(b"data: %s\n" % line)
    else:
        parts.append(b"data: %s\n" % data)
    parts.append(b"\n")
    return b"".join(parts)


def encode_comment(text: str) -> bytes:
    """A keep-alive comment: one line, no blank line after it.

    A blank line after a comment would be harmless per the WHATWG rules, but openai-python's decoder
    dispatches an empty event on every blank line once an `id:` has been seen, and then fails to parse
    it as JSON. A lone comment line is ignored by every conforming client and by line-based loops.
    """
    clean = text.replace("\r", " ").replace("\n", " ")
    return b": %s\n" % clean.encode()
