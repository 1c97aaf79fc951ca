"""docs/api.md §6 buffered mode and §13 MCP tools, end to end: a real tidegate, the OpenAI emulator's
`mcp-agent` model (it calls the tool the user names, then answers with the result) and a real MCP
server (the official SDK's MCPServer over streamable HTTP) in its own process."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import orjson
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.mcp import McpProcess
from tests.support.process import ServerProcess, running_server, sqlite_url, start_server

NATIVE = "/api/v1/llm/responses"
RESPONSES = "/v1/responses"
MAX_TURNS = 3
CHAT = "/v1/chat/completions"
CALC_AUTH = f"Bearer calc-{uuid.uuid4().hex}"  # the server_tools header, from the environment only
# The seed's rule (000: "check the content type before choosing a parser"), as a client would write it
# with nothing but fetch: JSON for a buffered answer, SSE events until `done` otherwise.
SEED_PARSER_JS = """
const [url, key, body] = process.argv.slice(2);
const res = await fetch(url, {method: "POST", headers: {Authorization: `Bearer ${key}`,
  "Content-Type": "application/json"}, body});
const type = res.headers.get("content-type") || "";
let result;
if (type.startsWith("application/json")) {
  result = {parser: "json", mode: res.headers.get("x-kendr-stream-mode"),
            reason: res.headers.get("x-kendr-buffered-reason"), done: await res.json()};
} else {
  const text = await res.text();
  const events = text.split("\\n\\n").filter(Boolean).map((block) => {
    const lines = block.split("\\n");
    const name = (lines.find((l) => l.startsWith("event: ")) || "").slice(7);
    const data = lines.filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\\n");
    return {name, data};
  });
  const done = events.find((e) => e.name === "done");
  result = {parser: "sse", mode: res.headers.get("x-kendr-stream-mode"), done: done && JSON.parse(done.data)};
}
process.stdout.write(JSON.stringify(result));
"""


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream() as emu:
        yield emu


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[McpProcess]:
    proc = McpProcess()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def sse_server() -> Iterator[McpProcess]:
    """The same tools over the older HTTP+SSE transport."""
    proc = McpProcess("sse")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def crashing_server() -> Iterator[McpProcess]:
    """A second server for the test whose tool ends the process."""
    proc = McpProcess()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def server(
    upstream: OpenAIUpstream,
    mcp_server: McpProcess,
    crashing_server: McpProcess,
    sse_server: McpProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServerProcess]:
    workdir = tmp_path_factory.mktemp("mcp")
    config = tidegate_toml(
        sqlite_url(workdir),
        {"emu": {"kind": "openai", "base_url": upstream.base_url}},
        {"m/agent": [("emu", "mcp-agent")], "m/text": [("emu", "text")]},
    )
    config += f"""[mcp]
allowed_hosts = ["127.0.0.1:{mcp_server.port}", "127.0.0.1:{crashing_server.port}", "127.0.0.1:{sse_server.port}", \
"localhost:{mcp_server.port}", "*.example.com"]
max_turns = {MAX_TURNS}
call_timeout_s = 5
deadline_s = 30
"""
    config += f"""[models."m/tools"]
