"""`/v1/messages` (the Anthropic Messages API door, docs/agents.md) against a real `tidegate serve` and
real upstream emulators, read by the official `anthropic` SDK: an Anthropic route (passthrough: the
body and headers as sent, the events untouched) and an OpenAI-compatible chat route (translated)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import orjson
import pytest

from tests.emulators.anthropic_upstream import SIGNATURE, THINKING_TEXT, AnthropicFamilyEmulator, scenario_events
from tests.emulators.openai_upstream import OpenAIUpstream
from tests.support.process import ServerProcess, running_server, sqlite_url
from tests.support.streams import stream_sse
from tidegate.ids import is_ulid
from tidegate.providers.fidelity import MESSAGES_NOTES
from tidegate.server.doors.messages.request import BETAS_ACCEPTED

MESSAGES = "/v1/messages"
HEADERS = {"anthropic-version": "2023-06-01"}
CLAUDE_CODE_BETAS = (
    "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,"
    "mid-conversation-tool-changes-2026-07-01,thinking-token-count-2026-05-13,advanced-tool-use-2025-11-20,"
    "effort-2025-11-24"
)


@pytest.fixture(scope="module")
def claude() -> Iterator[AnthropicFamilyEmulator]:
    emulator = AnthropicFamilyEmulator().start()
    yield emulator
    emulator.stop()


@pytest.fixture(scope="module")
def chat() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream() as upstream:
        yield upstream


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, claude: AnthropicFamilyEmulator, chat: OpenAIUpstream
) -> Iterator[ServerProcess]:
    workdir = tmp_path_factory.mktemp("messages-door")
    config = f"""
[server]
host = "127.0.0.1"
keepalive_s = 0.3
[store]
url = "{sqlite_url(workdir)}"
[providers.claude]
kind = "anthropic"
base_url = "{claude.base_url}"
api_key_env = "EMU_ANTHROPIC_KEY"
[providers.chat]
kind = "openai"
base_url = "{chat.base_url}"
[providers.claude-bedrock]
kind = "bedrock"
region = "{claude.region}"
endpoint_url = "{claude.base_url}"
[providers.claude-vertex]
kind = "vertex"
region = "us-east5"
project = "{claude.vertex_project}"
base_url = "{claude.base_url}/v1"
access_token_env = "EMU_VERTEX_TOKEN"
[models."bedrock"]
routes = [{{ provider = "claude-bedrock", model = "anthropic.claude-emu-v1:0" }}]
[models."vertex"]
routes = [{{ provider = "claude-vertex", model = "claude-emu@20250101" }}]
[models."claude"]
routes = [{{ provider = "claude", model = "claude-emu" }}]
pricing = {{ prompt = 1.0, completion = 2.0 }}
[models."gpt"]
routes = [{{ provider = "chat", model = "text" }}]
[models."gpt-tools"]
routes = [{{ provider = "chat", model = "tools" }}]
[models."gpt-parallel"]
routes = [{{ provider = "chat", model = "parallel-tools" }}]
[models."gpt-reasoning"]
routes = [{{ provider = "chat", model = "reasoning_details" }}]
[models."gpt-breaks"]
routes = [{{ provider = "chat", model = "error-mid" }}]
[models."gpt-slow"]
routes = [{{ provider = "chat", model = "late-text:1.2" }}]
[models."fallback"]
routes = [{{ provider = "claude", model = "claude-emu--500" }}, {{ provider = "chat", model = "text" }}]
"""
    assert claude.aws.token is not None
    env = {
        "EMU_ANTHROPIC_KEY": claude.api_key,
        "EMU_VERTEX_TOKEN": claude.vertex_token,
        "AWS_ACCESS_KEY_ID": claude.aws.access_key,
        "AWS_SECRET_ACCESS_KEY": claude.aws.secret_key,
        "AWS_SESSION_TOKEN": claude.aws.token,
        "AWS_CONFIG_FILE": str(workdir / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(workdir / "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    with running_server(workdir, config, extra_env=env) as proc:
        yield proc


def sdk(server: ServerProcess, **kw: Any) -> anthropic.Anthropic:
    """The official client as Anthropic's users configure it: base URL and key (sent as x-api-key)."""
    return anthropic.Anthropic(base_url=server.base_url, api_key=server.key, max_retries=0, **kw)


