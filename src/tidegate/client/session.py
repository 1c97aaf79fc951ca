"""The sans-I/O stream session: which request to send next, what a response means, and recovery.

The sync and async clients only move bytes; every decision lives here so both behave the same:

- create: the door's request with `Idempotency-Key` (and `Accept: text/event-stream`). Non-2xx is a
  typed `TidegateAPIError`; a JSON 200 is a buffered answer, returned as one `Done`.
- a dropped connection (transport error, or an EOF before the terminal event) -> resume: the same
  request again with `Last-Event-ID` = the last SSE id seen; events at or before it are skipped, so
  the caller never sees a delta twice (docs/api-operations.md §7).
- a resume answered with anything but a stream, or no resumes left -> replay: the empty-body
  `POST /api/v1/llm/responses/replay`; 409 waits `Retry-After` and asks again, 200 completes the
  stream with only what the caller has not seen, 502/404 end it as incomplete.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import orjson

from ..sse import SSEDecoder, SSEProtocolError
from .errors import IncompleteStream, StreamFailed, TidegateConnectionError, api_error
from .readers import READERS, BaseReader
from .results import StreamMeta, done_from_chat_completion, done_from_native, done_from_response_object
from .types import Done, KeepAlive, StreamEvent

DOOR_PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "native": "/api/v1/llm/responses"}
REPLAY_PATH = "/api/v1/llm/responses/replay"
RESUME_BACKOFF = (0.1, 0.5, 1.0, 2.0)
MAX_REPLAY_ERRORS = 3


class Mode(Enum):
    STREAM = "stream"  # read the body incrementally with `on_bytes`
    BODY = "body"  # read the whole body, then `on_body`


@dataclass(frozen=True, slots=True)
class HTTPRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes | None


def retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def json_or_none(body: bytes) -> Any:
    try:
        return orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return None


class StreamSession:
    def __init__(
        self,
        door: str,
        body: dict[str, Any],
        auth_headers: dict[str, str],
        idempotency_key: str,
        *,
        max_resumes: int = 3,
        replay_wait_s: float = 120.0,
    ) -> None:
        self.door = door
        self.meta = StreamMeta(idempotency_key=idempotency_key, model=str(body.get("model") or "") or None)
        self.reader: BaseReader = READERS[door](self.meta)
        self.phase = "create"
        self._body = orjson.dumps(body)
        self._auth = auth_headers
        self._decoder = SSEDecoder()
        self._comments = 0
        self.last_event_id: str | None = None
        self._resumes_left = max_resumes
        self._recover = max_resumes >= 0
        self._replay_wait_s = replay_wait_s
        self._replay_deadline = 0.0
        self._replay_errors = 0
        self._delay = 0.0
        self._status = 0
        self._headers: Mapping[str, str] = {}
        self.keepalives = 0
        self.attempts = 0
        self._failure: IncompleteStream | None = None

    # -- state the wrappers expose
    @property
    def finished(self) -> bool:
        return self.reader.done is not None

    @property
    def done(self) -> Done | None:
        return self.reader.done

    # -- requests
    def request(self) -> HTTPRequest:
        self.attempts += 1
        key = self.meta.idempotency_key or ""
        if self.phase == "replay":
            headers = {**self._auth, "Idempotency-Key": key, "Accept": "application/json"}
            return HTTPRequest("POST", REPLAY_PATH, headers, None)
        headers = {
            **self._auth,
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "Idempotency-Key": key,
        }
        if self.phase == "resume" and self.last_event_id is not None:
            headers["Last-Event-ID"] = self.last_event_id
        return HTTPRequest("POST", DOOR_PATHS[self.door], headers, self._body)

    def take_delay(self) -> float:
        delay, self._delay = self._delay, 0.0
        return delay

    # -- responses
    def on_head(self, status: int, headers: Mapping[str, str]) -> Mode:
        self._status = status
        self._headers = headers
        gid = headers.get("x-generation-id")
        if gid and self.phase == "resume" and self.meta.generation_id and gid != self.meta.generation_id:
            if self.reader.text_parts or self.reader.reasoning_parts or self.reader.tools:
                raise self.reader.incomplete(f"the retry started a new generation {gid}; the first one did not finish")
        if gid and self.phase != "replay":
            self.meta.generation_id = gid
        for attr, name in (("provider", "x-provider"), ("served_model", "x-served-model")):
            if headers.get(name):
                setattr(self.meta, attr, headers[name])
        ctype = headers.get("content-type", "")
        if self.phase != "replay" and status == 200 and ctype.startswith("text/event-stream"):
            self._decoder = SSEDecoder()
            self._comments = 0
            if self.phase == "resume":
                self.meta.recovered = "resume"
            return Mode.STREAM
        return Mode.BODY

    def on_body(self, body: bytes) -> list[StreamEvent]:
        status, headers = self._status, self._headers
        parsed = json_or_none(body)
        if self.phase == "create":
            if status != 200:
                raise api_error(
                    status,
                    parsed,
                    generation_id=headers.get("x-generation-id"),
                    retry_after=retry_after(headers),
                    fallback_text=body.decode("utf-8", "replace"),
                )
            return [self._buffered(parsed, headers)]
        if self.phase == "resume":
            if status == 422:
                raise api_error(status, parsed, generation_id=self.meta.generation_id)
            self._enter_replay(0.0)
            return []
        return self._on_replay(status, parsed, headers)

    def _buffered(self, parsed: Any, headers: Mapping[str, str]) -> Done:
        if not isinstance(parsed, dict):
            raise self.reader.protocol_error("a 200 answer that is neither an event stream nor JSON")
        self.meta.buffered_reason = headers.get("x-kendr-buffered-reason") or "json"
        convert = {"chat": done_from_chat_completion, "responses": done_from_response_object}.get(
            self.door, done_from_native
        )
        done = convert(parsed, self.meta)
        self.reader.done = done
        return done

    def _on_replay(self, status: int, parsed: Any, headers: Mapping[str, str]) -> list[StreamEvent]:
        reader = self.reader
        if status == 200 and isinstance(parsed, dict):
            self.meta.recovered = "replay"
            return reader.complete_with(done_from_native(parsed, self.meta))
        err = parsed.get("error") if isinstance(parsed, dict) else None
        err = err if isinstance(err, dict) else {}
        if status == 409:
            remaining = self._replay_deadline - time.monotonic()
            if remaining <= 0:
                raise reader.incomplete(f"the generation was still running after {self._replay_wait_s:g}s")
            self._delay = min(retry_after(headers) or 1.0, remaining, 5.0)
            return []
        if status == 502 and isinstance(parsed, dict):
            partial = parsed.get("partial_output")
            raise StreamFailed(
                str(err.get("code") or parsed.get("status") or "upstream_error"),
                str(err.get("message") or "the generation did not complete"),
                partial_text=partial if isinstance(partial, str) else reader.text,
                generation_id=self.meta.generation_id,
                idempotency_key=self.meta.idempotency_key,
            )
        if status in (400, 401, 403, 404, 422):
            code = str(err.get("code") or f"http_{status}")
            raise reader.incomplete(f"the replay answered {status} {code}: {err.get('message') or ''}".rstrip(": "))
        self._replay_errors += 1
        if self._replay_errors > MAX_REPLAY_ERRORS:
            raise reader.incomplete(f"the replay kept failing (HTTP {status})")
        self._delay = min(retry_after(headers) or 0.5, 5.0)
        return []

    def on_bytes(self, chunk: bytes) -> list[StreamEvent]:
        try:
            events, overflow = self._decoder.feed_to_error(chunk)  # whole events before an over-cap line go first
        except SSEProtocolError as exc:
            raise self.reader.protocol_error(str(exc)) from None
        out: list[StreamEvent] = []
        comments = self._decoder.comments_seen
        if comments > self._comments:
            out.extend(KeepAlive() for _ in range(comments - self._comments))
            self.keepalives += comments - self._comments
            self._comments = comments
        skip_upto = _int_id(self.last_event_id) if self.phase == "resume" else None
        for ev in events:
            if self.reader.done is not None:
                break
            eid = _int_id(ev.id)
            if skip_upto is not None and eid is not None and eid <= skip_upto:
                continue  # the resumed stream repeated an event the caller already has
            if ev.id is not None:
                self.last_event_id = ev.id
                if skip_upto is not None and eid is not None:
                    skip_upto = eid
            try:
                out.extend(self.reader.feed(ev))
            except IncompleteStream as exc:
                # the caller first gets the deltas decoded before the failure, then the exception
                self._failure = exc
                break
        if overflow is not None and self._failure is None and self.reader.done is None:
            self._failure = self.reader.protocol_error(str(overflow))
        return out

    def raise_failure(self) -> None:
        """Raise a failure found by `on_bytes` once the events before it have been delivered."""
        if self._failure is not None:
            exc, self._failure = self._failure, None
            raise exc

    def on_end(self, reason: str, *, connect_failed: bool = False) -> None:
        """The response ended (EOF or transport error) before the terminal event."""
        if self.finished:
            return
        if self.phase == "create" and connect_failed and self.attempts == 1:
            raise TidegateConnectionError(f"cannot reach the gateway: {reason}")
        if not self._recover:
            raise self.reader.incomplete(reason)
        if self.phase == "replay":
            self._replay_errors += 1
            if self._replay_errors > MAX_REPLAY_ERRORS:
                raise self.reader.incomplete(f"{reason}; the replay could not be reached either")
            self._delay = 0.5
            return
        if self._resumes_left > 0:
            self._delay = RESUME_BACKOFF[min(self.attempts - 1, len(RESUME_BACKOFF) - 1)]
            self._resumes_left -= 1
            self.phase = "resume"
            return
        self._enter_replay(0.2)

    def _enter_replay(self, delay: float) -> None:
        self.phase = "replay"
        self._replay_deadline = time.monotonic() + self._replay_wait_s
        self._delay = delay


def _int_id(value: str | None) -> int | None:
    if value is None or not value.isdigit():
        return None
    return int(value)
