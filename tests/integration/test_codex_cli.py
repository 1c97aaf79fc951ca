"""The real Codex CLI (`@openai/codex`, pinned in tests/coding_agents/package.json) against a real
tidegate through `/v1/responses` (docs/agents.md): `codex exec` headless, its home in a temporary directory,
update checks and analytics off, nothing reached but loopback. The upstreams are the emulators: an
OpenAI-compatible chat route, an Anthropic route, a Gemini route and a Responses API route (passthrough), whose model
(scenario `shell`) calls Codex's shell tool and then answers with the command's output, which Codex
ran itself.

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

from tests.emulators.anthropic_upstream import AnthropicFamilyEmulator
from tests.emulators.gemini_upstream import GeminiEmulator
from tests.emulators.openai_agent_upstream import AgentOpenAIUpstream
from tests.emulators.openai_responses_upstream import ResponsesUpstream
from tests.support.agents import AGENTS, agent_binary
from tests.support.process import ServerProcess, sqlite_url, start_server

CODEX = AGENTS / "node_modules" / ".bin" / "codex"
ANSWER = "Tool said: tidegate-42"  # the emulators' answer once Codex ran `echo tidegate-$((6*7))`


def codex_binary() -> Path:
    return agent_binary("codex", "Codex CLI")


def gateway_config(
    workdir: Path,
    chat: AgentOpenAIUpstream,
    claude: AnthropicFamilyEmulator,
    responses: ResponsesUpstream,
    gemini: GeminiEmulator,
) -> str:
    return f"""
