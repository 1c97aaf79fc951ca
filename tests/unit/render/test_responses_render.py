"""The Responses renderer fed canonical event lists: every frame must parse into openai-python's typed
stream events with strict validation, and the SDK's own stream accumulator must accept the sequence."""

from __future__ import annotations

from typing import Any

import orjson
import pydantic
import pytest
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent

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
from tidegate.render.responses import ResponseBuilder, ResponsesStreamRenderer
from tidegate.sse import SSEDecoder

GID = "01JABCDEFGHJKMNPQRSTVWXYZ0"
ECHO: dict[str, Any] = {
    "instructions": None,
    "tools": [],
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "metadata": {},
    "reasoning": None,
    "max_output_tokens": None,
    "temperature": None,
    "top_p": None,
}
USAGE = UsageReport(prompt=11, completion=7, reasoning=3, cached=2)
STRICT_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseStreamEvent)
TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def renderer() -> ResponsesStreamRenderer:
    return ResponsesStreamRenderer(generation_id=GID, public_model="m/x", created=1700000000, echo=ECHO)


def run(events: list[Event], *, fail: Failed | None = None, usage: UsageReport | None = USAGE) -> list[dict[str, Any]]:
    """Render a whole stream, check the SSE framing, and return the JSON payloads."""
    r = renderer()
    raw = r.begin()
    for e in events:
        raw += r.render(e)
    raw += r.fail(fail, usage) if fail is not None else r.finish(usage)
    decoded = SSEDecoder().feed(raw)
    payloads = [orjson.loads(ev.data) for ev in decoded]
    for ev, p in zip(decoded, payloads, strict=True):
        assert ev.event == p["type"]  # `event:` names the type
        assert ev.id == str(p["sequence_number"])  # `id:` is the event's index
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    assert [p["type"] for p in payloads].count("response.created") == 1
    terminals = [p for p in payloads if p["type"] in TERMINAL]
    assert len(terminals) == 1 and terminals[0] is payloads[-1]
    return payloads


def sdk_parse(payloads: list[dict[str, Any]]) -> Any:
    """Strict-validate each event, feed the SDK's `responses.stream()` accumulator, and return the
    response it assembled for a `response.completed` stream (None otherwise)."""
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    for p in payloads:
        state.handle_event(STRICT_EVENT.validate_python(p))
    return state._completed_response


def types(payloads: list[dict[str, Any]]) -> list[str]:
    return [p["type"] for p in payloads]


def test_text_stream_full_sequence_and_usage() -> None:
    payloads = run([Started("p", "served"), TextDelta("Hel"), TextDelta("lo"), Finished("stop"), USAGE])
    assert types(payloads) == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    created = payloads[0]["response"]
    assert created["id"] == f"resp_{GID}" and created["status"] == "in_progress" and created["output"] == []
    deltas = [p for p in payloads if p["type"] == "response.output_text.delta"]
    assert all(d["logprobs"] == [] and d["item_id"] == f"msg_{GID}_0" for d in deltas)
    assert payloads[6]["text"] == "Hello" and payloads[6]["logprobs"] == []
    final = payloads[-1]["response"]
    assert final["status"] == "completed" and final["error"] is None
    assert final["output"] == [
        {
            "id": f"msg_{GID}_0",
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Hello", "annotations": [], "logprobs": []}],
        }
    ]
    assert final["usage"] == {
        "input_tokens": 11,
        "input_tokens_details": {"cached_tokens": 2, "cache_write_tokens": 0},
        "output_tokens": 7,
        "output_tokens_details": {"reasoning_tokens": 3},
        "total_tokens": 18,
    }
    assembled = sdk_parse(payloads)
    assert assembled is not None and assembled.output_text == "Hello"
    assert assembled.id == f"resp_{GID}" and assembled.usage.total_tokens == 18


def test_reasoning_with_signature_then_text() -> None:
    events: list[Event] = [
        ReasoningDelta("Let me ", index=0),
        ReasoningDelta("think.", index=0),
        ReasoningDelta("", signature="sig-abc", index=0),
        TextDelta("Answer"),
        Finished("stop"),
    ]
    payloads = run(events)
    sdk_parse(payloads)
    rdeltas = [p for p in payloads if p["type"] == "response.reasoning_text.delta"]
    assert [d["delta"] for d in rdeltas] == ["Let me ", "think."]
    assert all(d["item_id"] == f"rs_{GID}_0" and d["output_index"] == 0 for d in rdeltas)
    done = next(p for p in payloads if p["type"] == "response.reasoning_text.done")
    assert done["text"] == "Let me think."
    items_done = [p["item"] for p in payloads if p["type"] == "response.output_item.done"]
    assert items_done[0] == {
        "id": f"rs_{GID}_0",
        "type": "reasoning",
        "status": "completed",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "Let me think."}],
        "encrypted_content": "sig-abc",
    }
    assert items_done[1]["id"] == f"msg_{GID}_1"
    text_delta = next(p for p in payloads if p["type"] == "response.output_text.delta")
    assert text_delta["output_index"] == 1
    # the reasoning item closes before the message opens
    t = types(payloads)
    assert t.index("response.output_item.done") < t.index("response.output_text.delta")
    final = payloads[-1]["response"]
    assert [i["type"] for i in final["output"]] == ["reasoning", "message"]


