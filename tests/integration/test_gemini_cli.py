"""The real Gemini CLI (`@google/gemini-cli`, pinned in tests/coding_agents/package.json) against a real
tidegate through the Gemini API door (`/v1beta/models/...`, docs/agents.md): `gemini -p` headless, its
home in a temporary directory, its settings those docs/agents.md shows (a Gemini API key, which is a
tidegate key; telemetry, usage statistics and update checks off; one attempt per request), nothing
reached but loopback. The upstreams are the emulators: an OpenAI-compatible chat route (translated)
whose model (scenario `read_file`) calls Gemini CLI's `read_file` tool on the file the prompt names and
then answers with the line the CLI read for it, a Gemini route (passthrough) scripted the same way
in Gemini's wire format (scenario `readfile`: a functionCall part, then text after the functionResponse),
and Anthropic, Bedrock and Vertex routes (translated) scripted the same way in the Messages API's
events (scenario `readfile`: a tool_use block, then text after the tool_result).

The package is installed by `make install` (`npm ci` in tests/coding_agents); when it is missing the
tests install it the same way. Without node and npm they skip, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.emulators.anthropic_upstream import READ_MARKER, AnthropicFamilyEmulator
from tests.emulators.gemini_upstream import GeminiEmulator
from tests.emulators.openai_agent_upstream import AgentOpenAIUpstream
from tests.emulators.openai_upstream import TEXT_PIECES
from tests.support.agents import AGENTS, agent_binary
from tests.support.process import ServerProcess, sqlite_url, start_server

GEMINI = AGENTS / "node_modules" / ".bin" / "gemini"
HELLO = "".join(TEXT_PIECES)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "agents.md"

# what docs/agents.md shows: $HOME/.gemini/settings.json
SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False, "maxAttempts": 1},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
}


def gemini_binary() -> Path:
    return agent_binary("gemini", "Gemini CLI")


def gateway_config(
    workdir: Path, chat: AgentOpenAIUpstream, gemini: GeminiEmulator, claude: AnthropicFamilyEmulator
) -> str:
    return f"""
