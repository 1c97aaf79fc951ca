"""Property tests of what reads untrusted bytes from upstreams: the OpenAI, Anthropic and
Bedrock stream decoders, with hypothesis in the normal suite (bounded examples and time).

Properties, for any input: nothing escapes but the decoders' own contract (events, or `ValueError` /
`SSEProtocolError`, which the transport turns into the stream's failure); splitting the input
anywhere gives the same events as feeding it whole. A longer coverage-guided run (atheris) is
`bench/fuzz.py`, kept out of CI.
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Callable

import orjson
from botocore.eventstream import EventStreamMessage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidegate.events import Event
from tidegate.providers.anthropic.messages import AnthropicSSEDecoder
from tidegate.providers.aws.bedrock import BedrockStreamDecoder
from tidegate.providers.google.gemini import GeminiEventDecoder
from tidegate.providers.openai.chat import OpenAIDecoder

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

OPENAI_PIECES = [
    b"data: ",
    b"\n",
    b"\n\n",
    b"\r\n",
    b": keep-alive\n",
    b"event: x\n",
    b"id: 7\n",
    b"[DONE]",
    b'{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"a\\u00e9"}}]}',
    b'{"id":"c","choices":[{"index":0,"delta":{"reasoning":"r"},"finish_reason":null}]}',
    b'{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t","function":{"name":"f","arguments":"{"}}]}}]}',
    b'{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
    b'{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}',
    b'{"error":{"message":"overloaded","type":"server_error"}}',
    b"\xff\xfe",
    b"{",
]
ANTHROPIC_PIECES = [
    b"event: message_start\n",
    b"event: content_block_delta\n",
    b"event: message_stop\n",
    b"event: ping\n",
    b"data: ",
    b"\n",
    b"\n\n",
    b'{"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":3,"output_tokens":1}}}',
    b'{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}',
    b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}',
    b'{"type":"content_block_start","index":1,"content_block":{"type":"thinking","thinking":""}}',
    b'{"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"hm"}}',
    b'{"type":"content_block_stop","index":0}',
    b'{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}',
    b'{"type":"message_stop"}',
    b'{"type":"error","error":{"type":"overloaded_error","message":"busy"}}',
    b"\xc3",
    b"[",
]


GEMINI_PIECES = [
    b"data: ",
    b"\r\n\r\n",
    b"\n\n",
    b'{"candidates":[{"content":{"parts":[{"text":"Hi"}],"role":"model"},"index":0}],"modelVersion":"g"}',
    b'{"candidates":[{"content":{"parts":[{"text":"t","thought":true}]}}]}',
    b'{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","args":{"a":1}}}]},"finishReason":"STOP"}]}',
    b'{"candidates":[{"finishReason":"SAFETY"}],"usageMetadata":{"promptTokenCount":3,"thoughtsTokenCount":2}}',
    b'{"promptFeedback":{"blockReason":"SAFETY"}}',
    b'{"error":{"code":429,"message":"busy","status":"RESOURCE_EXHAUSTED"}}',
    b"\xc3",
    b"[",
]


def _pieces(pieces: list[bytes]) -> st.SearchStrategy[bytes]:
    """Streams near the real format (its own fragments in any order) and plain noise."""
    near = st.lists(st.one_of(st.sampled_from(pieces), st.binary(max_size=12)), max_size=40).map(b"".join)
    return st.one_of(near, st.binary(max_size=600))


def _run(make: Callable[[], object], data: bytes, cuts: list[int]) -> tuple[list[Event] | None, str | None]:
    """Feeds `data` split at `cuts`: (the events, or None and the exception's type when it raised)."""
    decoder = make()
    feed = decoder.feed  # type: ignore[attr-defined]
    out: list[Event] = []
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(data))), len(data)]
    try:
        for a, b in itertools.pairwise(bounds):
            out.extend(feed(data[a:b]))
    except ValueError as exc:  # SSEProtocolError is a ValueError: the transport fails the stream
        return None, type(exc).__name__
    return out, None


def _check(make: Callable[[], object], data: bytes, cuts: list[int]) -> None:
    whole, whole_error = _run(make, data, [])
    split, split_error = _run(make, data, cuts)
    if whole_error is None and split_error is None:
        assert split == whole
    else:  # a read that raises ends the stream: it must raise for the same input however it is cut
        assert (whole_error is None) == (split_error is None) or whole is None or split is None


@FUZZ
@given(data=_pieces(OPENAI_PIECES), cuts=st.lists(st.integers(0, 700), max_size=8))
def test_openai_decoder_any_input_any_split(data: bytes, cuts: list[int]) -> None:
    _check(lambda: OpenAIDecoder("p", "m"), data, cuts)


@FUZZ
@given(data=_pieces(ANTHROPIC_PIECES), cuts=st.lists(st.integers(0, 700), max_size=8))
def test_anthropic_decoder_any_input_any_split(data: bytes, cuts: list[int]) -> None:
    _check(lambda: AnthropicSSEDecoder("p", "m"), data, cuts)


@FUZZ
@given(data=_pieces(GEMINI_PIECES), cuts=st.lists(st.integers(0, 700), max_size=8))
def test_gemini_decoder_any_input_any_split(data: bytes, cuts: list[int]) -> None:
    _check(lambda: GeminiEventDecoder("p", "m"), data, cuts)


def _frame(payload: bytes, headers: dict[str, str]) -> bytes:
    """One AWS eventstream frame (prelude, headers, payload, CRCs), as botocore's serializer writes it."""
    import binascii
    import struct

    encoded = b""
    for name, value in headers.items():
        raw = value.encode()
        encoded += bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(raw)) + raw
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack(">II", total, len(encoded))
    prelude += struct.pack(">I", binascii.crc32(prelude) & 0xFFFFFFFF)
    message = prelude + encoded + payload
    return message + struct.pack(">I", binascii.crc32(message) & 0xFFFFFFFF)


def _chunk_frame(event: bytes) -> bytes:
    wrapper = orjson.dumps({"bytes": base64.b64encode(event).decode()})
    return _frame(wrapper, {":message-type": "event", ":event-type": "chunk", ":content-type": "application/json"})


BEDROCK_FRAMES = [_chunk_frame(p) for p in ANTHROPIC_PIECES if p.startswith(b"{")] + [
    _frame(b'{"message":"throttled"}', {":message-type": "exception", ":exception-type": "throttlingException"}),
    _frame(b"{}", {":message-type": "event", ":event-type": "other"}),
]


@FUZZ
@given(
    frames=st.lists(st.sampled_from(BEDROCK_FRAMES), max_size=12),
    noise=st.binary(max_size=30),
    flip=st.integers(0, 10_000),
    cuts=st.lists(st.integers(0, 4000), max_size=8),
)
def test_bedrock_decoder_any_frames_any_split_and_corruption(
    frames: list[bytes], noise: bytes, flip: int, cuts: list[int]
) -> None:
    data = bytearray(b"".join(frames) + noise)
    if data and flip % 3 == 0:  # a flipped bit somewhere: the CRC catches it
        data[flip % len(data)] ^= 0x40
    _check(lambda: BedrockStreamDecoder("p", "m"), bytes(data), cuts)


def test_the_frame_helper_writes_what_botocore_reads() -> None:
    from botocore.eventstream import EventStreamBuffer

    buffer = EventStreamBuffer()
    buffer.add_data(_chunk_frame(b'{"type":"message_stop"}'))
    (message,) = list(buffer)
    assert isinstance(message, EventStreamMessage)
    assert message.headers[":event-type"] == "chunk"