routes = [{{ provider = "emu", model = "mcp-agent" }}]
server_tools = [
    {{ server_label = "calc", server_url = "{mcp_server.url}", allowed_tools = ["add"], \
headers_env = {{ Authorization = "CALC_MCP_AUTH" }} }},
]
"""
    with running_server(workdir, config, extra_env={"CALC_MCP_AUTH": CALC_AUTH}) as srv:
        yield srv


def _tool(url: str, **extra: object) -> dict[str, object]:
    return {"type": "mcp", "server_label": "calc", "server_url": url, "require_approval": "never", **extra}


def _post(server: ServerProcess, path: str, body: dict[str, object], **headers: str) -> httpx.Response:
    return httpx.post(server.base_url + path, json=body, headers={**server.headers, **headers}, timeout=60)


def _types(answer: dict[str, object]) -> list[str]:
    return [item["type"] for item in answer["output"]]  # type: ignore[attr-defined, index]


def test_native_door_runs_the_tool_loop_and_answers_buffered(
    server: ServerProcess, upstream: OpenAIUpstream, mcp_server: McpProcess
) -> None:
    secret = f"Bearer mcp-secret-{uuid.uuid4().hex}"
    body = {
        "model": "m/agent",
        "input": "call add",
        "tools": [_tool(mcp_server.url, headers={"Authorization": secret})],
    }
    before = len(upstream.for_model("mcp-agent"))
    r = _post(server, NATIVE, body)  # `stream` defaults to true on this door: buffered all the same
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert r.headers["x-kendr-stream-mode"] == "buffered"
    assert r.headers["x-kendr-buffered-reason"] == "custom_mcp"
    answer = r.json()
    assert _types(answer) == ["mcp_list_tools", "mcp_call", "message"]
    listed, call, _ = answer["output"]
    assert {t["name"] for t in listed["tools"]} == {"add", "fail", "crash", "slow"}
    assert listed["server_label"] == "calc"
    assert (call["name"], call["arguments"], call["output"], call["error"]) == (
        "add",
        '{"a": 2, "b": 3}',
        "sum=5",
        None,
    )
    assert answer["output_text"] == "Tool said: sum=5"
    # two model turns, each reporting 11 prompt + 7 completion tokens: both are billed
    assert answer["usage"]["prompt_tokens"] == 22 and answer["usage"]["completion_tokens"] == 14
    turns = upstream.for_model("mcp-agent")[before:]
    assert len(turns) == 2
    assert turns[0].body["tools"][0]["function"]["name"] == "add"
    assert turns[1].body["messages"][-1] == {"role": "tool", "tool_call_id": "call_0", "content": "sum=5"}
    record = httpx.get(f"{server.base_url}/api/v1/generations/{answer['id']}", headers=server.headers).json()
    assert record["status"] == "completed" and record["usage"]["total_tokens"] == 36
    [made] = record["mcp_calls"]  # what was called, how big, how long: never the arguments or the output
    assert (made["server_label"], made["name"], made["arguments_bytes"], made["error"]) == ("calc", "add", 16, None)
    assert 0 < made["duration_ms"] < 10_000 and "sum=5" not in str(record["mcp_calls"])
    assert secret not in server.log() and secret not in r.text  # the client's MCP headers stay secret


def test_responses_door_answers_a_buffered_response_object(server: ServerProcess, mcp_server: McpProcess) -> None:
    """By name (`localhost`, listed exactly): the SDK's requests go to the address the guard checked,
    with the name in `Host` (mcp/pinned.py)."""
    url = mcp_server.url.replace("127.0.0.1", "localhost")
    body = {"model": "m/agent", "input": "call add", "stream": True, "tools": [_tool(url)]}
    r = _post(server, RESPONSES, body)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert r.headers["x-kendr-buffered-reason"] == "custom_mcp"
    answer = r.json()
    assert answer["object"] == "response" and answer["status"] == "completed"
    assert _types(answer) == ["mcp_list_tools", "mcp_call", "message"]
    assert answer["output"][2]["content"][0]["text"] == "Tool said: sum=5"
    assert answer["usage"]["input_tokens"] == 22
    assert answer["tools"][0]["type"] == "mcp" and answer["tools"][0]["headers"] is None


def test_streamed_answers_say_so(server: ServerProcess) -> None:
    for path in (RESPONSES, NATIVE):
        with httpx.stream(
            "POST",
            server.base_url + path,
            json={"model": "m/text", "input": "hi", "stream": True},
            headers=server.headers,
        ) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            assert r.headers["x-kendr-stream-mode"] == "streamed"
            r.read()


@pytest.mark.parametrize(
    ("url", "extra", "code"),
    [
        ("http://127.0.0.1:1/mcp", {}, "mcp_server_not_allowed"),  # loopback, but not this port
        ("http://169.254.169.254/mcp", {}, "mcp_server_not_allowed"),
        ("http://10.1.2.3.example.com/mcp", {}, "mcp_server_not_allowed"),  # a wildcard never reaches inside
        ("ftp://127.0.0.1/mcp", {}, "invalid_request"),
        ("MCP", {"require_approval": "always"}, "unsupported_parameter"),
        ("MCP", {"headers": {"X-Team": "caf\u00e9"}}, "invalid_request"),  # not ASCII
        ("MCP", {"headers": {"Host": "internal.example"}}, "invalid_request"),
    ],
)
def test_refused_before_anything_starts(
    server: ServerProcess,
    upstream: OpenAIUpstream,
    mcp_server: McpProcess,
    url: str,
    extra: dict[str, object],
    code: str,
) -> None:
    before = len(upstream.for_model("mcp-agent"))
    tool = _tool(mcp_server.url if url == "MCP" else url, **extra)
    r = _post(server, NATIVE, {"model": "m/agent", "input": "call add", "tools": [tool]})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == code
    assert len(upstream.for_model("mcp-agent")) == before
    headers = extra.get("headers")
    if isinstance(headers, dict):  # the header is named, its value never shown
        name, value = next(iter(headers.items()))
        assert repr(name) in r.json()["error"]["message"] and value not in r.json()["error"]["message"]


def test_a_failing_tool_is_an_mcp_call_error_the_model_answers(server: ServerProcess, mcp_server: McpProcess) -> None:
    r = _post(server, NATIVE, {"model": "m/agent", "input": "call fail", "tools": [_tool(mcp_server.url)]})
    assert r.status_code == 200, r.text
    call = r.json()["output"][1]
    assert call["type"] == "mcp_call" and call["output"] is None and "fail" in call["error"]
    assert r.json()["output_text"].startswith("Tool said: Error: ")


def test_the_turn_limit_ends_the_loop(server: ServerProcess, upstream: OpenAIUpstream, mcp_server: McpProcess) -> None:
    before = len(upstream.for_model("mcp-agent"))
    r = _post(server, NATIVE, {"model": "m/agent", "input": "always call add", "tools": [_tool(mcp_server.url)]})
    assert r.status_code == 200, r.text
    calls = [i for i in r.json()["output"] if i["type"] == "mcp_call"]
    assert len(calls) == MAX_TURNS and len(upstream.for_model("mcp-agent")) - before == MAX_TURNS
    assert [c["error"] is None for c in calls] == [True] * (MAX_TURNS - 1) + [False]
    assert "max_turns" in calls[-1]["error"]


def test_idempotent_replay_returns_the_buffered_answer(
    server: ServerProcess, upstream: OpenAIUpstream, mcp_server: McpProcess
) -> None:
    key = f"mcp-{uuid.uuid4().hex}"
    body = {"model": "m/agent", "input": "call add", "tools": [_tool(mcp_server.url)]}
    first = _post(server, NATIVE, body, **{"Idempotency-Key": key})
    assert first.status_code == 200, first.text
    turns = len(upstream.for_model("mcp-agent"))
    again = _post(server, NATIVE, body, **{"Idempotency-Key": key})
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    replay = httpx.post(server.base_url + NATIVE + "/replay", headers={**server.headers, "Idempotency-Key": key})
    assert replay.status_code == 200 and replay.json() == first.json()
    assert len(upstream.for_model("mcp-agent")) == turns  # no model turn, no MCP call on a replay


def test_a_server_killed_mid_loop_gives_a_clear_error_and_a_final_record(
    server: ServerProcess, crashing_server: McpProcess
) -> None:
    started = time.monotonic()
    r = _post(server, NATIVE, {"model": "m/agent", "input": "call crash", "tools": [_tool(crashing_server.url)]})
    assert time.monotonic() - started < 15  # never a hang
    assert crashing_server.proc.wait(timeout=5) == 3  # the server really died during the call
    assert r.status_code == 200, r.text
    answer = r.json()
    call = answer["output"][1]
    assert call["type"] == "mcp_call" and call["status"] == "failed"
    assert "MCP server 'calc'" in call["error"] and "crash" in call["error"]
    record = httpx.get(f"{server.base_url}/api/v1/generations/{answer['id']}", headers=server.headers).json()
    assert record["status"] == "completed" and record["duration_ms"] is not None
    assert [(c["name"], "crash" in c["error"]) for c in record["mcp_calls"]] == [("crash", True)]


def test_a_model_with_server_tools_answers_chat_completions_buffered(
    server: ServerProcess, upstream: OpenAIUpstream
) -> None:
    """docs/api.md §6 reason `server_tools`: the catalog model declares the MCP server; a plain chat
    completion runs the loop and answers one `chat.completion`, even for `stream: true`."""
    before = len(upstream.for_model("mcp-agent"))
    body = {"model": "m/tools", "messages": [{"role": "user", "content": "call add"}], "stream": True}
    r = _post(server, CHAT, body)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert (r.headers["x-kendr-stream-mode"], r.headers["x-kendr-buffered-reason"]) == ("buffered", "server_tools")
    answer = r.json()
    assert answer["object"] == "chat.completion"
    choice = answer["choices"][0]
    assert choice["message"]["content"] == "Tool said: sum=5" and "tool_calls" not in choice["message"]
    assert choice["finish_reason"] == "stop"
    [call] = answer["mcp_calls"]
    assert (call["server_label"], call["name"], call["output"], call["error"]) == ("calc", "add", "sum=5", None)
    assert answer["usage"]["prompt_tokens"] == 22  # both model turns
    turns = upstream.for_model("mcp-agent")[before:]
    assert [t["function"]["name"] for t in turns[0].body["tools"]] == ["add"]  # allowed_tools
    gid = r.headers["x-generation-id"]
    record = httpx.get(f"{server.base_url}/api/v1/generations/{gid}", headers=server.headers).json()
    assert record["status"] == "completed" and [c["name"] for c in record["mcp_calls"]] == ["add"]
    sdk = openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.key, max_retries=0)
    completion = sdk.chat.completions.create(model="m/tools", messages=[{"role": "user", "content": "call add"}])
    assert completion.choices[0].message.content == "Tool said: sum=5"
    assert CALC_AUTH not in server.log() and CALC_AUTH not in r.text


def test_the_seed_client_picks_its_parser_by_content_type(
    server: ServerProcess, mcp_server: McpProcess, tmp_path: Path
) -> None:
    """Seed 000 in JavaScript: the same fetch code reads a buffered MCP answer as JSON and a streamed
    answer as SSE, told apart by Content-Type alone; both end with the native `done` result."""
    node = shutil.which("node")
    assert node is not None, "node is required (Debian's nodejs); this test never skips"
    script = tmp_path / "seed_parser.mjs"
    script.write_text(SEED_PARSER_JS)

    def run(body: dict[str, object]) -> dict[str, object]:
        out = subprocess.run(
            [node, str(script), server.base_url + NATIVE, server.key, orjson.dumps(body).decode()],
            capture_output=True,
            timeout=60,
            check=True,
        )
        return dict(orjson.loads(out.stdout))

    buffered = run({"model": "m/agent", "input": "call add", "tools": [_tool(mcp_server.url)]})
    assert (buffered["parser"], buffered["mode"], buffered["reason"]) == ("json", "buffered", "custom_mcp")
    assert buffered["done"]["output_text"] == "Tool said: sum=5"  # type: ignore[index]
    streamed = run({"model": "m/text", "input": "hello"})
    assert (streamed["parser"], streamed["mode"]) == ("sse", "streamed")
    assert streamed["done"]["status"] == "completed"  # type: ignore[index]


def test_an_older_server_over_http_sse(server: ServerProcess, sse_server: McpProcess) -> None:
    """A `server_url` ending in /sse speaks the older HTTP+SSE transport; the loop is the same."""
    r = _post(server, NATIVE, {"model": "m/agent", "input": "call add", "tools": [_tool(sse_server.url)]})
    assert r.status_code == 200, r.text
    answer = r.json()
    assert _types(answer) == ["mcp_list_tools", "mcp_call", "message"]
    assert answer["output"][1]["output"] == "sum=5" and answer["output_text"] == "Tool said: sum=5"


def test_a_gateway_killed_mid_loop_leaves_an_interrupted_record_with_its_calls(
    upstream: OpenAIUpstream, mcp_server: McpProcess, tmp_path: Path
) -> None:
    """Two gateways on one SQLite file (short leases). Gateway A runs a loop whose model keeps calling
    a 0.3 s tool; A is killed after its first calls. The record B shows is `interrupted` (the lease
    sweep), with the calls A made before it died; a replay of the key answers 502 `interrupted`."""
    config = tidegate_toml(
        sqlite_url(tmp_path),
        {"emu": {"kind": "openai", "base_url": upstream.base_url}},
        {"m/agent": [("emu", "mcp-agent")]},
        server={"lease_ttl_s": 1.5},
    )
    config += f"""[mcp]
