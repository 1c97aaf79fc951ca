"""End to end: a real tidegate server → the Anthropic-family emulator (anthropic, bedrock, vertex kinds),
driven with the official `openai` SDK and raw SSE reads."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest

from tests.emulators.anthropic_upstream import (
    REDACTED_DATA,
    SIGNATURE,
    THINKING_TEXT,
    AnthropicFamilyEmulator,
    Recorded,
)
from tests.support.process import ServerProcess, running_server, sqlite_url
from tests.support.streams import SSEResult, stream_sse

KINDS = {
    "anthropic/claude": ("anthropic", "claude"),
    "bedrock/claude": ("bedrock", "claude-bedrock"),
    "vertex/claude": ("vertex", "claude-vertex"),
}
CHAT = "/v1/chat/completions"
ARN_MODEL = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.claude-emu"
TOOLS = [
    {
        "type": "function",
        "function": {"name": "lookup", "description": "Look a thing up", "parameters": {"type": "object"}},
    },
    {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}},
]


def config(workdir: Path, emu: AnthropicFamilyEmulator) -> str:
    return f"""
[server]
host = "127.0.0.1"
[store]
url = "{sqlite_url(workdir)}"
[providers.claude]
kind = "anthropic"
base_url = "{emu.base_url}"
api_key_env = "EMU_ANTHROPIC_KEY"
[providers.claude-slow]
kind = "anthropic"
base_url = "{emu.base_url}"
api_key_env = "EMU_ANTHROPIC_KEY"
upstream_idle_timeout_s = 1
[providers.claude-bedrock]
kind = "bedrock"
region = "{emu.region}"
endpoint_url = "{emu.base_url}"
[providers.claude-vertex]
kind = "vertex"
region = "us-east5"
project = "{emu.vertex_project}"
base_url = "{emu.base_url}/v1"
access_token_env = "EMU_VERTEX_TOKEN"
[models."anthropic/claude"]
routes = [{{ provider = "claude", model = "claude-emu" }}]
pricing = {{ prompt = 3.0, completion = 15.0, cache_read = 0.3, cache_write = 3.75 }}
[models."bedrock/claude"]
routes = [{{ provider = "claude-bedrock", model = "anthropic.claude-emu-v1:0" }}]
pricing = {{ prompt = 3.0, completion = 15.0, cache_read = 0.3, cache_write = 3.75 }}
[models."vertex/claude"]
routes = [{{ provider = "claude-vertex", model = "claude-emu@20250101" }}]
pricing = {{ prompt = 3.0, completion = 15.0, cache_read = 0.3, cache_write = 3.75 }}
[models."fallback/anthropic"]
routes = [{{ provider = "claude", model = "claude-emu--429" }},
          {{ provider = "claude-bedrock", model = "anthropic.claude-emu-v1:0" }}]
[models."fallback/bedrock"]
routes = [{{ provider = "claude-bedrock", model = "anthropic.claude-emu--429" }},
          {{ provider = "claude-vertex", model = "claude-emu@20250101" }}]
[models."fallback/vertex"]
routes = [{{ provider = "claude-vertex", model = "claude-emu--google429" }},
          {{ provider = "claude", model = "claude-emu" }}]
[models."fallback/overloaded"]
routes = [{{ provider = "claude", model = "claude-emu--529" }},
          {{ provider = "claude-vertex", model = "claude-emu--529" }}]
