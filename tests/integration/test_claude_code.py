"""The real Claude Code (`@anthropic-ai/claude-code`, pinned in tests/coding_agents/package.json) against a
real tidegate through `/v1/messages` (docs/agents.md): `claude -p` headless, its home in a temporary
directory, telemetry and non-essential traffic off, nothing reached but loopback. The upstreams are the
emulators: an Anthropic route (passthrough), Bedrock (AWS eventstream) and Vertex (Messages SSE at the
Vertex path) routes, an OpenAI-compatible chat route and a Gemini route (translated), whose model
(scenario `readfile`) calls Claude Code's `Read` tool on the file the prompt names and then answers with
the line Claude Code read for it.

The package is installed by `make install` (`npm ci` in tests/coding_agents); when it is missing the
tests install it the same way. Without node and npm they skip, saying so.
"""

from __future__ import annotations

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
from tests.support.agents import AGENTS, agent_binary
from tests.support.process import ServerProcess, sqlite_url, start_server

CLAUDE = AGENTS / "node_modules" / ".bin" / "claude"


def claude_binary() -> Path:
    return agent_binary("claude", "Claude Code")


PRICING = "{ prompt = 3.0, completion = 15.0 }"


def gateway_config(
    workdir: Path, chat: AgentOpenAIUpstream, claude: AnthropicFamilyEmulator, gemini: GeminiEmulator
) -> str:
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
[providers.gemini]
kind = "gemini"
base_url = "{gemini.base_url}/v1beta"
api_key_env = "EMU_GEMINI_KEY"
[models."cc-claude"]
routes = [{{ provider = "claude", model = "claude-emu--readfile" }}]
pricing = {PRICING}
[models."cc-chat"]
routes = [{{ provider = "chat", model = "readfile" }}]
pricing = {PRICING}
[models."cc-bedrock"]
routes = [{{ provider = "bedrock", model = "anthropic.claude-emu--readfile" }}]
pricing = {PRICING}
[models."cc-vertex"]
routes = [{{ provider = "vertex", model = "claude-emu--readfile" }}]
pricing = {PRICING}
[models."cc-gemini"]
routes = [{{ provider = "gemini", model = "gemini-2.5-flash--readfile" }}]
pricing = {PRICING}
[models."cc-hello"]
routes = [{{ provider = "claude", model = "claude-emu" }}]
[models."cc-breaks"]
routes = [{{ provider = "claude", model = "claude-emu--error" }}]
[models."cc-fallback"]
routes = [{{ provider = "claude", model = "claude-emu--500" }}, {{ provider = "chat", model = "readfile" }}]
"""


@dataclass
class Stack:
    server: ServerProcess
    chat: AgentOpenAIUpstream
    claude: AnthropicFamilyEmulator
    gemini: GeminiEmulator


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    claude_binary()
    chat, claude = AgentOpenAIUpstream().start(), AnthropicFamilyEmulator().start()
    assert claude.aws.token is not None
    workdir = tmp_path_factory.mktemp("claude-code")
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
    with GeminiEmulator() as gemini:
        env["EMU_GEMINI_KEY"] = gemini.api_key
        server = start_server(workdir, gateway_config(workdir, chat, claude, gemini), extra_env=env)
        yield Stack(server, chat, claude, gemini)
        server.stop()
    chat.stop()
    claude.stop()


def run_claude(
    stack: Stack,
    model: str,
    prompt: str,
    tmp_path: Path,
    key_var: str = "ANTHROPIC_AUTH_TOKEN",
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`claude -p` as docs/agents.md shows it: the base URL and a tidegate key, nothing else."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": stack.server.base_url,
        key_var: stack.server.key,
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "LANG": "C.UTF-8",
        **(extra_env or {}),
    }
    return subprocess.run(
        [str(CLAUDE), "-p", prompt, "--model", model, "--allowedTools", "Read"],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )


def generations(stack: Stack, model: str) -> list[dict[str, Any]]:
    listed = httpx.get(f"{stack.server.base_url}/api/v1/generations", headers=stack.server.headers).json()
    return [g for g in listed["data"] if g["model"] == model]


@pytest.mark.parametrize("key_var", ["ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY"])
def test_claude_code_answers_a_prompt(stack: Stack, key_var: str, tmp_path: Path) -> None:
    done = run_claude(stack, "cc-hello", "Say hello", tmp_path, key_var)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Hello from the emulator." in done.stdout
    sent = stack.claude.last("anthropic")
    assert sent.headers["anthropic-beta"].startswith("claude-code-")  # as Claude Code sent it
    assert sent.body["model"] == "claude-emu" and sent.path == "/v1/messages"


@pytest.mark.parametrize("model", ["cc-claude", "cc-chat", "cc-bedrock", "cc-vertex", "cc-gemini"])
def test_claude_code_reads_a_file_and_answers(stack: Stack, model: str, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    notes = work / "notes.txt"
    notes.write_text(f"first line\n{READ_MARKER}\nlast line\n")
    done = run_claude(stack, model, f"Read the file {notes} and tell me its secret line.", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Tool said: " in done.stdout and READ_MARKER in done.stdout, done.stdout + done.stderr
    records = generations(stack, model)
    assert len(records) == 2 and all(r["status"] == "completed" for r in records), records
    assert all(r["usage"]["prompt_tokens"] > 0 and r["usage"]["completion_tokens"] > 0 for r in records)
    assert all(r["cost"] > 0 for r in records), records
    # both turns in one session: the one in Claude Code's metadata.user_id (docs/sessions.md)
    sessions = {r["agent_session"] for r in records}
    assert len(sessions) == 1 and None not in sessions, records
    assert all(r["hints"]["agent"] == "claude-code" for r in records), records
    session = sessions.pop()
    user_ids = {r["hints"]["metadata"]["user_id"] for r in records}
    (user_id,) = user_ids
    assert session in user_id and session != user_id, records  # the session part, not the whole
    upstream = {"cc-bedrock": "bedrock", "cc-vertex": "vertex", "cc-claude": "anthropic"}.get(model)
    if upstream is not None:  # both turns reached the emulator in that wire format
        sent = [r for r in stack.claude.requests if r.dialect == upstream and r.scenario == "readfile"]
        assert len(sent) == 2, sent
    if model == "cc-gemini":
        assert len([r for r in stack.gemini.requests if r.scenario == "readfile"]) == 2


def test_claude_code_sees_a_mid_stream_failure(stack: Stack, tmp_path: Path) -> None:
    # Claude Code retries an overloaded stream by itself (ten times, backing off for minutes) unless told not to
    done = run_claude(stack, "cc-breaks", "Say hello", tmp_path, extra_env={"CLAUDE_CODE_MAX_RETRIES": "0"})
    assert done.returncode != 0, done.stdout + done.stderr
    records = generations(stack, "cc-breaks")
    assert records and all(r["status"] == "failed" for r in records), records
    assert all(r["error"]["code"] == "upstream_error" for r in records), records


def test_claude_code_is_served_by_the_fallback_route(stack: Stack, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    notes = work / "notes.txt"
    notes.write_text(f"{READ_MARKER}\n")
    done = run_claude(stack, "cc-fallback", f"Read the file {notes} and tell me its secret line.", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert READ_MARKER in done.stdout
    records = generations(stack, "cc-fallback")
    assert len(records) == 2 and all(r["provider"] == "chat" for r in records), records
    # the first turn fell back; the second went to the route that served it (prompt-cache affinity,
    # docs/routing.md): its session's affine route first
    assert [r["attempts"] for r in records] == [1, 2], records  # newest first