[server]
host = "127.0.0.1"
[store]
url = "{sqlite_url(workdir)}"
[providers.chat]
kind = "openai"
base_url = "{chat.base_url}"
[providers.oai]
kind = "openai"
base_url = "{responses.base_url}"
responses = true
[providers.claude]
kind = "anthropic"
base_url = "{claude.base_url}"
api_key_env = "EMU_ANTHROPIC_KEY"
[providers.gemini]
kind = "gemini"
base_url = "{gemini.base_url}/v1beta"
api_key_env = "EMU_GEMINI_KEY"
[models."agent-chat"]
routes = [{{ provider = "chat", model = "shell" }}]
[models."agent-responses"]
routes = [{{ provider = "oai", model = "shell" }}]
[models."agent-claude"]
routes = [{{ provider = "claude", model = "claude-emu--shell" }}]
[models."agent-gemini"]
routes = [{{ provider = "gemini", model = "gemini-2.5-flash--shell" }}]
[models."agent-claude-breaks"]
routes = [{{ provider = "claude", model = "claude-emu--error" }}]
[models."agent-fallback"]
routes = [{{ provider = "claude", model = "claude-emu--500" }}, {{ provider = "chat", model = "shell" }}]
"""


# what docs/agents.md shows (`model` is a tidegate model id; `TIDEGATE_API_KEY` holds a tidegate key)
CODEX_CONFIG = """model = "{model}"
model_provider = "tidegate"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.tidegate]
name = "tidegate"
base_url = "{base_url}/v1"
wire_api = "responses"
env_key = "TIDEGATE_API_KEY"
request_max_retries = 0
stream_max_retries = 0
"""


@dataclass
class Stack:
    server: ServerProcess
    chat: AgentOpenAIUpstream
    claude: AnthropicFamilyEmulator
    responses: ResponsesUpstream
    gemini: GeminiEmulator
    workdir: Path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    codex_binary()
    chat, claude = AgentOpenAIUpstream().start(), AnthropicFamilyEmulator().start()
    responses = ResponsesUpstream().start()
    workdir = tmp_path_factory.mktemp("codex")
    with GeminiEmulator() as gemini:
        config = gateway_config(workdir, chat, claude, responses, gemini)
        env = {"EMU_ANTHROPIC_KEY": claude.api_key, "EMU_GEMINI_KEY": gemini.api_key}
        server = start_server(workdir, config, extra_env=env)
        yield Stack(server, chat, claude, responses, gemini, workdir)
        server.stop()
    chat.stop()
    claude.stop()
    responses.stop()


def run_codex(stack: Stack, model: str, prompt: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    config = CODEX_CONFIG.format(model=model, base_url=stack.server.base_url)
    (home / ".codex" / "config.toml").write_text(config)
    work = tmp_path / "work"
    work.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "CODEX_HOME": str(home / ".codex"),
        "TIDEGATE_API_KEY": stack.server.key,
        "NO_PROXY": "127.0.0.1,localhost",
        "LANG": "C.UTF-8",
    }
    return subprocess.run(
        [
            str(CODEX),
            "exec",
            "--strict-config",  # a misspelt key above is an error, not a silently ignored setting
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",  # the test's temp dir is the sandbox
            "-C",
            str(work),
            prompt,
        ],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )


def generations(stack: Stack, model: str) -> list[dict[str, Any]]:
    listed = httpx.get(f"{stack.server.base_url}/api/v1/generations", headers=stack.server.headers).json()
    return [g for g in listed["data"] if g["model"] == model]


@pytest.mark.parametrize("model", ["agent-chat", "agent-claude", "agent-gemini", "agent-responses"])
def test_codex_runs_a_shell_command_and_answers(stack: Stack, model: str, tmp_path: Path) -> None:
    done = run_codex(stack, model, "Print the magic number with the shell.", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert ANSWER in done.stdout, done.stdout + done.stderr
    records = generations(stack, model)
    assert len(records) == 2 and all(r["status"] == "completed" for r in records), records
    assert all(r["usage"]["prompt_tokens"] > 0 and r["usage"]["completion_tokens"] > 0 for r in records)
    assert {r["output_text"] for r in records} == {"", ANSWER}  # the call's turn, then the answer's
    # both turns in one session: Codex's prompt_cache_key, its agent by its User-Agent (docs/sessions.md)
    sessions = {r["agent_session"] for r in records}
    assert len(sessions) == 1 and None not in sessions, records
    assert all(r["hints"]["agent"] == "codex" and r["hints"]["prompt_cache_key"] in sessions for r in records)
    if model == "agent-chat":  # what Codex sent that a chat upstream takes, and what it cannot run
        sent = stack.chat.last("shell").body
        assert sent["prompt_cache_key"] and sent["parallel_tool_calls"] is True
        names = [t["function"]["name"] for t in sent["tools"]]
        assert "exec_command" in names and "web_search" not in names  # dropped: drop_hosted_tools, the default
        assert any(n.startswith("multi_agent_v1__") for n in names)  # a namespace's tools, flattened
    if model == "agent-gemini":  # the call, then its functionResponse with what Codex ran
        call, answer = [r.body for r in stack.gemini.requests if r.scenario == "shell"]
        assert "exec_command" in [f["name"] for t in call["tools"] for f in t.get("functionDeclarations", [])]
        (part,) = [p for p in answer["contents"][-1]["parts"] if "functionResponse" in p]
        assert part["functionResponse"]["name"] == "exec_command"


def test_codex_sees_a_mid_stream_failure(stack: Stack, tmp_path: Path) -> None:
    done = run_codex(stack, "agent-claude-breaks", "Say hello.", tmp_path)
    assert done.returncode != 0, done.stdout + done.stderr
    # the stream's `response.failed` reaches Codex with the upstream's words (codex retries none: the config)
    assert "Overloaded" in done.stderr, done.stderr
    records = generations(stack, "agent-claude-breaks")
    assert records and records[0]["status"] == "failed" and records[0]["error"]["code"] == "upstream_error"


def test_codex_is_served_by_the_fallback_route(stack: Stack, tmp_path: Path) -> None:
    done = run_codex(stack, "agent-fallback", "Print the magic number with the shell.", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert ANSWER in done.stdout
    records = generations(stack, "agent-fallback")
    assert len(records) == 2 and all(r["provider"] == "chat" for r in records), records
    # the first turn fell back; the second went to the route that served it (prompt-cache affinity,
    # docs/routing.md): its session's affine route first
    assert [r["attempts"] for r in records] == [1, 2], records  # newest first