def hello(text: str = "Hi") -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


# ---- an Anthropic route: passthrough -------------------------------------------------------------


def test_sdk_create_on_anthropic_route(server: ServerProcess, claude: AnthropicFamilyEmulator) -> None:
    raw = sdk(server).messages.with_raw_response.create(model="claude", max_tokens=64, messages=hello())
    message = raw.parse()
    assert is_ulid(raw.headers["x-generation-id"]) and raw.headers["x-provider"] == "claude"
    assert raw.headers["x-served-model"] == "claude-emu"
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == "Hello from the emulator." and message.stop_reason == "end_turn"
    assert message.id == "msg_emu_text" and message.model == "claude"
    usage = message.usage
    assert (usage.input_tokens, usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (42, 10, 5)
    assert usage.output_tokens == 12
    sent = claude.last("anthropic")
    assert sent.body == {"model": "claude-emu", "max_tokens": 64, "messages": hello(), "stream": True}
    record = httpx.get(
        f"{server.base_url}/api/v1/generations/{raw.headers['x-generation-id']}", headers=server.headers
    ).json()
    assert record["status"] == "completed" and record["output_text"] == "Hello from the emulator."
    assert record["usage"]["prompt_tokens"] == 57 and record["usage"]["cached_tokens"] == 10


def test_passthrough_stream_is_the_upstreams_bytes(server: ServerProcess, claude: AnthropicFamilyEmulator) -> None:
    body = {
        "model": "claude",
        "max_tokens": 64,
        "stream": True,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}]}
        ],
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "metadata": {"user_id": "session-1"},
        "context_management": {
            "edits": [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}]
        },
        "top_k": 5,
    }
    headers = {**HEADERS, "anthropic-beta": CLAUDE_CODE_BETAS + ",context-1m-2025-08-07", "x-api-key": server.key}
    r = stream_sse(server.base_url + MESSAGES + "?beta=true", body, headers)
    assert r.status == 200 and r.headers["x-provider"] == "claude"
    upstream = [orjson.dumps(data).decode() for _, data in scenario_events("text", "claude-emu")]
    assert [e.data for e in r.events] == upstream  # every event's data as the upstream wrote it
    assert [e.event for e in r.events] == [orjson.loads(d)["type"] for d in upstream]
    assert [e.id for e in r.events] == [str(i) for i in range(len(r.events))]
    sent = claude.last("anthropic")
    assert sent.body == {**body, "model": "claude-emu"}  # as sent: cache_control, top_k, context_management
    assert sent.headers["anthropic-beta"] == headers["anthropic-beta"]
    assert sent.headers["anthropic-version"] == "2023-06-01"


def test_sdk_stream_thinking_and_round_trip(server: ServerProcess, claude: AnthropicFamilyEmulator) -> None:
    client = sdk(server)
    thinking = {"type": "enabled", "budget_tokens": 2048}
    with client.messages.stream(
        model="claude", max_tokens=4096, thinking=thinking, messages=hello("[[thinking]]")
    ) as s:
        events = list(s)
        final = s.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text"]
    block = final.content[0]
    assert block.type == "thinking" and block.thinking == "".join(THINKING_TEXT) and block.signature == SIGNATURE
    assert any(e.type == "thinking" for e in events) and any(e.type == "signature" for e in events)
    replay = [*hello("[[thinking]]"), final.to_param(), {"role": "user", "content": "Go on"}]
    client.messages.create(model="claude", max_tokens=4096, thinking=thinking, messages=replay)
    assert claude.last("anthropic").body["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "".join(THINKING_TEXT),
        "signature": SIGNATURE,
    }


def test_sdk_stream_tool_use_on_anthropic_route(server: ServerProcess) -> None:
    tools = [{"name": "lookup", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}]
    with sdk(server).messages.stream(model="claude", max_tokens=64, tools=tools, messages=hello("[[tools]]")) as s:
        final = s.get_final_message()
    calls = [b for b in final.content if b.type == "tool_use"]
    assert [(c.id, c.name, c.input) for c in calls] == [
        ("toolu_emu_A", "lookup", {"q": "paris"}),
        ("toolu_emu_B", "weather", {"city": "Paris", "days": 2}),
    ]
    assert final.stop_reason == "tool_use"


