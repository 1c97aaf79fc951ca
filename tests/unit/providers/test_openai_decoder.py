"""The `openai` kind adapter: recorded Chat Completions streams fed whole, byte by byte and split at
every offset; request building (passthrough body, include_usage rules, auth) and error mapping."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import orjson
import pytest

from tidegate.config.model import ProviderConfig
from tidegate.events import (
    Event,
    Failed,
    Finished,
    RawFrame,
    ReasoningDelta,
    Started,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from tidegate.providers.http.transport import sanitize
from tidegate.providers.openai.chat import OpenAIAdapter, OpenAIDecoder
from tidegate.request import GenerationRequest
from tidegate.sse import SSEDecoder, SSEProtocolError

# Recorded-shape streams (UPSTREAMS §4): `usage: null` on every chunk when include_usage is on, the
# usage chunk with `choices: []` last, unknown fields (`obfuscation`, `system_fingerprint`) present.
TEXT_CHUNKS = [
    b'{"id":"chatcmpl-R1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-x-2025",'
    b'"service_tier":"default","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"role":"assistant",'
    b'"content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"ab"}',
    b'{"id":"chatcmpl-R1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-x-2025",'
    b'"choices":[{"index":0,"delta":{"content":"Hel"},"logprobs":null,"finish_reason":null}],"usage":null}',
    b'{"id": "chatcmpl-R1", "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-x-2025", '
    b'"choices": [{"index": 0, "delta": {"content": "lo \\u00e9 \xe2\x9c\x93"}, "finish_reason": null}]}',
    b'{"id":"chatcmpl-R1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-x-2025",'
    b'"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}',
    b'{"id":"chatcmpl-R1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-x-2025",'
    b'"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":9,"total_tokens":29,'
    b'"prompt_tokens_details":{"cached_tokens":4,"audio_tokens":0},'
    b'"completion_tokens_details":{"reasoning_tokens":2,"audio_tokens":0}}}',
]


def sse(payloads: list[bytes], sep: bytes = b"\n", done: bool = True) -> bytes:
    out = b"".join(b"data: " + p + sep + sep for p in payloads)
    return out + (b"data: [DONE]" + sep + sep if done else b"")


TEXT_STREAM = sse(TEXT_CHUNKS)


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return orjson.dumps(
        {
            "id": "chatcmpl-R2",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


def run(data: bytes, cuts: list[int] | None = None) -> list[Event]:
    """Decode `data` fed in pieces cut at `cuts`; a ValueError becomes a protocol Failed (as the
    transport maps it)."""
    d = OpenAIDecoder("emu", "served")
    bounds = [0, *(cuts or []), len(data)]
    out: list[Event] = []
    try:
        for a, b in itertools.pairwise(bounds):
            out.extend(d.feed(data[a:b]))
            if out and isinstance(out[-1], Failed):
                return out
        out.extend(d.end())
    except SSEProtocolError:
        out.append(Failed("upstream_protocol_error", "sse", "emu"))
    except ValueError:
        out.append(Failed("upstream_protocol_error", "json", "emu"))
    return out


def every_split(data: bytes) -> list[list[Event]]:
    results = [run(data)]
    results += [run(data, [i]) for i in range(1, len(data))]
    results.append(run(data, list(range(1, len(data)))))  # byte by byte
    return results


def test_text_stream_every_split_same_events() -> None:
    expected = run(TEXT_STREAM)
    assert [type(e) for e in expected] == [
        RawFrame,
        Started,
        RawFrame,
        TextDelta,
        RawFrame,
        TextDelta,
        RawFrame,
        Finished,
        RawFrame,
        UsageReport,
    ]
    for got in every_split(TEXT_STREAM):
        assert got == expected


def test_raw_frames_are_the_payload_bytes_exactly() -> None:
    events = run(TEXT_STREAM)
    assert [e.data for e in events if isinstance(e, RawFrame)] == TEXT_CHUNKS
    started = [e for e in events if isinstance(e, Started)]
    assert started == [Started("emu", "gpt-x-2025", "chatcmpl-R1")]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello \u00e9 \u2713"
    assert [e for e in events if isinstance(e, Finished)] == [Finished("stop")]
    assert [e for e in events if isinstance(e, UsageReport)] == [UsageReport(20, 9, reasoning=2, cached=4)]


def test_crlf_framing_same_events() -> None:
    crlf = sse(TEXT_CHUNKS, sep=b"\r\n")
    expected = run(TEXT_STREAM)
    for got in every_split(crlf):
        assert got == expected


def test_done_emits_no_raw_frame_and_nothing_after_it_is_read() -> None:
    data = TEXT_STREAM + b"data: " + TEXT_CHUNKS[1] + b"\n\n"
    events = run(data)
    assert events == run(TEXT_STREAM)
    assert not any(isinstance(e, RawFrame) and b"[DONE]" in e.data for e in events)


def test_eof_without_done_is_a_failure_never_stop() -> None:
    data = sse(TEXT_CHUNKS, done=False)
    for got in every_split(data):
        assert isinstance(got[-1], Failed) and got[-1].code == "upstream_error"
        assert "[DONE]" in got[-1].message


def test_done_without_finish_reason_finishes_stop_which_the_upstream_did_not_say() -> None:
    data = sse([chunk({"content": "a"})])
    events = run(data)
    assert events[-1] == Finished("stop", said=False)  # a replay shows no finish_reason (gateway/cache.py)
    assert run(sse([chunk({"content": "a"}), chunk({}, "stop")]))[-1] == Finished("stop")


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_reasoning_variants_normalised(field: str) -> None:
    data = sse(
        [chunk({"role": "assistant", field: "think "}), chunk({field: "more"}), chunk({"content": "ok"}, "stop")]
    )
    expected = run(data)
    assert [e for e in expected if isinstance(e, ReasoningDelta)] == [ReasoningDelta("think "), ReasoningDelta("more")]
    assert [e.text for e in expected if isinstance(e, TextDelta)] == ["ok"]
    raw = [e.data for e in expected if isinstance(e, RawFrame)]
    assert all(field.encode() in r for r in raw[:2])  # forwarded as named
    for got in every_split(data):
        assert got == expected


def test_reasoning_details_with_signature_and_encrypted_not_double_counted() -> None:
    data = sse(
        [
            chunk(
                {
                    "reasoning": "Thinking.",
                    "reasoning_details": [
                        {"type": "reasoning.text", "text": "Thinking.", "signature": "s1", "index": 0}
                    ],
                }
            ),
            chunk({"reasoning_details": [{"type": "reasoning.encrypted", "data": "b3BhcXVl", "index": 1}]}),
            chunk({"reasoning_details": [{"type": "reasoning.summary", "summary": "Sum.", "index": 2}]}),
            chunk({}, "stop"),
        ]
    )
    reasoning = [e for e in run(data) if isinstance(e, ReasoningDelta)]
    assert reasoning == [
        ReasoningDelta("Thinking.", "text", "s1", None, 0),
        ReasoningDelta("", "encrypted", None, "b3BhcXVl", 1),
        ReasoningDelta("Sum.", "summary", None, None, 2),
    ]


def test_parallel_tool_calls() -> None:
    fn_a = {"name": "lookup", "arguments": ""}
    data = sse(
        [
            chunk(
                {
                    "role": "assistant",
                    "tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": fn_a}],
                }
            ),
            chunk({"tool_calls": [{"index": 1, "id": "call_b", "type": "function", "function": {"name": "clock"}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"q":'}}]}),
            chunk({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"x"}'}}]}),
            chunk({}, "tool_calls"),
        ]
    )
    expected = run(data)
    calls = [e for e in expected if isinstance(e, ToolCallDelta)]
    assert calls == [
        ToolCallDelta(0, "", "call_a", "lookup"),
        ToolCallDelta(1, "", "call_b", "clock"),
        ToolCallDelta(0, '{"q":'),
        ToolCallDelta(1, "{}"),
        ToolCallDelta(0, '"x"}'),
    ]
    assert Finished("tool_calls") in expected
    for got in every_split(data):
        assert got == expected


@pytest.mark.parametrize("first", [True, False])
def test_in_band_error_chunk_is_a_failure_without_raw_frame(first: bool) -> None:
    err = b'{"error":{"message":"The server is overloaded","type":"server_error","param":null,"code":null}}'
    payloads = [err] if first else [TEXT_CHUNKS[0], TEXT_CHUNKS[1], err]
    data = sse(payloads, done=False)
    for got in every_split(data):
        failed = got[-1]
        assert isinstance(failed, Failed) and failed.code == "upstream_error"
        assert "overloaded" in failed.message
        assert not any(isinstance(e, RawFrame) and b'"error"' in e.data for e in got)


def test_null_error_is_not_an_error() -> None:
    data = sse([chunk({"content": "a"})[:-1] + b',"error":null}'])
    assert not any(isinstance(e, Failed) for e in run(data))


def test_invalid_json_is_a_protocol_error() -> None:
    data = sse([TEXT_CHUNKS[0], b'{"id": "x", "choices": [{"delta"'])
    for got in every_split(data):
        assert isinstance(got[-1], Failed) and got[-1].code == "upstream_protocol_error"
        assert [e.data for e in got if isinstance(e, RawFrame)] == [TEXT_CHUNKS[0]]
    with pytest.raises(ValueError):
        OpenAIDecoder("emu", "m").feed(b"data: nope\n\n")


def test_oversize_line_raises_protocol_error() -> None:
    d = OpenAIDecoder("emu", "m")
    d.feed(b"data: " + TEXT_CHUNKS[0] + b"\n\n")
    with pytest.raises(SSEProtocolError):
        for _ in range(80):
            d.feed(b"A" * 65536)


def test_oversize_line_after_whole_chunks_in_one_read_keeps_them() -> None:
    """The chunks before an over-cap line in the same read go out before the failure."""
    over = b"data: " + b"A" * (4 * 1024 * 1024 + 16)
    got = OpenAIDecoder("emu", "m").feed(sse(TEXT_CHUNKS[:2], done=False) + over)
    assert [e.data for e in got if isinstance(e, RawFrame)] == TEXT_CHUNKS[:2]
    assert [e.text for e in got if isinstance(e, TextDelta)] == ["Hel"]
    assert isinstance(got[-1], Failed) and got[-1].code == "upstream_protocol_error"
    assert "exceeds" in got[-1].message and got[-1].provider == "emu"
    done_first = OpenAIDecoder("emu", "m").feed(sse(TEXT_CHUNKS[:1]) + over)  # nothing after [DONE] is read
    assert not any(isinstance(e, Failed) for e in done_first) and isinstance(done_first[-1], Finished)


def test_multi_line_data_is_reserialised_on_one_line() -> None:
    events = run(b'data: {"id":"c","model":"m",\ndata: "choices":[]}\n\ndata: [DONE]\n\n')
    raw = [e.data for e in events if isinstance(e, RawFrame)]
    assert raw == [b'{"id":"c","model":"m","choices":[]}']


def test_sanitize_strips_keys_and_caps() -> None:
    text = sanitize("Incorrect API key provided: sk-proj-abcdef1234567890. Bearer xyz123\n" + "z" * 500, "sk-proj")
    assert "abcdef1234567890" not in text and "xyz123" not in text and "\n" not in text
    assert len(text) <= 300


# ---- request building and error mapping ------------------------------------------------------------
def adapter(**kw: Any) -> OpenAIAdapter:
    cfg = ProviderConfig(name="emu", kind="openai", base_url="http://up.example/v1", **kw)
    return OpenAIAdapter(cfg)


def request(body: dict[str, Any]) -> GenerationRequest:
    return GenerationRequest(
        model=body["model"],
        messages=body["messages"],
        stream=bool(body.get("stream")),
        stream_options=body.get("stream_options"),
        raw_body=body,
    )


BASE = {"model": "public/m", "messages": [{"role": "user", "content": "hi"}]}


def build(a: OpenAIAdapter, body: dict[str, Any]) -> tuple[str, dict[str, str], dict[str, Any]]:
    req = asyncio.run(a.build_request(request(body), "served-m"))
    return req.url, req.headers, orjson.loads(req.body)


def test_body_passthrough_and_include_usage_injected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMU_KEY", "sk-secret-1")
    url, headers, body = build(
        adapter(api_key_env="EMU_KEY", headers={"x-org": "o1"}), {**BASE, "logit_bias": {"5": 1}, "x_vendor": [1]}
    )
    assert url == "http://up.example/v1/chat/completions"
    assert headers["authorization"] == "Bearer sk-secret-1" and headers["x-org"] == "o1"
    assert body == {**BASE, "model": "served-m", "logit_bias": {"5": 1}, "x_vendor": [1], "stream": True,
                    "stream_options": {"include_usage": True}}  # fmt: skip


@pytest.mark.parametrize(
    "opts", [{"include_usage": False}, {}, {"include_usage": True, "continuous_usage_stats": True}]
)
def test_client_stream_options_win(opts: dict[str, Any]) -> None:
    _, headers, body = build(adapter(), {**BASE, "stream": True, "stream_options": opts})
    assert body["stream_options"] == opts and body["stream"] is True
    assert "authorization" not in headers


def test_no_key_env_set_means_no_auth(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EMU_KEY_UNSET", raising=False)
    _, headers, _ = build(adapter(api_key_env="EMU_KEY_UNSET"), BASE)
    assert "authorization" not in headers


def test_map_error_openai_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMU_KEY", "sk-live-key-0123456789")
    a = adapter(api_key_env="EMU_KEY")
    body = (
        b'{"error":{"message":"Incorrect API key provided: sk-live-key-0123456789.",'
        b'"type":"invalid_request_error","code":"invalid_api_key"}}'
    )
    f = a.map_error(401, {}, body)
    assert f.retriable and f.status == 401 and "sk-live" not in f.message and "Incorrect API key" in f.message
    f = a.map_error(429, {"retry-after": "7"}, b'{"error":{"message":"slow down","type":"rate_limit_error"}}')
    assert f.retriable and f.retry_after == 7.0 and "slow down" in f.message
    assert a.map_error(429, {"retry-after-ms": "1500"}, b"").retry_after == 1.5
    f = a.map_error(400, {}, b'{"error":{"message":"bad field","type":"invalid_request_error"}}')
    assert not f.retriable and f.code == "invalid_request"
    for status in (403, 408, 500, 502, 503):
        assert a.map_error(status, {}, b"<html>oops</html>").retriable
    assert "html" not in a.map_error(502, {}, b"<html>oops</html>").message
    assert not a.map_error(404, {}, b'{"detail":"no such model"}').retriable
    assert "no such model" in a.map_error(404, {}, b'{"detail":"no such model"}').message


def run_per_event(data: bytes) -> list[Event]:
    """One read per SSE event (a paced upstream): each read is one whole `data:` event."""
    reads = [part + b"\n\n" for part in data.split(b"\n\n") if part]
    return run(data, list(itertools.accumulate(len(r) for r in reads))[:-1])


def test_one_event_per_read_gives_the_same_events_as_one_read() -> None:
    """The per-read fast path (`SSEDecoder.whole_data_payloads`, JSON from the bytes) against the general
    path: the same events, the same raw bytes."""
    assert run_per_event(TEXT_STREAM) == run(TEXT_STREAM)
    d = OpenAIDecoder("emu", "served")
    for payload in TEXT_CHUNKS:
        events = d.feed(b"data: " + payload + b"\n\n")
        assert isinstance(events[0], RawFrame) and events[0].data == payload
    tools = sse([chunk({"tool_calls": [{"index": 0, "id": "t", "function": {"name": "f", "arguments": "{"}}]})])
    assert run_per_event(tools) == run(tools)


def byte_by_byte(data: bytes) -> list[Event]:
    """The general path alone: no read is ever whole events."""
    return run(data, list(range(1, len(data))))


def plain(events: list[Event]) -> list[Event]:
    """(A bad chunk alone in its read raises for the transport to map; after others it is a `Failed`:
    the messages differ by that, nothing else does.)"""
    return [Failed(e.code, "", e.provider) if isinstance(e, Failed) else e for e in events]


@pytest.mark.parametrize(
    "data",
    [
        TEXT_STREAM,
        sse(TEXT_CHUNKS, done=False),  # ends without [DONE]: a failure
        sse([chunk({"tool_calls": [{"index": 0, "id": "t", "function": {"name": "f", "arguments": "{"}}]})]),
        sse([TEXT_CHUNKS[1], b'{"error":{"message":"overloaded","type":"server_error"}}', TEXT_CHUNKS[2]]),
        sse(TEXT_CHUNKS[:2]) + b"data: after the end\n\n",  # nothing after [DONE] is read
        sse([TEXT_CHUNKS[0], b"[1, 2]", TEXT_CHUNKS[1]]),  # JSON, not an object
        sse([TEXT_CHUNKS[0], b'{"id": "c", "choices": [', TEXT_CHUNKS[1]]),  # not JSON
        sse([TEXT_CHUNKS[0], b'{"id":"c","choices":[{"index":0,"delta":{"content":"a\xff"}}]}']),  # not UTF-8
        sse([TEXT_CHUNKS[0], b"  " + TEXT_CHUNKS[1]]),  # JSON after spaces
        b"data: [DONE]\n\n",
    ],
)
def test_a_read_of_several_events_gives_what_the_general_path_gives(data: bytes) -> None:
    """One read of whole events (`SSEDecoder.whole_data_payloads`, JSON from the bytes) against the same
    bytes fed one at a time: the same events, the same raw bytes."""
    assert SSEDecoder().whole_data_payloads(data) is not None
    assert plain(run(data)) == plain(byte_by_byte(data))


@pytest.mark.parametrize("first", [True, False])
def test_one_event_per_read_error_chunk_fails_without_raw_frame(first: bool) -> None:
    err = b'{"error":{"message":"The server is overloaded","type":"server_error"}}'
    data = sse([err] if first else [TEXT_CHUNKS[1], err], done=False)
    got = run_per_event(data)
    assert got == run(data)
    assert isinstance(got[-1], Failed) and "overloaded" in got[-1].message
    assert not any(isinstance(e, RawFrame) and b'"error"' in e.data for e in got)


@pytest.mark.parametrize(
    "payload",
    [
        b'{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"a\xff"}}]}',  # not UTF-8
        b"[1, 2]",  # JSON, not an object
        b'{"id": "c", "choices": [',  # not JSON
        b"  " + TEXT_CHUNKS[1],  # JSON after spaces
    ],
)
def test_one_event_per_read_odd_payloads_decode_as_in_one_read(payload: bytes) -> None:
    data = sse([TEXT_CHUNKS[0], payload])
    assert plain(run_per_event(data)) == plain(run(data))