def test_encrypted_only_thinking_sends_no_reasoning_text() -> None:
    events: list[Event] = [
        ReasoningDelta("", kind="encrypted", data="BLOB1", index=0),
        ReasoningDelta("", kind="encrypted", data="BLOB2", index=1),
        TextDelta("ok"),
        Finished("stop"),
    ]
    payloads = run(events)
    sdk_parse(payloads)
    t = types(payloads)
    assert not any(x.startswith("response.reasoning_text") for x in t)
    assert not any(p.get("part", {}).get("type") == "reasoning_text" for p in payloads)
    final = payloads[-1]["response"]["output"]
    assert [i["type"] for i in final] == ["reasoning", "reasoning", "message"]
    assert final[0]["encrypted_content"] == "BLOB1" and "content" not in final[0]
    assert final[1]["encrypted_content"] == "BLOB2" and final[1]["summary"] == []


def test_signature_only_thinking_keeps_an_empty_text_part() -> None:
    # An Anthropic thinking block with no readable text: replayable as text + signature, not redacted.
    payloads = run([ReasoningDelta("", signature="s1", index=0), TextDelta("x"), Finished("stop")])
    sdk_parse(payloads)
    assert "response.reasoning_text.delta" not in types(payloads)
    item = payloads[-1]["response"]["output"][0]
    assert item["content"] == [{"type": "reasoning_text", "text": ""}] and item["encrypted_content"] == "s1"


def test_reasoning_summary_events() -> None:
    events: list[Event] = [
        ReasoningDelta("Sum", kind="summary", index=0),
        ReasoningDelta("mary", kind="summary", index=0),
        ReasoningDelta("", kind="encrypted", data="ENC", index=0),
        TextDelta("hi"),
        Finished("stop"),
    ]
    payloads = run(events)
    sdk_parse(payloads)
    t = types(payloads)
    assert t.count("response.reasoning_summary_part.added") == 1
    assert t.count("response.reasoning_summary_text.delta") == 2
    sdone = next(p for p in payloads if p["type"] == "response.reasoning_summary_text.done")
    assert sdone["text"] == "Summary" and sdone["summary_index"] == 0
    item = payloads[-1]["response"]["output"][0]
    assert item["summary"] == [{"type": "summary_text", "text": "Summary"}]
    assert item["encrypted_content"] == "ENC"


def test_parallel_tool_calls_interleave_and_done_repeats_arguments() -> None:
    events: list[Event] = [
        TextDelta("Checking."),
        ToolCallDelta(0, "", id="call_a", name="get_weather"),
        ToolCallDelta(1, "", id="call_b", name="get_time"),
        ToolCallDelta(0, '{"ci'),
        ToolCallDelta(1, '{"tz":"CET"}'),
        ToolCallDelta(0, 'ty":"Berlin"}'),
        Finished("tool_calls"),
    ]
    payloads = run(events)
    sdk_parse(payloads)
    added = [p for p in payloads if p["type"] == "response.output_item.added"]
    assert [a["item"]["type"] for a in added] == ["message", "function_call", "function_call"]
    fc_a = added[1]["item"]
    assert fc_a == {
        "id": f"fc_{GID}_1",
        "type": "function_call",
        "status": "in_progress",
        "call_id": "call_a",
        "name": "get_weather",
        "arguments": "",
    }
    # the message closed before the first call opened
    t = types(payloads)
    assert t.index("response.content_part.done") < t.index("response.function_call_arguments.delta")
    adeltas = [
        (p["output_index"], p["delta"]) for p in payloads if p["type"] == "response.function_call_arguments.delta"
    ]
    assert adeltas == [(1, '{"ci'), (2, '{"tz":"CET"}'), (1, 'ty":"Berlin"}')]
    dones = {p["item_id"]: p for p in payloads if p["type"] == "response.function_call_arguments.done"}
    assert dones[f"fc_{GID}_1"]["arguments"] == '{"city":"Berlin"}'
    assert dones[f"fc_{GID}_1"]["name"] == "get_weather"
    assert dones[f"fc_{GID}_2"]["arguments"] == '{"tz":"CET"}'
    final = payloads[-1]
    assert final["type"] == "response.completed"
    calls = [i for i in final["response"]["output"] if i["type"] == "function_call"]
    assert [(c["call_id"], c["name"], c["arguments"], c["status"]) for c in calls] == [
        ("call_a", "get_weather", '{"city":"Berlin"}', "completed"),
        ("call_b", "get_time", '{"tz":"CET"}', "completed"),
    ]


