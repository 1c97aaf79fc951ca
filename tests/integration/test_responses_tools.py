"""`/v1/responses` on translated routes: custom and namespaced tools, `text.format`, hosted tools and
the hints of the chat door (docs/agents.md), against a real tidegate and the Anthropic emulator, read
by the official SDK with strict validation."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.emulators.anthropic_upstream import FORCED_INPUT, SIGNATURE, THINKING_TEXT, AnthropicFamilyEmulator
from tests.support.process import ServerProcess, sqlite_url, start_server

GRAMMAR = 'start: "ok" | "no"'
TOOLS: list[Any] = [
    {"type": "custom", "name": "patch", "description": "Apply a patch.", "format": {"type": "text"}},
    {
        "type": "namespace",
        "name": "geo",
        "description": "Places.",
        "tools": [
            {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}},
            {
                "type": "custom",
                "name": "vote",
                "format": {"type": "grammar", "syntax": "lark", "definition": GRAMMAR},
            },
        ],
    },
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
[models."anthropic/claude"]
routes = [{{ provider = "claude", model = "claude-emu" }}]
[models."anthropic/claude-refuses"]
drop_hosted_tools = false
routes = [{{ provider = "claude", model = "claude-emu" }}]
"""


@pytest.fixture(scope="module")
def claude(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, AnthropicFamilyEmulator]]:
    emu = AnthropicFamilyEmulator().start()
    workdir = tmp_path_factory.mktemp("responses-tools")
    server = start_server(workdir, config(workdir, emu), extra_env={"EMU_ANTHROPIC_KEY": emu.api_key})
    yield server, emu
    server.stop()
    emu.stop()


def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.key, _strict_response_validation=True)


def sent_to(emu: AnthropicFamilyEmulator, mark: str) -> dict[str, Any]:
    return next(r.body for r in emu.requests if mark in repr(r.body))


def test_custom_and_namespaced_tools_round_trip(claude: tuple[ServerProcess, AnthropicFamilyEmulator]) -> None:
    server, emu = claude
    mark = uuid.uuid4().hex[:12]
    with client(server).responses.stream(model="anthropic/claude", input=f"go {mark} [[calltools]]", tools=TOOLS) as s:
        events = list(s)
        final = s.get_final_response()
    upstream = sent_to(emu, mark)
    assert [t["name"] for t in upstream["tools"]] == ["patch", "geo__lookup", "geo__vote"]
    assert upstream["tools"][0]["input_schema"]["required"] == ["input"]
    assert GRAMMAR in upstream["tools"][2]["description"]  # the grammar reaches the model as words
    items = final.output
    kinds = [(i.type, i.name, getattr(i, "namespace", None)) for i in items]
    assert kinds == [
        ("custom_tool_call", "patch", None),
        ("function_call", "lookup", "geo"),
        ("custom_tool_call", "vote", "geo"),
    ]
    assert items[0].input == "x" and items[2].input == "x" and items[1].arguments == "{}"
    done = [e for e in events if e.type == "response.custom_tool_call_input.done"]
    assert [e.input for e in done] == ["x", "x"]
    # the calls and their outputs sent back: the upstream sees tool_use / tool_result pairs, flat names
    mark2 = uuid.uuid4().hex[:12]
    follow: list[Any] = [{"role": "user", "content": f"go {mark2}"}]
    follow += [i.model_dump(exclude_none=True) for i in items]
    for i in items:
        kind = "custom_tool_call_output" if i.type == "custom_tool_call" else "function_call_output"
        follow.append({"type": kind, "call_id": i.call_id, "output": f"done {i.name}"})
    again = client(server).responses.create(model="anthropic/claude", input=follow, tools=TOOLS)
    assert again.status == "completed" and again.output_text == "Hello from the emulator."
    blocks = [b for m in sent_to(emu, mark2)["messages"] for b in m["content"] if isinstance(m["content"], list)]
    uses = [(b["name"], b["input"]) for b in blocks if b["type"] == "tool_use"]
    assert uses == [("patch", {"input": "x"}), ("geo__lookup", {}), ("geo__vote", {"input": "x"})]
    assert [b["content"] for b in blocks if b["type"] == "tool_result"] == ["done patch", "done lookup", "done vote"]