def test_mid_stream_error_on_anthropic_route(server: ServerProcess) -> None:
    r = stream_sse(
        server.base_url + MESSAGES,
        {"model": "claude", "max_tokens": 9, "stream": True, "messages": hello("[[error]]")},
        {**HEADERS, "x-api-key": server.key},
    )
    assert r.status == 200
    names = [e.event for e in r.events]
    assert names[-1] == "error" and "message_stop" not in names
    assert orjson.loads(r.events[-1].data)["error"]["type"] == "overloaded_error"
    with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
        with sdk(server).messages.stream(model="claude", max_tokens=9, messages=hello("[[error]]")) as s:
            list(s)


# ---- an OpenAI-compatible route: translated -------------------------------------------------------


def test_sdk_create_and_stream_on_chat_route(server: ServerProcess, chat: OpenAIUpstream) -> None:
    client = sdk(server)
    raw = client.messages.with_raw_response.create(
        model="gpt", max_tokens=64, system="Be brief.", messages=hello(), metadata={"user_id": "u-1"}
    )
    message = raw.parse()
    gid = raw.headers["x-generation-id"]
    assert raw.headers["x-provider"] == "chat" and message.id == f"msg_{gid}"
    assert message.content[0].type == "text" and message.content[0].text == "Hello, world \u00e9\u2713!"
    assert message.stop_reason == "end_turn" and message.usage.output_tokens > 0
    sent = chat.last("text").body
    assert sent["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert sent["max_tokens"] == 64 and sent["user"] == "u-1"
    with client.messages.stream(model="gpt", max_tokens=64, messages=hello()) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == "Hello, world \u00e9\u2713!" and final.content[0].text == text
    assert final.usage.input_tokens > 0 and final.usage.output_tokens > 0


def test_translated_stream_frames(server: ServerProcess) -> None:
    r = stream_sse(
        server.base_url + MESSAGES,
        {"model": "gpt", "max_tokens": 9, "stream": True, "messages": hello()},
        {**HEADERS, "Authorization": f"Bearer {server.key}"},
    )
    assert r.status == 200 and r.comments == 0
    names = [e.event for e in r.events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert names[1] == "content_block_start" and "content_block_stop" in names
    assert [e.id for e in r.events] == [str(i) for i in range(len(r.events))]
    for block in r.raw.split(b"\n\n")[:-1]:
        assert [x.split(b":")[0] for x in block.split(b"\n")] == [b"id", b"event", b"data"]
    delta = orjson.loads(r.events[-2].data)
    assert delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert set(delta["usage"]) == {
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    }


def test_tool_use_on_chat_route_round_trips(server: ServerProcess, chat: OpenAIUpstream) -> None:
    tools = [
        {"name": "lookup", "description": "Look up", "input_schema": {"type": "object"}},
        {"name": "clock", "input_schema": {"type": "object"}},
    ]
    client = sdk(server)
    with client.messages.stream(model="gpt-tools", max_tokens=64, tools=tools, messages=hello()) as s:
        final = s.get_final_message()
    calls = [(b.id, b.name, b.input) for b in final.content if b.type == "tool_use"]
    assert calls == [("call_a", "lookup", {"q": "paris"}), ("call_b", "clock", {"tz": "UTC"})]
    assert final.stop_reason == "tool_use"
    sent = chat.last("tools").body
    assert sent["tools"][0] == {
        "type": "function",
        "function": {"name": "lookup", "parameters": {"type": "object"}, "description": "Look up"},
    }
    results = [
        {"type": "tool_result", "tool_use_id": "call_a", "content": "Paris"},
        {"type": "tool_result", "tool_use_id": "call_b", "content": [{"type": "text", "text": "noon"}]},
    ]
    convo = [*hello(), final.to_param(), {"role": "user", "content": [*results, {"type": "text", "text": "and?"}]}]
    client.messages.create(model="gpt", max_tokens=64, tools=tools, tool_choice={"type": "any"}, messages=convo)
    sent = chat.last("text").body
    assert sent["tool_choice"] == "required"
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "tool", "tool", "user"]
    assert sent["messages"][1]["tool_calls"][0] == {
        "id": "call_a",
        "type": "function",
        "function": {"name": "lookup", "arguments": '{"q":"paris"}'},
    }
    assert sent["messages"][2] == {"role": "tool", "tool_call_id": "call_a", "content": "Paris"}


def test_interleaved_parallel_calls_become_sequential_blocks(server: ServerProcess) -> None:
    with sdk(server).messages.stream(model="gpt-parallel", max_tokens=64, messages=hello()) as s:
        events = list(s)
        final = s.get_final_message()
    assert [b.type for b in final.content] == ["text", "tool_use", "tool_use"]
    assert [(b.name, b.input) for b in final.content[1:]] == [
        ("lookup", {"q": "paris"}),
        ("weather", {"city": "Paris", "days": 2}),
    ]
    starts = [e.index for e in events if e.type == "content_block_start"]
    assert starts == [0, 1, 2]


def test_reasoning_on_chat_route_is_thinking(server: ServerProcess, chat: OpenAIUpstream) -> None:
    client = sdk(server)
    with client.messages.stream(model="gpt-reasoning", max_tokens=64, messages=hello()) as s:
        final = s.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "redacted_thinking", "text"]
    assert final.content[0].thinking == "Thinking." and final.content[0].signature == "sig-abc"
    assert final.content[1].data == "b3BhcXVl"
    convo = [*hello(), final.to_param(), {"role": "user", "content": "more"}]
    client.messages.create(model="gpt", max_tokens=64, messages=convo)
    assert chat.last("text").body["messages"][1]["reasoning_details"] == [
        {"type": "reasoning.text", "text": "Thinking.", "signature": "sig-abc", "index": 0},
        {"type": "reasoning.encrypted", "data": "b3BhcXVl", "index": 1},
    ]


