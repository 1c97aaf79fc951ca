"""Bedrock: eventstream bytes → canonical events (every split), frames checked with botocore, SigV4
request building, error mapping."""

from __future__ import annotations

import base64
import re
import struct
import zlib
from pathlib import Path

import orjson
import pytest
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer

from tests.emulators.anthropic_upstream import (
    BADJSON,
    JOINED,
    PAUSE,
    bedrock_bytes,
    bedrock_chunk,
    bedrock_stream,
    eventstream_frame,
    scenario_events,
)
from tests.unit.providers.test_anthropic_decoder import (
    FIXTURES,
    MODEL,
    NO_STOP,
    REDACTED,
    TEXT,
    THINKING,
    TOOLS,
    P,
    check_every_split,
    partial,
)
from tidegate.config.model import ProviderConfig
from tidegate.events import Event, Failed
from tidegate.providers.aws.bedrock import BedrockAdapter, BedrockStreamDecoder, bedrock_failure
from tidegate.request import GenerationRequest

CASES: dict[str, list[Event]] = {
    "text": TEXT,
    "metrics": TEXT,  # Bedrock's amazon-bedrock-invocationMetrics on message_stop is ignored
    "thinking": THINKING,
    "redacted": REDACTED,
    "tools": TOOLS,
    "truncated": [*partial("truncated"), NO_STOP],
    "cut": [*TEXT[:4], NO_STOP],  # the last frame (message_stop) never completes
    "exception": [
        *partial("exception"),
        Failed("upstream_error", "throttlingException: Too many tokens, please wait.", P),
    ],
    "badcrc": [*partial("badcrc"), Failed("upstream_protocol_error", "bedrock eventstream checksum mismatch", P)],
}


def factory() -> BedrockStreamDecoder:
    return BedrockStreamDecoder(P, "anthropic.route-model-v1:0")


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixture_every_split(name: str) -> None:
    data = (FIXTURES / "bedrock" / f"{name}.bin").read_bytes()
    check_every_split(factory, data, CASES[name])


def test_every_fixture_has_a_case() -> None:
    assert {p.stem for p in (FIXTURES / "bedrock").glob("*.bin")} == set(CASES)


def test_frame_layout_matches_upstreams_doc() -> None:
    """UPSTREAMS §2: a text_delta chunk frame begins 00 00 00 d7 | 00 00 00 4b | bf f9 e4 38 | 0b ":event-type"..."""
    frame = bedrock_chunk({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}})
    assert frame[:12] == bytes.fromhex("000000d7 0000004b bff9e438")
    assert frame[12:32] == b"\x0b:event-type\x07\x00\x05chunk"
    total, headers_len = struct.unpack("!II", frame[:8])
    assert total == len(frame) and headers_len == 0x4B
    assert struct.unpack("!I", frame[-4:])[0] == zlib.crc32(frame[:-4])


def test_botocore_decodes_every_emulator_frame() -> None:
    events = [e for e in scenario_events("tools", MODEL) if e[0] != PAUSE]
    buf = EventStreamBuffer()
    buf.add_data(bedrock_stream(events))
    decoded = []
    for message in buf:
        assert message.headers == {
            ":event-type": "chunk",
            ":content-type": "application/json",
            ":message-type": "event",
        }
        decoded.append(orjson.loads(base64.b64decode(orjson.loads(message.payload)["bytes"])))
    assert decoded == [data for _, data in events]


def test_corrupt_crc_is_rejected_by_botocore() -> None:
    frame = eventstream_frame([(":message-type", "event")], b"{}", corrupt_crc=True)
    buf = EventStreamBuffer()
    buf.add_data(frame)
    with pytest.raises(ChecksumMismatch):
        list(buf)


def test_error_message_frame() -> None:
    frame = eventstream_frame(
        [(":message-type", "error"), (":error-code", "InternalFailure"), (":error-message", "it broke")], b""
    )
    assert factory().feed(frame) == [Failed("upstream_error", "InternalFailure: it broke", P)]


def test_validation_exception_is_not_retriable() -> None:
    frame = eventstream_frame(
        [(":exception-type", "validationException"), (":message-type", "exception")], b'{"message":"bad input"}'
    )
    assert factory().feed(frame) == [Failed("upstream_error", "validationException: bad input", P, False)]


