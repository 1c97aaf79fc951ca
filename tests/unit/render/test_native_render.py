"""The native renderer fed canonical event lists: event names, ids, status phases, and the `done`
object built by `native_result` (the same function the replay endpoint uses)."""

from __future__ import annotations

from typing import Any

import orjson

from tidegate.commit import Committed, RouteFailure
from tidegate.events import (
    Event,
    Failed,
    Finished,
    ReasoningDelta,
    Started,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from tidegate.records import GenerationRecord, usage_of
from tidegate.render.native import NativeStreamRenderer, native_result, native_result_for_record
from tidegate.sse import SSEDecoder, encode_comment

GID = "01JABCDEFGHJKMNPQRSTVWXYZ0"
USAGE = UsageReport(prompt=10, completion=5, reasoning=2, cached=1)


def stream(
    events: list[Event],
    *,
    committed: Committed | None = None,
    keepalives_first: int = 0,
    fail: Failed | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    r = NativeStreamRenderer(generation_id=GID, public_model="m/x", created=1700000000)
    raw = r.begin(committed or Committed("prov", "served-1", 1))
    comments = 0
    for _ in range(keepalives_first):
        raw += r.idle_status()
        ka = encode_comment("WAIT")
        assert ka == b": WAIT\n"
        raw += ka
        comments += 1
    for e in events:
        raw += r.render(e)
    if fail is not None:
        raw += r.fail(fail)
    else:
        raw += r.done(result(events))
    decoder = SSEDecoder()
    decoded = decoder.feed(raw)
    assert decoder.comments_seen == comments
    assert [e.id for e in decoded] == [str(i) for i in range(len(decoded))]
    return [(e.event, orjson.loads(e.data)) for e in decoded]


def result(events: list[Event]) -> dict[str, Any]:
    return native_result(
        events,
        generation_id=GID,
        model="m/x",
        provider="prov",
        served_model="served-1",
        usage=usage_of(USAGE),
        finish_reason=next((e.reason for e in events if isinstance(e, Finished)), None),
    )


def test_text_stream_start_status_delta_done() -> None:
    events: list[Event] = [Started("prov", "served-1"), TextDelta("Hel"), TextDelta("lo"), Finished("stop"), USAGE]
    out = stream(events)
    assert [name for name, _ in out] == ["start", "status", "status", "delta", "delta", "done"]
    assert out[0][1] == {"id": GID, "model": "m/x", "created_at": 1700000000}
    assert out[1][1] == {"status": "connecting", "provider": "prov"}
    assert out[2][1] == {"status": "generating"}
    assert out[3][1] == {"type": "text", "text": "Hel"}
    done = out[-1][1]
    assert done["id"] == GID and done["status"] == "completed"
    assert done["output_text"] == "Hello"
    assert done["provider"] == "prov" and done["served_model"] == "served-1" and done["model"] == "m/x"
    assert done["reasoning"] is None and done["reasoning_details"] == []
    assert done["finish_reason"] == "stop"
    assert done["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
        "reasoning_tokens": 2,
        "cached_tokens": 1,
        "cache_write_tokens": None,
    }
    assert done["output"] == [
        {
            "id": f"msg_{GID}_0",
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Hello", "annotations": [], "logprobs": []}],
        }
    ]


def test_fallback_status_per_failed_route_after_start() -> None:
    committed = Committed(
        "third",
        "m3",
        3,
        (RouteFailure("first", "upstream_error", "boom", 503), RouteFailure("second", "upstream_timeout", "slow")),
    )
    out = stream([TextDelta("x"), Finished("stop")], committed=committed)
    assert out[0][0] == "start"
    statuses = [p for name, p in out if name == "status"]
    assert statuses[:3] == [
        {"status": "connecting", "provider": "third"},
        {"status": "fallback", "provider": "first", "detail": "upstream_error 503"},
        {"status": "fallback", "provider": "second", "detail": "upstream_timeout"},
    ]


def test_reasoning_phases_and_details() -> None:
    events: list[Event] = [
        ReasoningDelta("Comparing ", index=0),
        ReasoningDelta("tenths", index=0),
        ReasoningDelta("", signature="SIG", index=0),
        ReasoningDelta("", kind="encrypted", data="REDACTED", index=1),
        TextDelta("9.9 is larger."),
        Finished("stop"),
    ]
    out = stream(events)
    names = [(n, p.get("status") or p.get("type")) for n, p in out]
    assert names == [
        ("start", None),
        ("status", "connecting"),
        ("status", "thinking"),
        ("delta", "reasoning"),
        ("delta", "reasoning"),
        ("status", "generating"),
        ("delta", "text"),
        ("done", "completed"),
    ]
    assert [p["text"] for n, p in out if n == "delta" and p["type"] == "reasoning"] == ["Comparing ", "tenths"]
    done = out[-1][1]
    assert done["reasoning"] == "Comparing tenths"
    assert done["reasoning_details"] == [
        {"type": "reasoning.text", "text": "Comparing tenths", "index": 0, "signature": "SIG"},
        {"type": "reasoning.encrypted", "data": "REDACTED", "index": 1},
    ]
    assert [i["type"] for i in done["output"]] == ["reasoning", "reasoning", "message"]
    assert done["output"][0]["encrypted_content"] == "SIG"
    assert done["output"][1]["encrypted_content"] == "REDACTED" and "content" not in done["output"][1]
    assert done["output_text"] == "9.9 is larger."


def test_tool_call_status_and_deltas() -> None:
    events: list[Event] = [
        ToolCallDelta(0, "", id="call_a", name="get_weather"),
        ToolCallDelta(0, '{"city":'),
        ToolCallDelta(1, "{}", id="call_b", name="now"),
        ToolCallDelta(0, '"Berlin"}'),
        Finished("tool_calls"),
    ]
    out = stream(events)
    statuses = [p["status"] for n, p in out if n == "status"]
    assert statuses == ["connecting", "tool_call", "tool_call"]
    deltas = [p["tool_call"] for n, p in out if n == "delta"]
    assert all(p["type"] == "tool_call" for n, p in out if n == "delta")
    assert deltas[0] == {"index": 0, "id": "call_a", "name": "get_weather", "arguments": ""}
    assert deltas[1] == {"index": 0, "arguments": '{"city":'}
    assert deltas[2] == {"index": 1, "id": "call_b", "name": "now", "arguments": "{}"}
    done = out[-1][1]
    assert done["finish_reason"] == "tool_calls" and done["output_text"] == ""
    calls = [(i["call_id"], i["name"], i["arguments"]) for i in done["output"]]
    assert calls == [("call_a", "get_weather", '{"city":"Berlin"}'), ("call_b", "now", "{}")]


def test_silence_is_thinking_once() -> None:
    out = stream([TextDelta("hi"), Finished("stop")], keepalives_first=3)
    statuses = [p["status"] for n, p in out if n == "status"]
    assert statuses == ["connecting", "thinking", "generating"]


def test_error_event_carries_partial_output() -> None:
    out = stream(
        [TextDelta("Half "), TextDelta("an answer")],
        fail=Failed("upstream_timeout", "no data from the upstream for 90 s", "prov"),
    )
    assert out[-1] == (
        "error",
        {
            "error": {"code": "upstream_timeout", "message": "no data from the upstream for 90 s"},
            "partial_output": "Half an answer",
        },
    )
    assert "done" not in [n for n, _ in out]


def test_native_result_for_record_matches_the_done_object() -> None:
    events: list[Event] = [ReasoningDelta("r", index=0), TextDelta("answer"), Finished("length"), USAGE]
    record = GenerationRecord(
        id=GID,
        key_id="k",
        model="m/x",
        door="native",
        created_at=1.0,
        status="completed",
        provider="prov",
        served_model="served-1",
        finish_reason="length",
        usage=usage_of(USAGE),
    )
    assert native_result_for_record(record, events) == result(events)
    assert result(events)["finish_reason"] == "length"
    # deterministic: the same events always give the same object (replay equality)
    assert orjson.dumps(result(events)) == orjson.dumps(result(list(events)))