def test_mid_stream_failure_on_chat_route(server: ServerProcess) -> None:
    r = stream_sse(
        server.base_url + MESSAGES,
        {"model": "gpt-breaks", "max_tokens": 9, "stream": True, "messages": hello()},
        {**HEADERS, "x-api-key": server.key},
    )
    names = [e.event for e in r.events]
    assert r.status == 200 and names[0] == "message_start" and names[-1] == "error"
    assert "message_stop" not in names
    assert orjson.loads(r.events[-1].data) == {
        "type": "error",
        "error": {"type": "api_error", "message": orjson.loads(r.events[-1].data)["error"]["message"]},
    }


def test_keepalives_are_ping_events(server: ServerProcess) -> None:
    r = stream_sse(
        server.base_url + MESSAGES,
        {"model": "gpt-slow", "max_tokens": 9, "stream": True, "messages": hello()},
        {**HEADERS, "x-api-key": server.key},
    )
    names = [e.event for e in r.events]
    assert r.status == 200 and r.comments == 0
    assert names[0] == "message_start" and names[1] == "ping" and names[-1] == "message_stop"
    assert [e.id for e in r.events] == [str(i) for i in range(len(r.events))]
    with sdk(server).messages.stream(model="gpt-slow", max_tokens=9, messages=hello()) as s:
        assert "".join(s.text_stream) == "Hello, world \u00e9\u2713!"


def test_fallback_before_the_first_byte(server: ServerProcess) -> None:
    raw = sdk(server).messages.with_raw_response.create(model="fallback", max_tokens=9, messages=hello())
    assert raw.headers["x-provider"] == "chat" and raw.headers["x-provider-attempts"] == "2"
    assert raw.parse().content[0].text == "Hello, world \u00e9\u2713!"


# ---- fidelity: what a translated route refuses, and what it never does -----------------------------