[models."slow/claude"]
routes = [{{ provider = "claude-slow", model = "claude-emu" }}]
[models."bedrock/arn"]
routes = [{{ provider = "claude-bedrock", model = "{ARN_MODEL}" }}]
"""


@pytest.fixture(scope="module")
def emulator() -> Iterator[AnthropicFamilyEmulator]:
    emu = AnthropicFamilyEmulator().start()
    yield emu
    emu.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, emulator: AnthropicFamilyEmulator) -> Iterator[ServerProcess]:
    workdir = tmp_path_factory.mktemp("anthropic-family")
    assert emulator.aws.token is not None
    env = {
        "EMU_ANTHROPIC_KEY": emulator.api_key,
        "EMU_VERTEX_TOKEN": emulator.vertex_token,
        "AWS_ACCESS_KEY_ID": emulator.aws.access_key,
        "AWS_SECRET_ACCESS_KEY": emulator.aws.secret_key,
        "AWS_SESSION_TOKEN": emulator.aws.token,
        "AWS_CONFIG_FILE": str(workdir / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(workdir / "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    with running_server(workdir, config(workdir, emulator), extra_env=env) as srv:
        yield srv
    log = srv.log()
    for secret in (emulator.api_key, emulator.vertex_token, emulator.aws.secret_key, emulator.aws.token):
        assert secret not in log


def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.key, max_retries=0)


def marker() -> str:
    return f"req-{uuid.uuid4().hex[:12]}"


def received(emu: AnthropicFamilyEmulator, mark: str) -> Recorded:
    found = [r for r in emu.requests if mark in r.body.__repr__()]
    assert len(found) == 1, f"expected one upstream request with {mark}, got {len(found)}"
    return found[0]


def sse(server: ServerProcess, model: str, messages: list[dict[str, Any]], **extra: Any) -> SSEResult:
    body = {"model": model, "stream": True, "messages": messages, **extra}
    return stream_sse(server.base_url + CHAT, body, server.headers)


def deltas(result: SSEResult) -> list[dict[str, Any]]:
    return [c["choices"][0]["delta"] for c in result.json_events() if c.get("choices")]


@pytest.mark.parametrize("model", sorted(KINDS))
def test_text_stream_and_usage(server: ServerProcess, emulator: AnthropicFamilyEmulator, model: str) -> None:
    mark = marker()
    messages: list[Any] = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"hi {mark}"}]
    text, finish, usage = [], None, None
    with client(server).chat.completions.create(
        model=model, messages=messages, stream=True, max_tokens=64, temperature=0.5
    ) as stream:
        for chunk in stream:
            assert chunk.model == model
            if chunk.usage:
                usage = chunk.usage
            if chunk.choices:
                text.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
    assert "".join(text) == "Hello from the emulator."
    assert finish == "stop"
    assert usage is not None
    # prompt = input 42 + cache read 10 + cache creation 5; completion replaced (1 → 12), never added
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (57, 12, 69)
    assert usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens == 10
    dialect = KINDS[model][0]
    rec = received(emulator, mark)
    assert rec.dialect == dialect
    assert rec.body["system"] == [{"type": "text", "text": "Be brief."}]
    assert rec.body["max_tokens"] == 64 and rec.body["temperature"] == 0.5
    assert rec.body["messages"] == [{"role": "user", "content": [{"type": "text", "text": f"hi {mark}"}]}]


@pytest.mark.parametrize("model", sorted(KINDS))
def test_prompt_cache_markers_pass_through_and_cache_tokens_are_priced(
    server: ServerProcess, emulator: AnthropicFamilyEmulator, model: str
) -> None:
    """`cache_control` on parts and tools reaches every Anthropic kind as sent; cache reads and
    writes come back in `prompt_tokens_details` and the record prices each at its own rate."""
    mark = marker()
    ephemeral, hour = {"type": "ephemeral"}, {"type": "ephemeral", "ttl": "1h"}
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "A long policy.", "cache_control": ephemeral}]},
        {"role": "user", "content": [{"type": "text", "text": f"hi {mark}", "cache_control": hour}]},
    ]
    tools = [{**TOOLS[0], "cache_control": ephemeral}]
    r = sse(server, model, messages, tools=tools, stream_options={"include_usage": True})
    assert r.done
    usage = [c["usage"] for c in r.json_events() if c.get("usage")][-1]
    assert usage["prompt_tokens"] == 57
    assert usage["prompt_tokens_details"] == {"cached_tokens": 10, "cache_write_tokens": 5}
    rec = received(emulator, mark)
    assert rec.body["system"] == [{"type": "text", "text": "A long policy.", "cache_control": ephemeral}]
    assert rec.body["messages"][0]["content"] == [{"type": "text", "text": f"hi {mark}", "cache_control": hour}]
    assert rec.body["tools"][0]["cache_control"] == ephemeral
    record = httpx.get(f"{server.base_url}/api/v1/generations/{r.headers['x-generation-id']}", headers=server.headers)
    stored = record.json()
    assert stored["usage"]["cached_tokens"] == 10 and stored["usage"]["cache_write_tokens"] == 5
    # 42 uncached at 3.0, 10 read at 0.3, 5 written at 3.75, 12 out at 15.0 (USD per million)
    assert stored["cost"] == pytest.approx((42 * 3.0 + 10 * 0.3 + 5 * 3.75 + 12 * 15.0) / 1e6)
    bad = [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "forever"}}]}]
    refused = httpx.post(server.base_url + CHAT, json={"model": model, "messages": bad}, headers=server.headers)
    assert refused.status_code == 400 and "messages[0].content[0].cache_control" in refused.json()["error"]["message"]


@pytest.mark.parametrize("model", sorted(KINDS))
def test_headers_ids_and_done(server: ServerProcess, model: str) -> None:
    r = sse(server, model, [{"role": "user", "content": "hello"}])
    assert r.status == 200 and r.done
    assert r.headers["x-provider"] == KINDS[model][1]
    assert r.headers["x-provider-attempts"] == "1"
    gid = r.headers["x-generation-id"]
    chunks = r.json_events()
    assert all(c["id"] == f"chatcmpl-{gid}" for c in chunks)
    roles = [d.get("role") for d in deltas(r)]
    assert roles[0] == "assistant" and roles.count("assistant") == 1
    assert [e.id for e in r.events] == [str(i) for i in range(len(r.events))]


@pytest.mark.parametrize("model", sorted(KINDS))
def test_reasoning_before_content(server: ServerProcess, model: str) -> None:
    r = sse(server, model, [{"role": "user", "content": "2+2? [[thinking]]"}], reasoning_effort="low")
    assert r.status == 200 and r.done
    ds = deltas(r)
    reasoning = "".join(d.get("reasoning") or "" for d in ds)
    content = "".join(d.get("content") or "" for d in ds)
    assert reasoning == "".join(THINKING_TEXT)
    assert content == "The answer is 4."
    assert THINKING_TEXT[0] not in content
    first_content = next(i for i, d in enumerate(ds) if d.get("content"))
    last_reasoning = max(i for i, d in enumerate(ds) if d.get("reasoning_details"))
    assert last_reasoning < first_content
    details = [x for d in ds for x in d.get("reasoning_details") or []]
    assert all(x["type"] == "reasoning.text" and x["index"] == 0 for x in details)
    assert [x.get("signature") for x in details if x.get("signature")] == [SIGNATURE]
    usage = r.json_events()[-1]["usage"]
    assert usage["completion_tokens"] == 40 and usage["prompt_tokens"] == 30


@pytest.mark.parametrize("model", sorted(KINDS))
def test_redacted_thinking_is_encrypted_detail(server: ServerProcess, model: str) -> None:
    r = sse(server, model, [{"role": "user", "content": "[[redacted]]"}])
    assert r.done
    details = [x for d in deltas(r) for x in d.get("reasoning_details") or []]
    assert details == [{"type": "reasoning.encrypted", "data": REDACTED_DATA, "index": 0}]
    assert "".join(d.get("content") or "" for d in deltas(r)) == "Done."


@pytest.mark.parametrize("model", sorted(KINDS))
def test_parallel_tool_calls_accumulate(server: ServerProcess, emulator: AnthropicFamilyEmulator, model: str) -> None:
    mark = marker()
    messages: list[Any] = [{"role": "user", "content": f"look up paris [[tools]] {mark}"}]
    with client(server).chat.completions.stream(
        model=model, messages=messages, tools=TOOLS, tool_choice="required"
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert [(c.id, c.function.name, c.function.arguments) for c in calls] == [  # type: ignore[union-attr]
        ("toolu_emu_A", "lookup", '{"q": "paris"}'),
        ("toolu_emu_B", "weather", '{"city": "Paris", "days": 2}'),
    ]
    assert choice.message.content == "Let me check."
    rec = received(emulator, mark)
    assert rec.body["tools"][0] == {
        "name": "lookup",
        "description": "Look a thing up",
        "input_schema": {"type": "object"},
    }
    assert rec.body["tool_choice"] == {"type": "any"}


def test_tool_call_indexes_are_zero_based(server: ServerProcess) -> None:
    r = sse(server, "anthropic/claude", [{"role": "user", "content": "[[tools]]"}], tools=TOOLS)
    calls = [c for d in deltas(r) for c in d.get("tool_calls") or []]
    firsts = [c for c in calls if "id" in c]
    assert [(c["index"], c["id"], c["type"]) for c in firsts] == [
        (0, "toolu_emu_A", "function"),
        (1, "toolu_emu_B", "function"),
    ]
    assert all(set(c) == {"index", "function"} and set(c["function"]) == {"arguments"} for c in calls if "id" not in c)
    finishes = [c["choices"][0]["finish_reason"] for c in r.json_events() if c["choices"]]
    assert finishes[-1] == "tool_calls"


@pytest.mark.parametrize("model", sorted(KINDS))
def test_tool_loop_continuation(server: ServerProcess, emulator: AnthropicFamilyEmulator, model: str) -> None:
    mark = marker()
    messages: list[Any] = [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "toolu_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Paris"}'}},
                {"id": "toolu_2", "type": "function", "function": {"name": "lookup", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": f"sunny {mark}"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "nothing"},
    ]
    completion = client(server).chat.completions.create(model=model, messages=messages, tools=TOOLS)
    assert completion.choices[0].message.content == "Hello from the emulator."
    rec = received(emulator, mark)
    assert rec.body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_2", "name": "lookup", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": f"sunny {mark}"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "nothing"},
            ],
        },
    ]


@pytest.mark.parametrize("model", sorted(KINDS))
def test_reasoning_details_replay(server: ServerProcess, emulator: AnthropicFamilyEmulator, model: str) -> None:
    first = sse(server, model, [{"role": "user", "content": "2+2? [[thinking]]"}], reasoning_effort="low")
    details = [x for d in deltas(first) for x in d.get("reasoning_details") or []]
    content = "".join(d.get("content") or "" for d in deltas(first))
    mark = marker()
    messages: list[Any] = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": content, "reasoning_details": details},
        {"role": "user", "content": f"and 3+3? {mark}"},
    ]
    r = sse(server, model, messages, reasoning_effort="low")
    assert r.done
    rec = received(emulator, mark)
    assert rec.body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert rec.body["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "".join(THINKING_TEXT), "signature": SIGNATURE},
        {"type": "text", "text": "The answer is 4."},
    ]


CITY_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("model", sorted(KINDS))
@pytest.mark.parametrize(
    "response_format",
    [
        {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY_SCHEMA, "strict": True}},
        {"type": "json_object"},
    ],
    ids=["json_schema", "json_object"],
)
def test_response_format_is_a_forced_tool_and_the_answer_is_the_content(
    server: ServerProcess, emulator: AnthropicFamilyEmulator, model: str, response_format: dict[str, Any]
) -> None:
    """docs/api-edges.md §15: translated, not dropped. The upstream receives one tool with the client's schema and
    a tool_choice forcing it; the client gets the tool's input as the message content, finish `stop`,
    streamed and not."""
    mark = marker()
    messages: list[Any] = [{"role": "user", "content": f"the largest city of France {mark}"}]
    sdk = client(server)
    streamed = ""
    with sdk.chat.completions.stream(model=model, messages=messages, response_format=response_format) as stream:
        for event in stream:
            if event.type == "content.delta":
                streamed += event.delta
        final = stream.get_final_completion()
    assert orjson.loads(streamed) == {"city": "Paris", "population": 2102650}
    choice = final.choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    rec = received(emulator, mark)
    schema = response_format.get("json_schema", {}).get("schema", {"type": "object"})
    assert rec.body["tools"] == [
        {"name": "json_answer", "description": rec.body["tools"][0]["description"], "input_schema": schema}
    ]
    assert rec.body["tool_choice"] == {"type": "tool", "name": "json_answer"}
    whole = sdk.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "again"}], response_format=response_format
    )
    assert orjson.loads(whole.choices[0].message.content or "") == {"city": "Paris", "population": 2102650}
    assert whole.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("model", sorted(KINDS))
def test_non_stream_completion(server: ServerProcess, model: str) -> None:
    completion = client(server).chat.completions.create(
        model=model, messages=[{"role": "user", "content": "[[thinking]]"}], reasoning_effort="low"
    )
    message = completion.choices[0].message
    assert message.content == "The answer is 4."
    extra = message.model_extra or {}
    assert extra["reasoning"] == "".join(THINKING_TEXT)
    assert extra["reasoning_details"][0]["signature"] == SIGNATURE
    assert completion.usage is not None and completion.usage.completion_tokens == 40
    assert completion.choices[0].finish_reason == "stop"


def assert_failure_chunk(r: SSEResult, code: str, provider: str, partial: str = "Partial answer") -> dict[str, Any]:
    assert r.status == 200
    assert not r.done and all(e.data != "[DONE]" for e in r.events)
    last = r.json_events()[-1]
    assert last["error"]["code"] == code, last
    assert last["provider"] == provider
    assert last["choices"][0]["finish_reason"] == "error"
    finishes = [c["choices"][0]["finish_reason"] for c in r.json_events() if c.get("choices")]
    assert "stop" not in finishes
    text = "".join(d.get("content") or "" for d in deltas(r))
    assert text == partial
    return dict(last["error"])


@pytest.mark.parametrize("model", sorted(KINDS))
def test_error_mid_stream_is_failure_chunk(server: ServerProcess, model: str) -> None:
    r = sse(server, model, [{"role": "user", "content": "[[error]]"}])
    error = assert_failure_chunk(r, "upstream_error", KINDS[model][1])
    assert "overloaded_error" in error["message"]


def test_error_mid_stream_raises_in_openai_sdk(server: ServerProcess) -> None:
    text = []
    with pytest.raises(openai.APIError, match="overloaded_error"):
        for chunk in client(server).chat.completions.create(
            model="anthropic/claude", messages=[{"role": "user", "content": "[[error]]"}], stream=True
        ):
            if chunk.choices:
                text.append(chunk.choices[0].delta.content or "")
    assert "".join(text) == "Partial answer"


@pytest.mark.parametrize("model", sorted(KINDS))
@pytest.mark.parametrize("scenario", ["truncated", "drop"])
def test_truncated_stream_is_failure_not_stop(server: ServerProcess, model: str, scenario: str) -> None:
    r = sse(server, model, [{"role": "user", "content": f"[[{scenario}]]"}])
    assert_failure_chunk(r, "upstream_error", KINDS[model][1])


def test_bedrock_exception_frame_mid_stream(server: ServerProcess) -> None:
    r = sse(server, "bedrock/claude", [{"role": "user", "content": "[[exception]]"}])
    error = assert_failure_chunk(r, "upstream_error", "claude-bedrock")
    assert "throttlingException" in error["message"]


def test_bedrock_bad_crc_is_protocol_error(server: ServerProcess) -> None:
    r = sse(server, "bedrock/claude", [{"role": "user", "content": "[[badcrc]]"}])
    error = assert_failure_chunk(r, "upstream_protocol_error", "claude-bedrock")
    assert "checksum" in error["message"]


@pytest.mark.parametrize("model", sorted(KINDS))
def test_undecodable_event_keeps_the_events_read_with_it(server: ServerProcess, model: str) -> None:
    """The text delta " answer" and an event that is not JSON arrive in one socket write: the text
    still reaches the client, and the record, before the failure chunk (the decoders used to drop
    the whole read)."""
    r = sse(server, model, [{"role": "user", "content": "[[joinedbad]]"}])
    error = assert_failure_chunk(r, "upstream_protocol_error", KINDS[model][1], partial="Partial answer")
    assert error["message"].startswith("undecodable upstream data")
    rec = httpx.get(
        f"{server.base_url}/api/v1/generations/{r.headers['x-generation-id']}", headers=server.headers
    ).json()
    assert rec["status"] == "failed" and rec["output_text"] == "Partial answer"


def test_bedrock_model_arn_path_is_signed_as_sent(server: ServerProcess, emulator: AnthropicFamilyEmulator) -> None:
    mark = marker()
    r = sse(server, "bedrock/arn", [{"role": "user", "content": mark}])
    assert r.status == 200 and r.done, r.raw[:300]
    rec = received(emulator, mark)
    assert rec.model == ARN_MODEL
    assert "%2F" in rec.path
    assert rec.headers["X-Amz-Security-Token"] == emulator.aws.token


@pytest.mark.parametrize(
    ("model", "failed", "served"),
    [
        ("fallback/anthropic", "claude", "claude-bedrock"),
        ("fallback/bedrock", "claude-bedrock", "claude-vertex"),
        ("fallback/vertex", "claude-vertex", "claude"),
    ],
)
def test_429_before_stream_falls_back(server: ServerProcess, model: str, failed: str, served: str) -> None:
    r = sse(server, model, [{"role": "user", "content": "hello"}])
    assert r.status == 200 and r.done
    assert r.headers["x-provider"] == served
    assert r.headers["x-provider-attempts"] == "2"
    assert "".join(d.get("content") or "" for d in deltas(r)) == "Hello from the emulator."


def test_every_route_overloaded_is_an_error_before_the_stream(server: ServerProcess) -> None:
    r = sse(server, "fallback/overloaded", [{"role": "user", "content": "hello"}])
    assert r.status == 502
    assert r.headers["x-provider-attempts"] == "2"


def test_bad_request_is_400_and_names_the_field(server: ServerProcess) -> None:
    bad = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x/y.png"}}]}]
    r = sse(server, "anthropic/claude", bad)
    assert r.status == 400
    assert b"image_url.url" in r.raw


def test_stalled_upstream_is_a_timeout_failure(server: ServerProcess) -> None:
    r = sse(server, "slow/claude", [{"role": "user", "content": "[[stall]]"}])
    assert_failure_chunk(r, "upstream_timeout", "claude-slow")


def test_emulator_verifies_sigv4(emulator: AnthropicFamilyEmulator) -> None:
    """The emulator's signature check is real: only a request signed over the bytes sent passes."""
    url = f"{emulator.base_url}/model/anthropic.claude-emu-v1:0/invoke-with-response-stream"
    body = orjson.dumps(
        {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
    )

    def signed(data: bytes, service: str = "bedrock") -> dict[str, str]:
        aws = AWSRequest(method="POST", url=url, data=data, headers={"content-type": "application/json"})
        SigV4Auth(emulator.aws, service, emulator.region).add_auth(aws)
        return dict(aws.headers.items())

    assert httpx.post(url, content=body, headers=signed(body)).status_code == 200
    tampered = httpx.post(url, content=body + b" ", headers=signed(body))
    assert tampered.status_code == 403 and b"signature" in tampered.content
    assert httpx.post(url, content=body, headers=signed(body, "bedrock-runtime")).status_code == 403
    assert httpx.post(url, content=body, headers={"content-type": "application/json"}).status_code == 403
    with_model = orjson.dumps({**orjson.loads(body), "model": "x"})
    assert httpx.post(url, content=with_model, headers=signed(with_model)).status_code == 400


@pytest.mark.parametrize("model", list(KINDS))
def test_a_field_the_kind_cannot_honour_is_refused_never_dropped(
    server: ServerProcess, emulator: AnthropicFamilyEmulator, model: str
) -> None:
    """docs/api-edges.md §15: 400 `unsupported_parameter` naming the field and the provider, before anything
    reaches the upstream; a field sent with the value that asks for nothing is not a use of it."""
    provider = KINDS[model][1]
    before = len(emulator.requests)
    scalar_schema = {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "integer"}}}
    for field, value, extra in (
        ("seed", 7, {}),
        ("logprobs", True, {}),
        ("frequency_penalty", 0.5, {}),
        ("store", True, {}),
        # response_format is a forced tool here: not beside the client's tools, thinking, or a non-object root
        ("response_format", {"type": "json_object"}, {"tools": TOOLS}),
        ("response_format", {"type": "json_object"}, {"reasoning_effort": "low"}),
        ("response_format", scalar_schema, {}),
    ):
        body = {"model": model, "messages": [{"role": "user", "content": "hello"}], field: value, **extra}
        r = httpx.post(server.base_url + CHAT, json=body, headers=server.headers, timeout=30)
        assert r.status_code == 400, (field, r.text)
        error = r.json()["error"]
        assert error["code"] == "unsupported_parameter" and f"'{field}'" in error["message"]
        assert repr(provider) in error["message"]
    assert len(emulator.requests) == before  # refused before any upstream request
    neutral = {
        "model": model,
        "messages": [{"role": "user", "content": "hello"}],
        "seed": None,
        "logprobs": False,
        "n": 1,
        "response_format": {"type": "text"},
        "frequency_penalty": 0,
        "temperature": 0.5,
    }
    mark = marker()
    neutral["messages"] = [{"role": "user", "content": mark}]
    ok = httpx.post(server.base_url + CHAT, json=neutral, headers=server.headers, timeout=30)
    assert ok.status_code == 200, ok.text
    assert received(emulator, mark).body["temperature"] == 0.5  # translated, and it arrived