def test_bad_chunk_payload_is_protocol_error() -> None:
    frame = eventstream_frame([(":event-type", "chunk"), (":message-type", "event")], b'{"bytes":"%%%"}')
    [failed] = factory().feed(frame)
    assert isinstance(failed, Failed) and failed.code == "upstream_protocol_error"


def test_chunk_bytes_that_are_not_json_keep_the_frames_read_before_them() -> None:
    """A checksummed chunk whose bytes do not decode, in one read after good frames: the frames'
    events are kept, then the failure (the transport would otherwise fail the whole read)."""
    events = scenario_events("joinedbad", MODEL)
    joined = next(i for i, (name, _) in enumerate(events) if name == JOINED)
    data = b"".join(bedrock_bytes(n, d) for n, d in events[:joined] if n != PAUSE)
    data += bedrock_bytes(*events[joined])
    got = factory().feed(data)
    assert got[:-1] == partial("joinedbad")
    assert isinstance(got[-1], Failed) and got[-1].code == "upstream_protocol_error"
    assert got[-1].message.startswith("undecodable upstream data")
    [alone] = factory().feed(bedrock_bytes(BADJSON, {}))  # first in its read: the same failure
    assert isinstance(alone, Failed) and alone.message == got[-1].message


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDUNIT")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "unit-secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "unit-session-token")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


async def test_build_request_signs_with_sigv4(aws_env: None) -> None:
    adapter = BedrockAdapter(ProviderConfig(name="b", kind="bedrock", region="eu-central-1"))
    model = "arn:aws:bedrock:eu-central-1:123456789012:inference-profile/eu.anthropic.claude-x-v1:0"
    req = await adapter.build_request(
        GenerationRequest(model="pub", messages=[{"role": "user", "content": "hi"}], stream=True), model
    )
    assert req.url == (
        "https://bedrock-runtime.eu-central-1.amazonaws.com/model/"
        "arn:aws:bedrock:eu-central-1:123456789012:inference-profile%2Feu.anthropic.claude-x-v1:0"
        "/invoke-with-response-stream"
    )
    body = orjson.loads(req.body)
    assert "model" not in body and "stream" not in body
    assert body["anthropic_version"] == "bedrock-2023-05-31"
    assert req.sign is not None
    req.sign(req)
    auth = req.headers["Authorization"]
    match = re.match(
        r"AWS4-HMAC-SHA256 Credential=AKIDUNIT/(\d{8})/eu-central-1/bedrock/aws4_request, "
        r"SignedHeaders=([a-z;-]+), Signature=[0-9a-f]{64}$",
        auth,
    )
    assert match, auth
    assert set(match.group(2).split(";")) >= {"host", "x-amz-date", "x-amz-security-token", "content-type"}
    assert req.headers["X-Amz-Security-Token"] == "unit-session-token"
    assert req.headers["X-Amz-Date"].startswith(match.group(1))
    assert "unit-secret" not in repr(req.headers)


async def test_endpoint_override_and_bearer_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BEDROCK_KEY", "bedrock-api-key")
    adapter = BedrockAdapter(
        ProviderConfig(
            name="b", kind="bedrock", region="us-east-1", endpoint_url="http://127.0.0.1:1", api_key_env="BEDROCK_KEY"
        )
    )
    req = await adapter.build_request(GenerationRequest(model="p", messages=[{"role": "user", "content": "x"}]), "m:0")
    assert req.url == "http://127.0.0.1:1/model/m:0/invoke-with-response-stream"
    assert req.headers["authorization"] == "Bearer bedrock-api-key" and req.sign is None


def test_http_error_mapping() -> None:
    throttled = bedrock_failure(
        429,
        {"x-amzn-errortype": "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"},
        b'{"message":"Too many requests"}',
        "b",
    )
    assert throttled.retriable and throttled.status == 429
    assert throttled.message == "b answered HTTP 429 (ThrottlingException: Too many requests)"
    invalid = bedrock_failure(400, {"x-amzn-errortype": "ValidationException"}, b'{"message":"bad"}', "b")
    assert not invalid.retriable and invalid.code == "invalid_request"
    assert bedrock_failure(403, {}, b'{"Message":"denied"}', "b").retriable
    assert bedrock_failure(503, {"retry-after": "3"}, b"", "b").retry_after == 3.0