[server]
host = "127.0.0.1"
[store]
url = "{sqlite_url(workdir)}"
[providers.chat]
kind = "openai"
base_url = "{chat.base_url}"
[providers.gemini]
kind = "gemini"
base_url = "{gemini.base_url}/v1beta"
api_key_env = "EMU_GEMINI_KEY"
[providers.claude]
kind = "anthropic"
base_url = "{claude.base_url}"
api_key_env = "EMU_ANTHROPIC_KEY"
[models."gc-hello"]
routes = [{{ provider = "chat", model = "text" }}]
[models."gc-chat"]
routes = [{{ provider = "chat", model = "read_file" }}]
[models."gc-gemini"]
routes = [{{ provider = "gemini", model = "gemini-2.5-flash--readfile" }}]
[providers.bedrock]
kind = "bedrock"
region = "{claude.region}"
endpoint_url = "{claude.base_url}"
[providers.vertex]
kind = "vertex"
region = "us-east5"
project = "{claude.vertex_project}"
base_url = "{claude.base_url}/v1"
access_token_env = "EMU_VERTEX_TOKEN"
[models."gc-claude"]
routes = [{{ provider = "claude", model = "claude-emu--readfile" }}]
pricing = {{ prompt = 3.0, completion = 15.0 }}
[models."gc-bedrock"]
routes = [{{ provider = "bedrock", model = "anthropic.claude-emu--readfile" }}]
pricing = {{ prompt = 3.0, completion = 15.0 }}
[models."gc-vertex"]
routes = [{{ provider = "vertex", model = "claude-emu--readfile" }}]
pricing = {{ prompt = 3.0, completion = 15.0 }}
[models."gc-breaks"]
routes = [{{ provider = "chat", model = "error-mid" }}]
"""


@dataclass
class Stack:
    server: ServerProcess
    chat: AgentOpenAIUpstream
    gemini: GeminiEmulator
    claude: AnthropicFamilyEmulator


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    gemini_binary()
    chat, claude = AgentOpenAIUpstream().start(), AnthropicFamilyEmulator().start()
    with GeminiEmulator() as gemini:
        workdir = tmp_path_factory.mktemp("gemini-cli")
        assert claude.aws.token is not None
        env = {
            "EMU_GEMINI_KEY": gemini.api_key,
            "EMU_ANTHROPIC_KEY": claude.api_key,
            "EMU_VERTEX_TOKEN": claude.vertex_token,
            "AWS_ACCESS_KEY_ID": claude.aws.access_key,
            "AWS_SECRET_ACCESS_KEY": claude.aws.secret_key,
            "AWS_SESSION_TOKEN": claude.aws.token,
            "AWS_CONFIG_FILE": str(workdir / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(workdir / "no-aws-credentials"),
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        server = start_server(workdir, gateway_config(workdir, chat, gemini, claude), extra_env=env)
        yield Stack(server, chat, gemini, claude)
        server.stop()
    chat.stop()
    claude.stop()


def run_gemini(stack: Stack, model: str, prompt: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`gemini -p` as docs/agents.md shows it: the door's base URL, a tidegate key, the settings above."""
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS))
    work.mkdir(exist_ok=True)
    (tmp_path / "tmp").mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "TMPDIR": str(tmp_path / "tmp"),  # where the CLI writes its error reports
        "GOOGLE_GEMINI_BASE_URL": stack.server.base_url,
        "GEMINI_API_KEY": stack.server.key,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",  # headless in a fresh directory: no trust prompt
        "NO_PROXY": "127.0.0.1,localhost",
        "LANG": "C.UTF-8",
    }
    return subprocess.run(
        [str(GEMINI), "-p", prompt, "-m", model],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def generations(stack: Stack, model: str) -> list[dict[str, Any]]:
    listed = httpx.get(f"{stack.server.base_url}/api/v1/generations", headers=stack.server.headers).json()
    found = [g for g in listed["data"] if g["model"] == model]
    return [
        httpx.get(f"{stack.server.base_url}/api/v1/generations/{g['id']}", headers=stack.server.headers).json()
        for g in found
    ]


def test_the_settings_are_those_docs_agents_md_shows() -> None:
    section = DOCS.read_text().split("### Gemini CLI", 1)[1]
    shown = section.split("```json", 1)[1].split("```", 1)[0]
    assert json.loads(shown) == SETTINGS


def test_gemini_cli_answers_a_prompt(stack: Stack, tmp_path: Path) -> None:
    done = run_gemini(stack, "gc-hello", "Say hello", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == HELLO, done.stdout + done.stderr
    sent = stack.chat.last("text").body  # the CLI's system instruction and function tools, translated
    assert sent["messages"][0]["role"] == "system" and sent["messages"][-1]["role"] == "user"
    assert "read_file" in [t["function"]["name"] for t in sent["tools"]] and "top_k" not in sent
    (record,) = generations(stack, "gc-hello")
    assert record["status"] == "completed" and record["output_text"] == HELLO
    assert record["usage"]["prompt_tokens"] > 0 and record["usage"]["completion_tokens"] > 0


CLAUDE_HOSTS = {"gc-claude": "anthropic", "gc-bedrock": "bedrock", "gc-vertex": "vertex"}


@pytest.mark.parametrize("model", ["gc-chat", "gc-gemini", "gc-claude", "gc-bedrock", "gc-vertex"])
def test_gemini_cli_reads_a_file_and_answers(stack: Stack, model: str, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    notes = work / "notes.txt"
    notes.write_text(f"first line\n{READ_MARKER}\nlast line\n")
    done = run_gemini(stack, model, f"Read the file {notes} and tell me its secret line.", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == f"Tool said: {READ_MARKER}", done.stdout + done.stderr
    if model == "gc-chat":  # the second request: the call, then the tool message with what the CLI read
        call, answer = [r.body for r in stack.chat.requests if r.scenario == "read_file"]
        assert "read_file" in [t["function"]["name"] for t in call["tools"]]
        (result,) = [m for m in answer["messages"] if m["role"] == "tool"]
        assert READ_MARKER in json.loads(result["content"])["output"]
    elif model in CLAUDE_HOSTS:  # translated: the call a tool_use block, what the CLI read its tool_result
        dialect = CLAUDE_HOSTS[model]  # (Bedrock's eventstream and Vertex's rawPredict alike)
        call, answer = [r.body for r in stack.claude.requests if r.scenario == "readfile" and r.dialect == dialect]
        assert "read_file" in [t["name"] for t in call["tools"]]
        (result,) = [b for b in answer["messages"][-1]["content"] if b["type"] == "tool_result"]
        assert READ_MARKER in str(result["content"])
    else:  # the body as the CLI sent it: its functionResponse, which the CLI ran itself
        call, answer = [r.body for r in stack.gemini.requests if r.scenario == "readfile"]
        assert "read_file" in [f["name"] for t in call["tools"] for f in t.get("functionDeclarations", [])]
        (part,) = answer["contents"][-1]["parts"]
        assert part["functionResponse"]["name"] == "read_file"
        assert READ_MARKER in part["functionResponse"]["response"]["output"]
    records = generations(stack, model)
    assert len(records) == 2 and all(r["status"] == "completed" for r in records), records
    assert all(r["usage"]["prompt_tokens"] > 0 and r["usage"]["completion_tokens"] > 0 for r in records)
    assert sorted(r["output_text"] for r in records) == ["", f"Tool said: {READ_MARKER}"]
    if model in CLAUDE_HOSTS:
        assert all(r["cost"] > 0 for r in records), records


def test_gemini_cli_sees_a_mid_stream_failure(stack: Stack, tmp_path: Path) -> None:
    done = run_gemini(stack, "gc-breaks", "Say hello", tmp_path)
    # the door's bare error object after the first bytes: the SDK in the CLI raises it as an API error
    # (status 502), the CLI prints it and exits 1, with only the part that came before on stdout
    assert done.returncode == 1, done.stdout + done.stderr
    assert "UNAVAILABLE" in done.stderr and "The server is overloaded" in done.stderr, done.stderr
    assert list((tmp_path / "tmp").glob("gemini-client-error-*.json"))  # and its report of the error
    assert HELLO not in done.stdout and HELLO.startswith(done.stdout.strip()), done.stdout
    (record,) = generations(stack, "gc-breaks")  # one attempt: `general.maxAttempts = 1`
    assert record["status"] == "failed" and record["error"]["code"] == "upstream_error", record
    assert record["usage"]["prompt_tokens"] > 0 and record["usage"]["completion_tokens"] > 0
