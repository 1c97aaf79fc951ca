"""`/v1/messages` on Bedrock and Vertex routes (docs/agents.md): the body as sent, in each host's shape
(`anthropic_version` in it, `model` in the URL, the beta flags as Bedrock's `anthropic_beta` array or
Vertex's `anthropic-beta` header), checked on what the real emulator received; the events untouched."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import orjson
import pytest

from tests.emulators.anthropic_upstream import SIGNATURE, THINKING_TEXT, AnthropicFamilyEmulator, scenario_events
from tests.support.process import ServerProcess, running_server, sqlite_url
from tests.support.streams import stream_sse

MESSAGES = "/v1/messages"
BETAS = "interleaved-thinking-2025-05-14, context-1m-2025-08-07"
VERSIONS = {"bedrock": "bedrock-2023-05-31", "vertex": "vertex-2023-10-16"}
SERVED = {"bedrock": "anthropic.claude-emu-v1:0", "vertex": "claude-emu@20250101"}
CLOUDS = pytest.mark.parametrize("cloud", ["bedrock", "vertex"])


@pytest.fixture(scope="module")
def claude() -> Iterator[AnthropicFamilyEmulator]:
    emulator = AnthropicFamilyEmulator().start()
    yield emulator
    emulator.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, claude: AnthropicFamilyEmulator) -> Iterator[ServerProcess]:
    workdir = tmp_path_factory.mktemp("messages-clouds")
    config = f"""
[server]
host = "127.0.0.1"
[store]
url = "{sqlite_url(workdir)}"
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
routes = [{{ provider = "claude-bedrock", model = "{SERVED["bedrock"]}" }}]
[models."vertex"]
routes = [{{ provider = "claude-vertex", model = "{SERVED["vertex"]}" }}]
"""
    assert claude.aws.token is not None
    env = {
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


def host_body(cloud: str, sent: dict[str, Any], betas: str | None) -> dict[str, Any]:
    """What the host must receive for `sent`: model out, its anthropic_version in; on Bedrock no
    `stream` and the beta flags as an array, on Vertex `stream: true` (the flags stay a header)."""
    body = {k: v for k, v in sent.items() if k not in ("model", "stream")}
    body["anthropic_version"] = VERSIONS[cloud]
    if cloud == "vertex":
        body["stream"] = True
    elif betas:
        body["anthropic_beta"] = [flag.strip() for flag in betas.split(",")]
    return body


@CLOUDS
def test_the_body_as_the_host_takes_it_and_the_events_untouched(
    server: ServerProcess, claude: AnthropicFamilyEmulator, cloud: str
) -> None:
    body = {
        "model": cloud,
        "max_tokens": 64,
        "stream": True,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}]}
        ],
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "top_k": 5,  # refused on a translated route: here the host decides
        "provider": {"allow_fallbacks": False},  # tidegate's routing object never leaves it
    }
    headers = {"anthropic-version": "2023-06-01", "anthropic-beta": BETAS, "x-api-key": server.key}
    r = stream_sse(server.base_url + MESSAGES, body, headers)
    assert r.status == 200 and r.headers["x-provider"] == f"claude-{cloud}"
    upstream = [orjson.dumps(data).decode() for _, data in scenario_events("text", SERVED[cloud])]
    assert [e.data for e in r.events] == upstream  # every event's data as the host's stream carried it
    assert [e.event for e in r.events] == [orjson.loads(d)["type"] for d in upstream]
    got = claude.last(cloud)
    sent = {k: v for k, v in body.items() if k != "provider"}
    assert got.body == host_body(cloud, sent, BETAS)
    if cloud == "vertex":
        assert got.headers["anthropic-beta"] == BETAS
    else:
        assert "anthropic-beta" not in {name.lower() for name in got.headers}


@CLOUDS
def test_cache_control_and_thinking_reach_the_host_as_sent(
    server: ServerProcess, claude: AnthropicFamilyEmulator, cloud: str
) -> None:
    """The breakpoints on system, text, tool_result and tool blocks, and the thinking blocks with
    their signatures, read back by the anthropic SDK and sent again: exactly that body arrives."""
    ephemeral = {"type": "ephemeral"}
    client = anthropic.Anthropic(
        base_url=server.base_url, api_key=server.key, max_retries=0, default_headers={"anthropic-beta": BETAS}
    )
    thinking = {"type": "enabled", "budget_tokens": 2048}
    first = [{"role": "user", "content": "[[thinking]]"}]
    with client.messages.stream(model=cloud, max_tokens=4096, thinking=thinking, messages=first) as s:  # type: ignore[arg-type]
        final = s.get_final_message()
    assert final.content[0].type == "thinking" and final.content[0].signature == SIGNATURE
    assert final.content[0].thinking == "".join(THINKING_TEXT)
    convo = [
        *first,
        {
            "role": "assistant",
            "content": [
                *(
                    {"type": "thinking", "thinking": b.thinking, "signature": b.signature}
                    for b in final.content
                    if b.type == "thinking"
                ),
                {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Paris", "cache_control": ephemeral},
                {"type": "text", "text": "So?", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
            ],
        },
    ]
    sent = {
        "model": cloud,
        "max_tokens": 4096,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": ephemeral}],
        "tools": [{"name": "lookup", "input_schema": {"type": "object"}, "cache_control": ephemeral}],
        "thinking": thinking,
        "messages": convo,
    }
    client.messages.create(**sent)  # type: ignore[call-overload]
    assert claude.last(cloud).body == host_body(cloud, orjson.loads(orjson.dumps(sent)), BETAS)
