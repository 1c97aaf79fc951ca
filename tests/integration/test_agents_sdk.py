"""The OpenAI Agents SDK (`openai-agents`, pinned in pyproject's dev extras) against a real tidegate
(docs/agents.md): `Runner.run_streamed` with one function tool, on the SDK's Responses model
(`/v1/responses`) and on its chat model (`/v1/chat/completions`), through an OpenAI-compatible chat
route and an Anthropic route. The emulators' model (scenario `calltools`) calls the agent's tool,
which the SDK runs, and answers with its result. Tracing is off: nothing leaves loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from tests.emulators.anthropic_upstream import AnthropicFamilyEmulator
from tests.emulators.openai_agent_upstream import AgentOpenAIUpstream
from tests.support.process import ServerProcess, sqlite_url, started_server

MAGIC = "tidegate-42"
calls: list[str] = []


@function_tool
def magic_number() -> str:
    """The magic number."""
    calls.append("magic_number")
    return MAGIC


def config(workdir: Path, chat: AgentOpenAIUpstream, claude: AnthropicFamilyEmulator) -> str:
    return f"""
[server]
host = "127.0.0.1"
[store]
url = "{sqlite_url(workdir)}"
[providers.chat]
kind = "openai"
base_url = "{chat.base_url}"
[providers.claude]
kind = "anthropic"
base_url = "{claude.base_url}"
api_key_env = "EMU_ANTHROPIC_KEY"
[models."agent-chat"]
routes = [{{ provider = "chat", model = "calltools" }}]
[models."agent-claude"]
routes = [{{ provider = "claude", model = "claude-emu--calltools" }}]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    set_tracing_disabled(True)
    chat, claude = AgentOpenAIUpstream().start(), AnthropicFamilyEmulator().start()
    env = {"EMU_ANTHROPIC_KEY": claude.api_key}
    with started_server(
        tmp_path_factory, "agents-sdk", lambda workdir: config(workdir, chat, claude), extra_env=env
    ) as gateway:
        yield gateway
    chat.stop()
    claude.stop()


def sdk_model(kind: str, model: str, client: AsyncOpenAI) -> Any:
    if kind == "responses":
        return OpenAIResponsesModel(model=model, openai_client=client)
    return OpenAIChatCompletionsModel(model=model, openai_client=client)


@pytest.mark.parametrize("kind", ["responses", "chat"])
@pytest.mark.parametrize("model", ["agent-chat", "agent-claude"])
async def test_run_streamed_with_one_function_tool(server: ServerProcess, kind: str, model: str) -> None:
    client = AsyncOpenAI(base_url=server.base_url + "/v1", api_key=server.key, max_retries=0)
    agent = Agent(
        name="assistant",
        instructions="Use the tool, then say what it returned.",
        tools=[magic_number],
        model=sdk_model(kind, model, client),
    )
    before = len(calls)
    result = Runner.run_streamed(agent, "What is the magic number?", run_config=RunConfig(tracing_disabled=True))
    kinds = [event.type async for event in result.stream_events()]
    assert result.final_output == f"Tool said: {MAGIC}"
    assert calls[before:] == ["magic_number"]  # the SDK ran the tool the model called, once
    assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
    async with httpx.AsyncClient(base_url=server.base_url, headers=server.headers) as http:
        listed = (await http.get("/api/v1/generations")).json()["data"]
    mine = [g for g in listed if g["model"] == model][:2]  # the newest two: the tool call's turn, the answer's
    assert all(g["status"] == "completed" and g["usage"]["completion_tokens"] > 0 for g in mine), mine
    assert {g["output_text"] for g in mine} == {"", f"Tool said: {MAGIC}"}
    await client.close()