def test_length_limit_ends_incomplete() -> None:
    payloads = run([TextDelta("partial"), Finished("length"), USAGE])
    sdk_parse(payloads)
    final = payloads[-1]
    assert final["type"] == "response.incomplete"
    assert final["response"]["status"] == "incomplete"
    assert final["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["response"]["output"][0]["status"] == "incomplete"
    item_done = next(p for p in payloads if p["type"] == "response.output_item.done")
    assert item_done["item"]["status"] == "incomplete"


def test_content_filter_ends_incomplete() -> None:
    payloads = run([TextDelta("x"), Finished("content_filter")])
    assert payloads[-1]["type"] == "response.incomplete"
    assert payloads[-1]["response"]["incomplete_details"] == {"reason": "content_filter"}


@pytest.mark.parametrize("code", ["upstream_error", "upstream_timeout", "upstream_protocol_error", "cancelled"])
def test_failure_after_commit_is_one_response_failed_with_partial_output(code: str) -> None:
    failure = Failed(code, "the provider failed mid-generation", "prov")  # type: ignore[arg-type]
    payloads = run(
        [ReasoningDelta("hmm", index=0), TextDelta("Half an ans"), ToolCallDelta(0, "{", id="c", name="f")],
        fail=failure,
    )
    t = types(payloads)
    assert t[-1] == "response.failed"
    assert "response.completed" not in t and "response.incomplete" not in t
    response = payloads[-1]["response"]
    assert response["status"] == "failed"
    assert response["error"] == {"code": code, "message": "the provider failed mid-generation"}
    out = response["output"]
    assert [i["type"] for i in out] == ["reasoning", "message", "function_call"]
    assert out[1]["content"][0]["text"] == "Half an ans"
    # items closed before the break are complete; the one still open when it broke is not
    assert [i["status"] for i in out] == ["completed", "completed", "incomplete"]
    assert out[2]["arguments"] == "{"
    # every event before the terminal one is strictly valid; the terminal one carries a §4 code that
    # openai-python's `ResponseError.code` Literal does not list, so only lenient parsing accepts it
    for p in payloads[:-1]:
        STRICT_EVENT.validate_python(p)
    lenient = Response.construct(**response)  # what the SDK does by default (construct_type)
    assert lenient.status == "failed"


def test_failure_right_after_commit_has_empty_output() -> None:
    payloads = run([], fail=Failed("upstream_timeout", "no data from the upstream for 1 s", "p"), usage=None)
    assert types(payloads) == ["response.created", "response.in_progress", "response.failed"]
    assert payloads[-1]["response"]["output"] == [] and payloads[-1]["response"]["usage"] is None


def test_echo_fields() -> None:
    echo = dict(ECHO, instructions="be brief", metadata={"a": "b"}, max_output_tokens=5, temperature=0.2)
    r = ResponsesStreamRenderer(generation_id=GID, public_model="m/x", created=5, echo=echo, first_event_id=0)
    created = orjson.loads(SSEDecoder().feed(r.begin())[0].data)["response"]
    assert created["instructions"] == "be brief" and created["metadata"] == {"a": "b"}
    assert created["max_output_tokens"] == 5 and created["temperature"] == 0.2
    Response.model_validate(created)
    assert r.next_id == 2  # response.created and response.in_progress


def test_non_stream_builder_equals_streamed_final_response() -> None:
    events: list[Event] = [
        ReasoningDelta("r", index=0),
        ReasoningDelta("", signature="sig", index=0),
        TextDelta("Hello"),
        ToolCallDelta(0, '{"a":1}', id="call_1", name="f"),
        Finished("tool_calls"),
        USAGE,
    ]
    payloads = run(events)
    builder = ResponseBuilder(generation_id=GID, public_model="m/x", created=1700000000, echo=ECHO)
    for e in events:
        builder.add(e)
    body = builder.build(USAGE)
    assert body == payloads[-1]["response"]
    parsed = Response.model_validate(body)
    assert parsed.output_text == "Hello" and parsed.usage is not None and parsed.usage.total_tokens == 18
