"""`/v1/responses` against a real tidegate server and the real local model, read by the official SDK."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from tests.emulators.anthropic_upstream import REDACTED_DATA, SIGNATURE, THINKING_TEXT, AnthropicFamilyEmulator
from tests.support.process import ServerProcess, local_config, sqlite_url, start_server
from tests.support.streams import stream_sse
from tidegate.ids import is_ulid

RESPONSES = "/v1/responses"
TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def strict_client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.key, _strict_response_validation=True)


def check_sequence(events: list[Any]) -> None:
    seqs = [e.sequence_number for e in events]
    assert seqs == list(range(len(seqs)))
    assert sum(1 for e in events if e.type in TERMINAL) == 1
    assert events[-1].type in TERMINAL
    assert events[0].type == "response.created" and events[1].type == "response.in_progress"


def test_sdk_stream_parses_every_event_strictly(local_server: ServerProcess) -> None:
    client = strict_client(local_server)
    raw = client.responses.with_raw_response.create(
        model="local/smollm2", input="Say hello in five words.", stream=True, max_output_tokens=24
    )
    gid = raw.headers["x-generation-id"]
    assert is_ulid(gid) and raw.headers["x-provider"] == "local"
    events = list(raw.parse())
    check_sequence(events)
    final = events[-1]
    assert final.type in ("response.completed", "response.incomplete")
    assert final.response.id == f"resp_{gid}" and final.response.model == "local/smollm2"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text and final.response.output_text == text
    done = next(e for e in events if e.type == "response.output_text.done")
    assert done.text == text and done.item_id == f"msg_{gid}_0"
    usage = final.response.usage
    assert usage is not None and usage.output_tokens > 0 and usage.input_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    record = httpx.get(f"{local_server.base_url}/api/v1/generations/{gid}", headers=local_server.headers).json()
    assert record["status"] == "completed" and record["output_text"] == text
    assert record["usage"]["completion_tokens"] == usage.output_tokens


def test_raw_frames_carry_id_event_and_data(local_server: ServerProcess) -> None:
    r = stream_sse(
        local_server.base_url + RESPONSES,
        {"model": "local/smollm2", "input": "Hi!", "stream": True, "max_output_tokens": 6},
        local_server.headers,
    )
    assert r.status == 200 and r.headers["content-type"].startswith("text/event-stream")
    payloads = r.json_events()
    assert [e.id for e in r.events] == [str(i) for i in range(len(r.events))]
    assert [e.event for e in r.events] == [p["type"] for p in payloads]
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    for block in r.raw.split(b"\n\n")[:-1]:
        lines = block.split(b"\n")
        if lines[0].startswith(b":"):
            continue
        assert [x.split(b":")[0] for x in lines] == [b"id", b"event", b"data"]
    assert b"[DONE]" not in r.raw
    for p in payloads:
        if p["type"] == "response.output_text.delta":
            assert p["logprobs"] == []


def test_length_limit_is_response_incomplete(local_server: ServerProcess) -> None:
    client = strict_client(local_server)
    events = list(
        client.responses.create(
            model="local/smollm2", input="Write a long story about the sea.", stream=True, max_output_tokens=3
        )
    )
    check_sequence(events)
    final = events[-1]
    assert final.type == "response.incomplete"
    assert final.response.status == "incomplete"
    assert final.response.incomplete_details is not None
    assert final.response.incomplete_details.reason == "max_output_tokens"
    assert final.response.max_output_tokens == 3


def test_non_stream_response_object(local_server: ServerProcess) -> None:
    client = strict_client(local_server)
    raw = client.responses.with_raw_response.create(
        model="local/smollm2",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Name a colour."}]}],
        instructions="Answer in one word.",
        metadata={"case": "non-stream"},
        max_output_tokens=12,
    )
    response = raw.parse()
    gid = raw.headers["x-generation-id"]
    assert response.id == f"resp_{gid}" and response.object == "response"
    assert response.status in ("completed", "incomplete")
    assert response.instructions == "Answer in one word." and response.metadata == {"case": "non-stream"}
    assert response.output_text
    assert response.usage is not None and response.usage.output_tokens > 0
    assert response.output[0].type == "message" and response.output[0].id == f"msg_{gid}_0"


def test_sdk_stream_helper_yields_the_final_response(local_server: ServerProcess) -> None:
    client = strict_client(local_server)
    # temperature 0: the helper needs `response.completed`, and a sampled answer may run into the
    # token limit instead (`response.incomplete`); greedy, this prompt ends in ~24 tokens
    with client.responses.stream(
        model="local/smollm2", input="Say hi.", max_output_tokens=200, temperature=0
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.status == "completed"
    assert final.output_text == "".join(deltas)


def test_tool_loop_items_are_accepted(local_server: ServerProcess) -> None:
    # The local model has no tools; the function_call + function_call_output items still convert and run.
    client = strict_client(local_server)
    response = client.responses.create(
        model="local/smollm2",
        input=[
            {"role": "user", "content": "What is the weather in Berlin?"},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Berlin"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "12 degrees and sunny"},
        ],
        max_output_tokens=16,
    )
    assert response.status in ("completed", "incomplete") and response.output_text


@pytest.mark.parametrize(
    ("extra", "mentions"),
    [
        ({"text": {"format": {"type": "yaml"}}}, "'text.format.type'"),
        ({"include": ["everything"]}, "'include[0]'"),
        ({"tools": [{"type": "telepathy"}]}, "'tools[0].type'"),
        ({"reasoning": {"effort": "extreme"}}, "'reasoning.effort'"),
        ({"prompt_cache_key": 7}, "'prompt_cache_key'"),
    ],
)
def test_invalid_field_is_400_naming_it(local_server: ServerProcess, extra: dict[str, Any], mentions: str) -> None:
    body = {"model": "local/smollm2", "input": "x", "stream": True, **extra}
    resp = httpx.post(local_server.base_url + RESPONSES, json=body, headers=local_server.headers)
    assert resp.status_code == 400, resp.text
    assert is_ulid(resp.headers["x-generation-id"])
    err = resp.json()["error"]
    assert err["code"] == "invalid_request" and mentions in err["message"]
    client = strict_client(local_server)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(**body)


@pytest.mark.parametrize(
    ("extra", "mentions"),
    [
        ({"truncation": "auto"}, "'truncation'"),
        ({"background": True}, "'background'"),
        ({"service_tier": "priority"}, "'service_tier'"),
        ({"text": {"verbosity": "low"}}, "'text.verbosity'"),
        ({"tool_choice": {"type": "web_search"}, "tools": [{"type": "web_search"}]}, "'tool_choice'"),
        ({"input": [{"type": "compaction", "encrypted_content": "x"}]}, "'input[0].type'"),
        ({"reasoning": {"mode": "pro"}}, "'reasoning.mode'"),
        ({"made_up_field": 1}, "'made_up_field'"),
    ],
)
def test_a_field_only_the_responses_api_honours_is_refused_by_name(
    local_server: ServerProcess, extra: dict[str, Any], mentions: str
) -> None:
    # honoured only by a route that speaks the Responses API (docs/agents.md); the local route does not
    body = {"model": "local/smollm2", "input": "x", "stream": True, **extra}
    resp = httpx.post(local_server.base_url + RESPONSES, json=body, headers=local_server.headers)
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["code"] == "unsupported_parameter" and mentions in err["message"], err
    assert "'local'" in err["message"]


def test_a_hosted_tool_is_left_out_by_default_and_named(local_server: ServerProcess) -> None:
    # what Codex sends on every request: the local route cannot run it, and leaves it out (drop_hosted_tools)
    body = {"model": "local/smollm2", "input": "Hi!", "max_output_tokens": 4, "tools": [{"type": "web_search"}]}
    resp = httpx.post(local_server.base_url + RESPONSES, json=body, headers=local_server.headers, timeout=120)
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-tidegate-dropped"] == "web_search"
    assert resp.json()["status"] in ("completed", "incomplete")


def test_hints_are_accepted_on_every_route(local_server: ServerProcess) -> None:
    # what Codex CLI sends besides its input and tools; none of it can change the answer (docs/api-edges.md §17)
    response = strict_client(local_server).responses.create(
        model="local/smollm2",
        input="Hi!",
        max_output_tokens=6,
        prompt_cache_key="thread-1",
        safety_identifier="user-hash",
        user="someone",
        metadata={"team": "a"},
        store=False,
        service_tier="auto",
        include=["reasoning.encrypted_content", "message.output_text.logprobs"],
        reasoning={"summary": "auto"},
        parallel_tool_calls=True,
        truncation="disabled",
        text={"format": {"type": "text"}, "verbosity": "medium"},
        extra_body={"client_metadata": {"session_id": "s-1"}, "prompt_cache_retention": "24h"},
    )
    assert response.status in ("completed", "incomplete") and response.output_text
    assert response.metadata == {"team": "a"}
    assert response.text is not None and response.text.format.type == "text"


def test_unknown_model_and_auth(local_server: ServerProcess) -> None:
    resp = httpx.post(
        local_server.base_url + RESPONSES, json={"model": "no/such", "input": "x"}, headers=local_server.headers
    )
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "model_not_found"
    assert (
        httpx.post(local_server.base_url + RESPONSES, json={"model": "local/smollm2", "input": "x"}).status_code == 401
    )


def test_failure_after_commit_is_response_failed(tmp_path: Path) -> None:
    # Keep-alives commit the response long before the cold model loads; the idle timeout then fires.
    server = start_server(tmp_path, local_config(tmp_path, "keepalive_s = 0.002\nupstream_idle_timeout_s = 0.05"))
    try:
        # The SDK (default lenient parsing: the §4 code is not in its ResponseError.code Literal)
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.key)
        raw = client.responses.with_raw_response.create(
            model="local/smollm2", input="Hello", stream=True, max_output_tokens=8
        )
        assert raw.status_code == 200
        gid = raw.headers["x-generation-id"]
        events = list(raw.parse())
        check_sequence(events)
        assert [e.type for e in events] == ["response.created", "response.in_progress", "response.failed"]
        failed = events[-1]
        assert isinstance(failed, openai.types.responses.ResponseFailedEvent)
        assert failed.response.status == "failed" and failed.response.id == f"resp_{gid}"
        assert failed.response.error is not None
        assert str(failed.response.error.code) == "upstream_timeout" and failed.response.error.message
        assert failed.response.output == []
        record = httpx.get(f"{server.base_url}/api/v1/generations/{gid}", headers=server.headers).json()
        assert record["status"] == "failed" and record["error"]["code"] == "upstream_timeout"
    finally:
        server.stop()
    assert "Traceback" not in server.log()


def test_keepalive_comments_are_not_events(tmp_path: Path) -> None:
    server = start_server(tmp_path, local_config(tmp_path, 'keepalive_s = 0.02\nkeepalive_text = "TG WAIT"'))
    try:
        r = stream_sse(
            server.base_url + RESPONSES,
            {"model": "local/smollm2", "input": "Hello", "stream": True, "max_output_tokens": 4},
            server.headers,
        )
        assert r.status == 200 and r.comments >= 1 and b": TG WAIT\n" in r.raw
        payloads = [orjson.loads(e.data) for e in r.events]
        assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
        assert payloads[-1]["type"] in ("response.completed", "response.incomplete")
        # comments between events (after `id:` lines) must not break the official SDK's decoder
        created = r.raw.index(b"event: response.created")
        assert r.raw.index(b": TG WAIT\n") > created
        events = list(
            strict_client(server).responses.create(
                model="local/smollm2", input="Hello again", stream=True, max_output_tokens=4
            )
        )
        check_sequence(events)
    finally:
        server.stop()


# --- Claude upstreams (anthropic, bedrock, vertex kinds) through the Anthropic-family emulator ---

CLAUDE_MODELS = {"anthropic/claude": "claude", "bedrock/claude": "claude-bedrock", "vertex/claude": "claude-vertex"}


def claude_config(workdir: Path, emu: AnthropicFamilyEmulator) -> str:
    return f"""