def test_text_format_json_schema_is_the_routes_structured_output(
    claude: tuple[ServerProcess, AnthropicFamilyEmulator],
) -> None:
    server, emu = claude
    mark = uuid.uuid4().hex[:12]
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    response = client(server).responses.create(
        model="anthropic/claude",
        input=f"Largest city? {mark}",
        text={"format": {"type": "json_schema", "name": "city", "schema": schema, "strict": True}},
    )
    assert response.status == "completed" and response.output_text == "".join(FORCED_INPUT)
    assert response.text is not None and response.text.format.type == "json_schema"
    upstream = sent_to(emu, mark)
    assert upstream["tool_choice"] == {"type": "tool", "name": "json_answer"}
    assert upstream["tools"][0]["input_schema"] == schema


def test_hosted_tool_is_dropped_unless_the_model_says_refuse(
    claude: tuple[ServerProcess, AnthropicFamilyEmulator],
) -> None:
    server, emu = claude
    body = {"input": "hi", "tools": [{"type": "function", "name": "f"}, {"type": "web_search"}]}
    refused = httpx.post(
        server.base_url + "/v1/responses", json={"model": "anthropic/claude-refuses", **body}, headers=server.headers
    )
    assert refused.status_code == 400 and "x-tidegate-dropped" not in refused.headers
    error = refused.json()["error"]
    assert error["code"] == "unsupported_parameter" and "'tools[1].type (web_search" in error["message"]
    mark = uuid.uuid4().hex[:12]
    body["input"] = f"hi {mark}"
    for stream in (False, True):
        served = httpx.post(
            server.base_url + "/v1/responses",
            json={"model": "anthropic/claude", "stream": stream, **body},  # the default: left out
            headers=server.headers,
        )
        assert served.status_code == 200, served.text
        assert served.headers["x-tidegate-dropped"] == "web_search"
        record = httpx.get(
            f"{server.base_url}/api/v1/generations/{served.headers['x-generation-id']}", headers=server.headers
        ).json()
        assert record["dropped"] == ["web_search"]  # the record names it too
    assert [t["name"] for t in sent_to(emu, mark)["tools"]] == ["f"]


def test_chat_door_hints_are_accepted_on_an_anthropic_route(
    claude: tuple[ServerProcess, AnthropicFamilyEmulator],
) -> None:
    server, emu = claude
    mark = uuid.uuid4().hex[:12]
    chat = openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.key).chat.completions.create(
        model="anthropic/claude",
        messages=[{"role": "user", "content": f"hi {mark}"}],
        prompt_cache_key="thread-1",
        metadata={"team": "a"},
        safety_identifier="user-hash",
        service_tier="auto",
        store=False,
    )
    assert chat.choices[0].message.content == "Hello from the emulator."
    assert sent_to(emu, mark)["metadata"] == {"user_id": "user-hash"}


def test_reasoning_summary_shows_thinking_and_its_item_replays(
    claude: tuple[ServerProcess, AnthropicFamilyEmulator],
) -> None:
    server, emu = claude
    with client(server).responses.stream(
        model="anthropic/claude", input="2+2? [[thinking]]", reasoning={"effort": "low", "summary": "auto"}
    ) as s:
        events = list(s)
        first = s.get_final_response()
    thinking = "".join(THINKING_TEXT)
    assert "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta") == thinking
    assert not any(e.type.startswith("response.reasoning_text") for e in events)
    item = first.output[0]
    assert item.type == "reasoning" and [p.text for p in item.summary] == [thinking]
    assert item.encrypted_content == SIGNATURE and item.content is not None and item.content[0].text == thinking
    # what Codex sends back (`include: reasoning.encrypted_content`): the signed thinking reaches Anthropic
    mark = uuid.uuid4().hex[:12]
    follow: list[Any] = [{"role": "user", "content": "2+2?"}, *(o.model_dump(exclude_none=True) for o in first.output)]
    follow.append({"role": "user", "content": f"and 3+3? {mark}"})
    again = client(server).responses.create(
        model="anthropic/claude", input=follow, include=["reasoning.encrypted_content"], store=False
    )
    assert again.status == "completed"
    assistant = sent_to(emu, mark)["messages"][1]
    assert assistant["content"][0] == {"type": "thinking", "thinking": thinking, "signature": SIGNATURE}
