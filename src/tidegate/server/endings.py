"""The door's own failure ending for a stream whose gateway died before writing one (docs/api.md §4, §7).

A gateway that dies mid-stream leaves a frame log with no ending: a resume, or a follower on another
instance, would re-send those frames and stop, and a plain OpenAI SDK client takes a body that just
stops for a finished answer. Once the record is final (the lease sweep marked it `interrupted`), the
reader ends the stream itself, in the door's shape: chat's error chunk (no `[DONE]`), Responses'
`response.failed`, native's and Messages' `error` events. The frames already logged give the ids and the response
shell; the record (gateway/recovery.py) gives the partial output.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..doors import Door
from ..events import Event, ReasoningDelta, TextDelta, ToolCallDelta
from ..records import GenerationRecord
from ..render.responses import ResponseState

# the last frame of an ended stream, per door format
_ENDINGS = (
    b"data: [DONE]",
    b"event: response.completed\n",
    b"event: response.failed\n",
    b"event: response.incomplete\n",
    b"event: done\n",
    b"event: error\n",
    b"event: message_stop\n",
)


def has_ending(frame: bytes) -> bool:
    """Whether `frame` ends its stream (a chat error chunk carries `"finish_reason":"error"`)."""
    if any(marker in frame for marker in _ENDINGS):
        return True
    return b'"finish_reason":"error"' in frame and b'"error":' in frame


def _data(frame: bytes) -> dict[str, Any]:
    for line in frame.split(b"\n"):
        if line.startswith(b"data: "):
            try:
                parsed = orjson.loads(line[6:])
            except orjson.JSONDecodeError:
                return {}
            return parsed if isinstance(parsed, dict) else {}
    return {}


def _error(record: GenerationRecord) -> dict[str, str]:
    error = record.error or {}
    return {
        "code": str(error.get("code") or "interrupted"),
        "message": str(error.get("message") or "the generation did not finish"),
    }


def _chat(record: GenerationRecord, frames: list[bytes], seq: int) -> bytes:
    last = next((d for d in map(_data, reversed(frames)) if d.get("object") == "chat.completion.chunk"), {})
    delta: dict[str, Any] = {"content": ""} if last else {"role": "assistant", "content": ""}
    chunk = {
        "id": last.get("id") or f"chatcmpl-{record.id}",
        "object": "chat.completion.chunk",
        "created": last.get("created") or int(record.created_at),
        "model": last.get("model") or record.model,
        "provider": record.provider or "",
        "error": _error(record),
        "choices": [{"index": 0, "delta": delta, "finish_reason": "error"}],
    }
    return b"id: %d\ndata: %s\n\n" % (seq, orjson.dumps(chunk))


def _responses(record: GenerationRecord, frames: list[bytes], events: list[Event], seq: int) -> bytes:
    created = next((d for d in map(_data, frames) if d.get("type") == "response.created"), {})
    shell = created.get("response")
    response: dict[str, Any] = dict(shell) if isinstance(shell, dict) else {"id": f"resp_{record.id}"}
    state = ResponseState(record.id)
    for event in events:
        if isinstance(event, TextDelta | ReasoningDelta | ToolCallDelta):
            state.feed(event)
    response.update(status="failed", error=_error(record), output=state.output("incomplete"))
    payload = {"type": "response.failed", "response": response, "sequence_number": seq}
    return b"id: %d\nevent: response.failed\ndata: %s\n\n" % (seq, orjson.dumps(payload))


def _native(record: GenerationRecord, seq: int) -> bytes:
    payload = {"error": _error(record), "partial_output": record.output_text}
    return b"id: %d\nevent: error\ndata: %s\n\n" % (seq, orjson.dumps(payload))


def _messages(record: GenerationRecord, seq: int) -> bytes:
    error = _error(record)
    payload = {"type": "error", "error": {"type": "api_error", "message": error["message"], "code": error["code"]}}
    return b"id: %d\nevent: error\ndata: %s\n\n" % (seq, orjson.dumps(payload))


def crash_ending(record: GenerationRecord, frames: list[bytes], events: list[Event]) -> bytes:
    """The failure ending of `record`'s stream, whose logged `frames` (all of them, in order) do not
    end; b"" for a door that has no stream ending of this kind (images end with their record)."""
    seq = len(frames)
    if record.door == Door.CHAT:
        return _chat(record, frames, seq)
    if record.door == Door.RESPONSES:
        return _responses(record, frames, events, seq)
    if record.door == Door.NATIVE:
        return _native(record, seq)
    if record.door == Door.MESSAGES:
        return _messages(record, seq)
    return b""
