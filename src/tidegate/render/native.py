"""Native API renderer (docs/api.md §6): `start`, `status`, `delta`, `done`, `error` events.

Each frame is `id: <n>` (from 0), `event: <name>`, `data: <json>`. `status` events follow the phase
of the answer: `connecting` when the stream starts, one `fallback` per route that failed before the
commit point, `thinking` while only reasoning (or silence) arrives, `generating` when text starts,
`tool_call` when a tool call starts. `native_result` builds the `done` object from a generation's
canonical events and record fields; the replay endpoint uses the same function, so a replay answers
exactly what `done` carried.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from ..commit import Committed
from ..events import Event, Failed, ReasoningDelta, TextDelta, ToolCallDelta
from ..records import GenerationRecord, Usage, usage_dict
from .chat import ChatCompletionBuilder
from .responses import ResponseState


def native_result(
    events: Iterable[Event],
    *,
    generation_id: str,
    model: str,
    provider: str | None,
    served_model: str | None,
    usage: Usage,
    finish_reason: str | None,
) -> dict[str, Any]:
    """The final result object of a completed generation (the `done` payload, and the replay JSON)."""
    state = ResponseState(generation_id)
    details = ChatCompletionBuilder(generation_id=generation_id, public_model=model, created=0)
    for event in events:
        state.feed(event)
        if isinstance(event, ReasoningDelta):
            details.add(event)
    state.close_all("completed")
    reasoning = "".join(details.reasoning)
    return {
        "id": generation_id,
        "status": "completed",
        "model": model,
        "provider": provider,
        "served_model": served_model,
        "output_text": state.output_text,
        "output": state.output("completed"),
        "reasoning": reasoning or None,
        "reasoning_details": details.details,
        "finish_reason": finish_reason,
        "usage": usage_dict(usage),
    }


def native_result_for_record(record: GenerationRecord, events: Iterable[Event]) -> dict[str, Any]:
    """`native_result` for a stored, completed generation record and its canonical event log."""
    return native_result(
        events,
        generation_id=record.id,
        model=record.model,
        provider=record.provider,
        served_model=record.served_model,
        usage=record.usage,
        finish_reason=record.finish_reason,
    )


class NativeStreamRenderer:
    """One native stream's frames. Keeps the phase so each `status` is sent once per change."""

    def __init__(self, *, generation_id: str, public_model: str, created: int, first_event_id: int = 0) -> None:
        self.generation_id = generation_id
        self.model = public_model
        self.created = created
        self.next_id = first_event_id
        self.phase = ""
        self.text: list[str] = []
        self._calls: set[int] = set()

    def _frame(self, event: str, payload: dict[str, Any]) -> bytes:
        seq = self.next_id
        self.next_id += 1
        return b"id: %d\nevent: %s\ndata: %s\n\n" % (seq, event.encode(), orjson.dumps(payload))

    def _status(self, status: str, **extra: Any) -> bytes:
        self.phase = status
        return self._frame("status", {"status": status, **extra})

    def begin(self, committed: Committed) -> bytes:
        """`start`, `status: connecting`, then one `status: fallback` per route that failed first."""
        out = [
            self._frame("start", {"id": self.generation_id, "model": self.model, "created_at": self.created}),
            self._status("connecting", provider=committed.provider),
        ]
        for failure in committed.failed_routes:
            detail = f"{failure.code} {failure.status}" if failure.status else failure.code
            out.append(self._frame("status", {"status": "fallback", "provider": failure.provider, "detail": detail}))
        return b"".join(out)

    def render(self, event: Event) -> bytes:
        if isinstance(event, TextDelta):
            if not event.text:
                return b""
            self.text.append(event.text)
            head = self._status("generating") if self.phase != "generating" else b""
            return head + self._frame("delta", {"type": "text", "text": event.text})
        if isinstance(event, ReasoningDelta):
            head = self._status("thinking") if self.phase != "thinking" else b""
            if event.kind == "encrypted" or not event.text:
                return head  # no readable text: the details arrive with `done`
            return head + self._frame("delta", {"type": "reasoning", "text": event.text})
        if isinstance(event, ToolCallDelta):
            head = b""
            if event.index not in self._calls:
                self._calls.add(event.index)
                head = self._status("tool_call")
            call: dict[str, Any] = {"index": event.index, "arguments": event.arguments}
            if event.id is not None:
                call["id"] = event.id
            if event.name is not None:
                call["name"] = event.name
            return head + self._frame("delta", {"type": "tool_call", "tool_call": call})
        return b""

    def idle_status(self) -> bytes:
        """On a keep-alive tick before any output: `status: thinking` once (silence is thinking)."""
        return self._status("thinking") if self.phase == "connecting" else b""

    def done(self, result: dict[str, Any]) -> bytes:
        return self._frame("done", result)

    def fail(self, failure: Failed) -> bytes:
        payload = {
            "error": {"code": failure.code, "message": failure.message},
            "partial_output": "".join(self.text),
        }
        return self._frame("error", payload)