@pytest.mark.parametrize(
    ("extra", "headers", "named"),
    [
        ({"context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}}, {}, "context_management"),
        ({"top_k": 5}, {}, "top_k"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, {}, "tools[0].type"),
        ({}, {"anthropic-beta": "context-1m-2025-08-07"}, "anthropic-beta: context-1m-2025-08-07"),
    ],
)
def test_what_a_chat_route_cannot_honour_is_refused_by_name(
    server: ServerProcess, extra: dict[str, Any], headers: dict[str, str], named: str
) -> None:
    body = {"model": "gpt", "max_tokens": 9, "messages": hello(), **extra}
    r = httpx.post(server.base_url + MESSAGES, json=body, headers={**HEADERS, **headers, "x-api-key": server.key})
    assert r.status_code == 400 and is_ulid(r.headers["x-generation-id"])
    error = r.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert error["error"]["code"] == "unsupported_parameter" and f"'{named}'" in error["error"]["message"]


def test_claude_code_fields_are_accepted_on_a_chat_route(server: ServerProcess, chat: OpenAIUpstream) -> None:
    body = {
        "model": "gpt",
        "max_tokens": 32000,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}]}
        ],
        "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
        "metadata": {"user_id": '{"session_id":"abc"}'},
        "thinking": {"type": "adaptive", "display": "omitted"},
        "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "tools": [
            {"name": "Read", "input_schema": {"type": "object"}},
            {"name": "Deferred", "input_schema": {"type": "object"}, "defer_loading": True},
        ],
    }
    headers = {**HEADERS, "anthropic-beta": CLAUDE_CODE_BETAS, "x-api-key": server.key}
    r = httpx.post(server.base_url + MESSAGES + "?beta=true", json=body, headers=headers)
    assert r.status_code == 200, r.text
    sent = chat.last("text").body
    assert [t["function"]["name"] for t in sent["tools"]] == ["Read"]  # a deferred tool is not loaded
    assert sent["reasoning_effort"] == "high" and sent["user"] == '{"session_id":"abc"}'


# ---- errors, auth, count_tokens, models, idempotency --------------------------------------------------


def test_errors_in_anthropic_shape(server: ServerProcess) -> None:
    with pytest.raises(anthropic.AuthenticationError) as unauthorized:
        anthropic.Anthropic(base_url=server.base_url, api_key="tg-wrong", max_retries=0).messages.create(
            model="gpt", max_tokens=9, messages=hello()
        )
    assert unauthorized.value.body == {
        "type": "error",
        "error": {
            "type": "authentication_error",
            "message": unauthorized.value.body["error"]["message"],
            "code": "unauthorized",
        },
    }  # type: ignore[index]
    assert is_ulid(unauthorized.value.response.headers["x-generation-id"])
    with pytest.raises(anthropic.NotFoundError):
        sdk(server).messages.create(model="no-such-model", max_tokens=9, messages=hello())
    r = httpx.post(
        server.base_url + MESSAGES,
        json={"model": "gpt", "messages": hello()},
        headers={**HEADERS, "x-api-key": server.key},
    )
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in r.json()["error"]["message"]


def test_count_tokens(server: ServerProcess) -> None:
    client = sdk(server)
    small = client.messages.count_tokens(model="gpt", messages=hello())
    big = client.messages.count_tokens(
        model="claude",
        system="Be brief. " * 50,
        messages=hello("Hello there " * 100),
        tools=[{"name": "x", "input_schema": {"type": "object"}}],
    )
    assert 0 < small.input_tokens < big.input_tokens
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="no-such-model", messages=hello())


def test_models_list_in_anthropic_shape(server: ServerProcess) -> None:
    page = sdk(server).models.list()
    ids = [m.id for m in page.data]
    assert "claude" in ids and "gpt" in ids and all(m.type == "model" for m in page.data)
    plain = httpx.get(server.base_url + "/v1/models", headers=server.headers).json()
    assert plain["object"] == "list"  # without anthropic-version: the OpenAI shape


def test_idempotent_replay_resends_the_stream(server: ServerProcess) -> None:
    headers = {**HEADERS, "x-api-key": server.key, "Idempotency-Key": f"msg-{uuid.uuid4()}"}
    body = {"model": "gpt", "max_tokens": 9, "stream": True, "messages": hello()}
    first = stream_sse(server.base_url + MESSAGES, body, headers)
    again = stream_sse(server.base_url + MESSAGES, body, headers)
    assert again.headers["idempotent-replayed"] == "true"
    assert [e.data for e in again.events] == [e.data for e in first.events]
    assert again.headers["x-generation-id"] == first.headers["x-generation-id"]


def test_docs_name_every_accepted_beta() -> None:
    notes = " ".join(MESSAGES_NOTES)
    assert all(f"`{prefix}*`" in notes for prefix in BETAS_ACCEPTED)
