"""The client's sans-I/O session: other doors, buffered answers, typed errors, resume and replay."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.unit.client.client_kit import (
    SSE_HEADERS,
    chat_frames,
    chunk,
    named_frames,
    run,
    session,
    splits,
    usage_chunk,
)
from tidegate.client import (
    ConflictError,
    Done,
    IncompleteStream,
    NotFoundError,
    RateLimitError,
    Started,
    Status,
    StreamFailed,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from tidegate.client.session import Mode, StreamSession
from tidegate.client.types import ReasoningDelta, StreamEvent


def texts(events: list[StreamEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


RESPONSES = named_frames(
    [
        ("response.created", {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}}),
        ("response.reasoning_text.delta", {"type": "response.reasoning_text.delta", "output_index": 0, "delta": "hm"}),
        ("response.output_text.delta", {"type": "response.output_text.delta", "output_index": 1, "delta": "Hi "}),
        ("response.output_text.delta", {"type": "response.output_text.delta", "output_index": 1, "delta": "there"}),
        (
            "response.output_item.added",
            {"type": "response.output_item.added", "output_index": 2,
             "item": {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": ""}},
        ),
        ("response.function_call_arguments.delta",
         {"type": "response.function_call_arguments.delta", "output_index": 2, "delta": '{"a":'}),
        ("response.function_call_arguments.delta",
         {"type": "response.function_call_arguments.delta", "output_index": 2, "delta": "1}"}),
        ("response.function_call_arguments.done",
         {"type": "response.function_call_arguments.done", "output_index": 2, "arguments": '{"a":1}'}),
        (
            "response.completed",
            {"type": "response.completed", "response": {
                "id": "resp_1", "status": "completed",
                "output": [
                    {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "hm"}]},
                    {"type": "message", "content": [{"type": "output_text", "text": "Hi there"}]},
                    {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": '{"a":1}'},
                ],
                "usage": {"input_tokens": 4, "output_tokens": 6, "total_tokens": 10,
                          "output_tokens_details": {"reasoning_tokens": 1}},
            }},
        ),
    ]
)  # fmt: skip


@pytest.mark.parametrize("parts", list(splits(RESPONSES))[::13], ids=lambda p: str(len(p[0])))
def test_responses_stream(parts: list[bytes]) -> None:
    events, exc, _ = run("responses", parts)
    assert exc is None
    assert texts(events) == "Hi there"
    assert [e.text for e in events if isinstance(e, ReasoningDelta)] == ["hm"]
    assert [c.parsed for c in events if isinstance(c, ToolCall)] == [{"a": 1}]
    done = events[-1]
    assert isinstance(done, Done)
    assert done.finish_reason == "tool_calls" and done.text == "Hi there" and done.usage == Usage(4, 6, 10, 1)


def test_responses_failed_and_incomplete() -> None:
    failed = named_frames(
        [
            ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "par"}),
            ("response.failed", {"type": "response.failed", "response": {
                "status": "failed", "error": {"code": "upstream_error", "message": "boom"}}}),
        ]
    )  # fmt: skip
    events, exc, _ = run("responses", [failed])
    assert isinstance(exc, StreamFailed) and exc.code == "upstream_error" and exc.partial_text == "par"
    length = named_frames(
        [
            ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "par"}),
            ("response.incomplete", {"type": "response.incomplete", "response": {
                "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}}),
        ]
    )  # fmt: skip
    events, exc, _ = run("responses", [length])
    assert exc is None and isinstance(events[-1], Done) and events[-1].finish_reason == "length"
    # no terminal event at all
    events, exc, _ = run("responses", [length[: length.index(b"id: 1")]])
    assert isinstance(exc, IncompleteStream)


NATIVE_RESULT = {
    "id": "01J0000000000000000000GEN1",
    "status": "completed",
    "model": "m/x",
    "provider": "prov-a",
    "served_model": "served-1",
    "output_text": "Hello world",
    "output": [],
    "reasoning": "think",
    "reasoning_details": [],
    "finish_reason": "stop",
    "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5},
}
NATIVE = named_frames(
    [
        ("start", {"id": "01J0000000000000000000GEN1", "model": "m/x", "created_at": 1}),
        ("status", {"status": "thinking", "provider": "prov-a"}),
        ("delta", {"type": "reasoning", "text": "think"}),
        ("delta", {"type": "text", "text": "Hello "}),
        ("delta", {"type": "text", "text": "world"}),
        ("done", NATIVE_RESULT),
    ]
)


@pytest.mark.parametrize("parts", list(splits(NATIVE))[::17], ids=lambda p: str(len(p[0])))
def test_native_stream(parts: list[bytes]) -> None:
    events, exc, _ = run("native", parts)
    assert exc is None
    assert isinstance(events[0], Started) and events[0].id == "01J0000000000000000000GEN1"
    assert isinstance(events[1], Status) and events[1].status == "thinking"
    assert texts(events) == "Hello world"
    done = events[-1]
    assert isinstance(done, Done) and done.text == "Hello world" and done.reasoning == "think"
    assert done.usage == Usage(2, 3, 5) and done.result == NATIVE_RESULT


def test_native_error_event() -> None:
    data = named_frames(
        [("delta", {"type": "text", "text": "Hel"}),
         ("error", {"error": {"code": "cancelled", "message": "stopped"}, "partial_output": "Hel"})]
    )  # fmt: skip
    _events, exc, _ = run("native", [data])
    assert isinstance(exc, StreamFailed) and exc.code == "cancelled" and exc.partial_text == "Hel"
    _events, exc, _ = run("native", [data[: data.index(b"id: 1")]])
    assert isinstance(exc, IncompleteStream) and not isinstance(exc, StreamFailed)


def test_buffered_json_answer_is_one_final_event() -> None:
    s = session("native")
    s.request()
    headers = {
        "content-type": "application/json",
        "x-generation-id": "01J0000000000000000000GEN1",
        "x-kendr-stream-mode": "buffered",
        "x-kendr-buffered-reason": "custom_mcp",
    }
    assert s.on_head(200, headers) is Mode.BODY
    events = s.on_body(orjson.dumps(NATIVE_RESULT))
    assert len(events) == 1 and isinstance(events[0], Done)
    assert events[0].buffered_reason == "custom_mcp" and events[0].text == "Hello world" and s.finished


def test_buffered_chat_completion() -> None:
    s = session("chat")
    s.request()
    s.on_head(200, {"content-type": "application/json", "x-kendr-buffered-reason": "server_tools"})
    body = {
        "model": "m/x",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    (done,) = s.on_body(orjson.dumps(body))
    assert isinstance(done, Done) and done.text == "ok" and done.buffered_reason == "server_tools"


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [(404, "model_not_found", NotFoundError), (409, "generation_in_progress", ConflictError),
     (429, "rate_limited", RateLimitError)],
)  # fmt: skip
def test_status_is_checked_before_reading(status: int, code: str, cls: type[Exception]) -> None:
    s = session("chat", recover=True)
    s.request()
    headers = {"content-type": "application/json", "x-generation-id": "01JGEN", "retry-after": "3"}
    assert s.on_head(status, headers) is Mode.BODY
    with pytest.raises(cls) as info:
        s.on_body(orjson.dumps({"error": {"code": code, "message": "fix it", "type": "x"}}))
    err = info.value
    assert err.code == code and err.message == "fix it" and err.status == status  # type: ignore[attr-defined]
    assert err.generation_id == "01JGEN" and err.retry_after == 3.0  # type: ignore[attr-defined]


FULL: list[dict[str, Any] | str] = [
    chunk({"role": "assistant", "content": "one "}),
    chunk({"content": "two "}),
    chunk({"content": "three "}),
    chunk({"content": "four"}),
    chunk({}, "stop"),
    usage_chunk(),
    "[DONE]",
]


@pytest.mark.parametrize("resume_from", [0, 1, 2])
def test_resume_skips_what_the_caller_already_has(resume_from: int) -> None:
    """The first connection drops after two events; the resumed one starts at `resume_from`
    (a well-behaved gateway starts after Last-Event-ID = 1, a sloppy one repeats)."""
    frames = chat_frames(FULL)
    cut = frames.index(b"id: 2")
    events, exc, s = run("chat", [frames[:cut]], recover=True)
    assert exc is None and not s.finished
    req = s.request()
    assert req.headers["Last-Event-ID"] == "1"
    assert s.on_head(200, SSE_HEADERS) is Mode.STREAM
    resumed = frames[frames.index(f"id: {resume_from}".encode()) :]
    for i in range(len(resumed)):
        events.extend(s.on_bytes(resumed[i : i + 1]))
    assert texts(events) == "one two three four"
    assert isinstance(events[-1], Done) and events[-1].recovered == "resume"


def _to_replay() -> tuple[list[StreamEvent], StreamSession]:
    frames = chat_frames(FULL)
    events, exc, s = run("chat", [frames[: frames.index(b"id: 2")]], recover=True)
    assert exc is None
    s.request()
    assert s.on_head(409, {"content-type": "application/json"}) is Mode.BODY
    assert s.on_body(b'{"error":{"code":"generation_in_progress","message":"wait"}}') == []
    assert s.phase == "replay"
    return events, s


def test_replay_completes_with_only_the_missing_text() -> None:
    events, s = _to_replay()
    req = s.request()
    assert req.path == "/api/v1/llm/responses/replay" and req.body is None
    assert req.headers["Idempotency-Key"] == "key-1"
    s.on_head(409, {"content-type": "application/json", "retry-after": "1"})
    assert s.on_body(b'{"error":{"code":"generation_in_progress","message":"running"}}') == []
    assert s.take_delay() == 1.0
    s.request()
    s.on_head(200, {"content-type": "application/json"})
    result = {**NATIVE_RESULT, "output_text": "one two three four", "reasoning": None}
    more = s.on_body(orjson.dumps(result))
    assert [e.text for e in more if isinstance(e, TextDelta)] == ["three four"]
    assert texts(events + more) == "one two three four"
    done = more[-1]
    assert isinstance(done, Done) and done.recovered == "replay" and done.text == "one two three four"


def test_replay_502_is_a_failure_with_the_partial_output() -> None:
    _, s = _to_replay()
    s.request()
    s.on_head(502, {"content-type": "application/json"})
    body = {"error": {"code": "interrupted", "message": "gateway restarted"}, "status": "interrupted",
            "partial_output": "one two th"}  # fmt: skip
    with pytest.raises(StreamFailed) as info:
        s.on_body(orjson.dumps(body))
    assert info.value.code == "interrupted" and info.value.partial_text == "one two th"


def test_replay_404_is_incomplete() -> None:
    _, s = _to_replay()
    s.request()
    s.on_head(404, {"content-type": "application/json"})
    with pytest.raises(IncompleteStream, match="generation_not_found"):
        s.on_body(b'{"error":{"code":"generation_not_found","message":"unknown key"}}')


def test_replay_that_contradicts_the_stream_is_incomplete() -> None:
    _, s = _to_replay()
    s.request()
    s.on_head(200, {"content-type": "application/json"})
    with pytest.raises(IncompleteStream):
        s.on_body(orjson.dumps({**NATIVE_RESULT, "output_text": "something else"}))


def test_replay_completes_tool_calls_with_the_missing_fragments() -> None:
    frames = chat_frames(
        [chunk({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                "function": {"name": "f", "arguments": '{"x"'}}]})]
    )  # fmt: skip
    events, _exc, s = run("chat", [frames], recover=True)
    s.request()
    s.on_head(409, {"content-type": "application/json"})
    s.on_body(b"{}")
    s.request()
    s.on_head(200, {"content-type": "application/json"})
    result = {**NATIVE_RESULT, "output_text": "", "reasoning": None, "finish_reason": "tool_calls",
              "output": [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"x":1}'}]}  # fmt: skip
    more = s.on_body(orjson.dumps(result))
    frags = [e for e in events + more if isinstance(e, ToolCallDelta)]
    assert "".join(f.arguments for f in frags) == '{"x":1}'
    assert [c.parsed for c in more if isinstance(c, ToolCall)] == [{"x": 1}]


def test_resume_that_starts_a_new_generation_is_incomplete() -> None:
    frames = chat_frames(FULL)
    _events, _exc, s = run("chat", [frames[: frames.index(b"id: 2")]], recover=True)
    s.request()
    with pytest.raises(IncompleteStream, match="new generation"):
        s.on_head(200, {**SSE_HEADERS, "x-generation-id": "01J0000000000000000000GEN2"})


def test_connect_failure_on_first_attempt_is_raised_at_once() -> None:
    from tidegate.client import TidegateConnectionError

    s = session("chat", recover=True)
    s.request()
    with pytest.raises(TidegateConnectionError):
        s.on_end("connection lost (ConnectError)", connect_failed=True)