[server]
host = "127.0.0.1"
[store]
url = "{sqlite_url(workdir)}"
[providers.claude]
kind = "anthropic"
base_url = "{emu.base_url}"
api_key_env = "EMU_ANTHROPIC_KEY"
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
[models."bedrock/claude"]
routes = [{{ provider = "claude-bedrock", model = "anthropic.claude-emu-v1:0" }}]
[models."vertex/claude"]
routes = [{{ provider = "claude-vertex", model = "claude-emu@20250101" }}]
"""


@pytest.fixture(scope="module")
def claude(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, AnthropicFamilyEmulator]]:
    emu = AnthropicFamilyEmulator().start()
    workdir = tmp_path_factory.mktemp("responses-claude")
    assert emu.aws.token is not None
    env = {
        "EMU_ANTHROPIC_KEY": emu.api_key,
        "EMU_VERTEX_TOKEN": emu.vertex_token,
        "AWS_ACCESS_KEY_ID": emu.aws.access_key,
        "AWS_SECRET_ACCESS_KEY": emu.aws.secret_key,
        "AWS_SESSION_TOKEN": emu.aws.token,
        "AWS_CONFIG_FILE": str(workdir / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(workdir / "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    server = start_server(workdir, claude_config(workdir, emu), extra_env=env)
    yield server, emu
    server.stop()
    emu.stop()


def claude_stream(server: ServerProcess, model: str, user: str, **extra: Any) -> list[Any]:
    events = list(strict_client(server).responses.create(model=model, input=user, stream=True, **extra))
    check_sequence(events)
    return events


@pytest.mark.parametrize("model", sorted(CLAUDE_MODELS))
def test_claude_thinking_becomes_a_reasoning_item(
    claude: tuple[ServerProcess, AnthropicFamilyEmulator], model: str
) -> None:
    server, _ = claude
    events = claude_stream(server, model, "2+2? [[thinking]]", reasoning={"effort": "low"})
    final = events[-1]
    assert final.type == "response.completed"
    reasoning = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert reasoning == "".join(THINKING_TEXT)
    item = final.response.output[0]
    assert item.type == "reasoning" and item.encrypted_content == SIGNATURE
    assert item.content is not None and item.content[0].text == reasoning
    assert final.response.output[1].type == "message" and final.response.output_text == "The answer is 4."
    assert final.response.usage is not None and final.response.usage.output_tokens == 40


@pytest.mark.parametrize("model", sorted(CLAUDE_MODELS))
def test_claude_redacted_thinking_is_encrypted_only(
    claude: tuple[ServerProcess, AnthropicFamilyEmulator], model: str
) -> None:
    server, _ = claude
    events = claude_stream(server, model, "secret? [[redacted]]")
    assert not any(e.type.startswith("response.reasoning_text") for e in events)
    final = events[-1]
    assert final.type == "response.completed"
    item = final.response.output[0]
    assert item.type == "reasoning" and item.encrypted_content == REDACTED_DATA and not item.content
    assert final.response.output_text == "Done."


@pytest.mark.parametrize("model", sorted(CLAUDE_MODELS))
def test_claude_tool_calls_and_the_tool_loop(claude: tuple[ServerProcess, AnthropicFamilyEmulator], model: str) -> None:
    server, emu = claude
    tools: list[Any] = [
        {"type": "function", "name": "lookup", "parameters": {"type": "object"}},
        {"type": "function", "name": "weather", "parameters": {"type": "object"}},
    ]
    events = claude_stream(server, model, "Paris? [[tools]]", tools=tools)
    final = events[-1]
    assert final.type == "response.completed"
    calls = [i for i in final.response.output if i.type == "function_call"]
    assert [(c.call_id, c.name, c.arguments) for c in calls] == [
        ("toolu_emu_A", "lookup", '{"q": "paris"}'),
        ("toolu_emu_B", "weather", '{"city": "Paris", "days": 2}'),
    ]
    done = {e.item_id: e.arguments for e in events if e.type == "response.function_call_arguments.done"}
    assert sorted(done.values()) == sorted(c.arguments for c in calls)
    # Send the items back with their outputs: the turn continues (Anthropic tool_result translation).
    mark = uuid.uuid4().hex[:12]
    follow: list[Any] = [{"role": "user", "content": f"Paris? {mark}"}]
    follow += [o.model_dump(exclude_none=True) for o in final.response.output]
    follow += [{"type": "function_call_output", "call_id": c.call_id, "output": "sunny"} for c in calls]
    response = strict_client(server).responses.create(model=model, input=follow, tools=tools)
    assert response.status == "completed" and response.output_text == "Hello from the emulator."
    sent = next(r for r in emu.requests if mark in repr(r.body))
    blocks = [b["type"] for m in sent.body["messages"] for b in m["content"] if isinstance(m["content"], list)]
    assert blocks.count("tool_use") == 2 and blocks.count("tool_result") == 2


@pytest.mark.parametrize("model", sorted(CLAUDE_MODELS))
def test_claude_reasoning_item_is_replayed(claude: tuple[ServerProcess, AnthropicFamilyEmulator], model: str) -> None:
    server, emu = claude
    first = strict_client(server).responses.create(model=model, input="2+2? [[thinking]]")
    mark = uuid.uuid4().hex[:12]
    follow: list[Any] = [{"role": "user", "content": "2+2?"}]
    follow += [o.model_dump(exclude_none=True) for o in first.output]
    follow.append({"role": "user", "content": f"and 3+3? {mark}"})
    again = strict_client(server).responses.create(model=model, input=follow)
    assert again.status == "completed"
    sent = next(r for r in emu.requests if mark in repr(r.body))
    assistant = sent.body["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["content"][0] == {"type": "thinking", "thinking": "".join(THINKING_TEXT), "signature": SIGNATURE}


def test_claude_max_tokens_is_incomplete(claude: tuple[ServerProcess, AnthropicFamilyEmulator]) -> None:
    server, _ = claude
    events = claude_stream(server, "anthropic/claude", "go [[maxtokens]]")
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details is not None
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"


def test_claude_mid_stream_error_is_response_failed_with_partial_text(
    claude: tuple[ServerProcess, AnthropicFamilyEmulator],
) -> None:
    server, _ = claude
    r = stream_sse(
        server.base_url + RESPONSES,
        {"model": "anthropic/claude", "input": "go [[error]]", "stream": True},
        server.headers,
    )
    payloads = r.json_events()
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    assert payloads[-1]["type"] == "response.failed"
    assert sum(1 for p in payloads if p["type"] in TERMINAL) == 1
    failed = payloads[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "upstream_error"
    assert failed["output"][0]["content"][0]["text"] == "Partial answer"