allowed_hosts = ["127.0.0.1:{mcp_server.port}"]
max_turns = 64
deadline_s = 120
"""
    a, b = start_server(tmp_path / "a", config), start_server(tmp_path / "b", config)
    try:
        key = f"mcp-kill-{uuid.uuid4().hex}"
        body = {"model": "m/agent", "input": "always call slow", "tools": [_tool(mcp_server.url)]}
        sent = threading.Thread(target=lambda: _swallow(lambda: _post(a, NATIVE, body, **{"Idempotency-Key": key})))
        sent.start()
        deadline = time.monotonic() + 20
        running: list[dict[str, object]] = []
        while not running and time.monotonic() < deadline:  # B reads the shared store
            listed = httpx.get(f"{b.base_url}/api/v1/generations", headers=b.headers, timeout=10).json()["data"]
            running = [g for g in listed if g["status"] == "in_progress" and len(g.get("mcp_calls") or []) >= 2]
            time.sleep(0.1)
        assert running, "the loop's calls never reached the store while it ran"
        a.kill()  # SIGKILL mid-loop: no drain, no final write
        sent.join(timeout=30)
        gid = running[0]["id"]
        while time.monotonic() < deadline + 10:
            record = httpx.get(f"{b.base_url}/api/v1/generations/{gid}", headers=b.headers, timeout=10).json()
            if record["status"] != "in_progress":
                break
            time.sleep(0.2)
        assert record["status"] == "interrupted" and record["error"]["code"] == "interrupted"
        assert len(record["mcp_calls"]) >= 2 and {c["name"] for c in record["mcp_calls"]} == {"slow"}
        assert all(c["error"] is None and c["duration_ms"] >= 300 for c in record["mcp_calls"])
        replay = httpx.post(f"{b.base_url}{NATIVE}/replay", headers={**b.headers, "Idempotency-Key": key}, timeout=10)
        assert replay.status_code == 502 and replay.json()["error"]["code"] == "interrupted"
    finally:
        a.kill()
        b.stop()


def _swallow(call: Callable[[], object]) -> None:
    """A request whose gateway is killed under it: the client's connection error is expected."""
    try:
        call()
    except httpx.HTTPError:
        pass
