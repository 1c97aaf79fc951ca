"""Claude Code, Codex CLI and Gemini CLI (pinned in tests/coding_agents/package.json) each complete a tool
call against a gateway started exactly as `make serve` starts it: no `--config`, the embedded default
(the local SmolLM2-135M through llama.cpp), its SQLite file in a temporary working directory. Nothing
reaches the internet; each agent runs headless with its home in a temporary directory, telemetry off.

Each agent's own tool list is cut to one tool and its system prompt to one line on its command line, so
its prompt fits the local route's context (docs/local-agents.md). A 135M model does not
decide to call a tool from a plain request: the prompt shows it the call (`functions.<name>:` and the
arguments, the function-calling format the local route lists its tools in), and the model's own greedy
choice under the grammar picks that function and writes its arguments. The agent runs the tool, sends
the result back, and the model answers with a message.

The package is installed by `make install` (`npm ci` in tests/coding_agents); without node and npm the
tests skip, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.agents import agent_binary
from tests.support.process import ServerProcess, started_server

MODEL = "local/smollm2"  # the embedded default's chat model
MARKER = "TIDEGATE-LOCAL-SECRET"
# one tool and a one-line system prompt: the prompt fits the local model (docs/local-agents.md)
CLAUDE_ARGS = ["--model", MODEL, "--tools", "Read", "--allowedTools", "Read", "--system-prompt", "You read files."]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # no --config: the embedded default, as `make serve` runs it
    with started_server(tmp_path_factory, "make-serve", None) as started:
        yield started


def records(server: ServerProcess, since: float) -> list[dict[str, Any]]:
    """This test's generations, oldest first, each in full."""
    listed = httpx.get(f"{server.base_url}/api/v1/generations", headers=server.headers).json()["data"]
    ids = [g["id"] for g in listed if g["model"] == MODEL and g["created_at"] >= since]
    full = [httpx.get(f"{server.base_url}/api/v1/generations/{i}", headers=server.headers).json() for i in ids]
    return sorted(full, key=lambda r: r["created_at"])


def assert_call_then_answer(server: ServerProcess, since: float) -> None:
    """The model's tool call first, its message last (with the agent's result in its history). What
    it does between is its own: a 135M model sometimes calls again, with the result as its argument."""
    turns = records(server, since)
    assert len(turns) >= 2 and all(t["status"] == "completed" for t in turns), turns
    call, answer = turns[0], turns[-1]
    assert call["finish_reason"] == "tool_calls", call
    assert answer["status"] == "completed" and answer["finish_reason"] in ("stop", "length"), answer
    assert answer["output_text"].strip(), answer
    # the result the agent sent back is in the second turn's prompt
    assert answer["usage"]["prompt_tokens"] > call["usage"]["prompt_tokens"], (call, answer)


def agent_env(tmp_path: Path, server: ServerProcess, **extra: str) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "NO_PROXY": "127.0.0.1,localhost",
        "LANG": "C.UTF-8",
        **extra,
    }


def run_agent(
    command: list[str], env: dict[str, str], cwd: Path | None = None, again_if: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The agent headless, to its end (it must succeed); its output kept for the assertions.
    `again_if`: what the agent prints when the model's answer ran to the end of its room; the run is
    made once more then, and only then (a 135M model's answer after a tool result sometimes never
    ends: 1 run in about 10 here; the gateway reporting the cut is right, the agent then fails)."""
    for attempt in range(2):
        done = subprocess.run(
            command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600
        )
        if done.returncode == 0 or again_if is None or again_if not in done.stdout or attempt == 1:
            break
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_claude_code_calls_a_tool_on_the_default_config(server: ServerProcess, tmp_path: Path) -> None:
    claude = agent_binary("claude", "Claude Code")
    work = tmp_path / "work"
    work.mkdir()
    notes = work / "notes.txt"
    notes.write_text(f"{MARKER}\n")
    env = agent_env(
        tmp_path,
        server,
        ANTHROPIC_BASE_URL=server.base_url,
        ANTHROPIC_AUTH_TOKEN=server.key,
        DISABLE_TELEMETRY="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        CLAUDE_CODE_MAX_RETRIES="0",
    )
    prompt = "functions.Read:\n" + json.dumps({"file_path": str(notes)})
    since = time.time()
    done = run_agent(
        [str(claude), "-p", prompt, *CLAUDE_ARGS, "--max-turns", "3", "--output-format", "stream-json", "--verbose"],
        cwd=work,
        env=env,
    )
    seen = events(done.stdout)
    uses = [b for e in seen if e.get("type") == "assistant" for b in e["message"]["content"] if b["type"] == "tool_use"]
    # the arguments are the model's: the path it was shown, and maybe an optional field of the schema
    assert (uses[0]["name"], uses[0]["input"]["file_path"]) == ("Read", str(notes)), done.stdout
    results = [
        b for e in seen if e.get("type") == "user" for b in e["message"]["content"] if b["type"] == "tool_result"
    ]
    assert MARKER in json.dumps(results[0]["content"]), done.stdout  # Claude Code read it
    assert seen[-1]["type"] == "result" and seen[-1]["subtype"] == "success", seen[-1]
    assert_call_then_answer(server, since)


def test_codex_runs_a_command_on_the_default_config(server: ServerProcess, tmp_path: Path) -> None:
    codex = agent_binary("codex", "Codex CLI")
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    (home / ".codex" / "config.toml").write_text(
        f'model = "{MODEL}"\nmodel_provider = "tidegate"\ncheck_for_update_on_startup = false\n'
        "[analytics]\nenabled = false\n[model_providers.tidegate]\n"
        f'name = "tidegate"\nbase_url = "{server.base_url}/v1"\nwire_api = "responses"\n'
        'env_key = "TIDEGATE_API_KEY"\nrequest_max_retries = 0\nstream_max_retries = 0\n'
    )
    instructions = tmp_path / "instructions.md"
    instructions.write_text("You run shell commands.\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text(f"{MARKER}\n")
    env = agent_env(tmp_path, server, CODEX_HOME=str(home / ".codex"), TIDEGATE_API_KEY=server.key)
    prompt = "functions.exec_command:\n" + json.dumps({"cmd": "cat notes.txt"})
    # Codex sends web_search (a hosted tool) on every request: the local route leaves it out (the default)
    cut = ["multi_agent", "goals", "view_image", "apps", "plugins", "tool_suggest", "sleep_tool", "skill_search"]
    since = time.time()
    done = run_agent(
        [str(codex), "exec", "--strict-config", "--skip-git-repo-check", "--json"]
        + ["--dangerously-bypass-approvals-and-sandbox", "-C", str(work)]
        + [arg for feature in cut for arg in ("--disable", feature)]
        + ["-c", f'model_instructions_file="{instructions}"', prompt],
        env=env,
        again_if="Incomplete response returned, reason: max_output_tokens",
    )
    seen = events(done.stdout)
    ran = [e["item"] for e in seen if e.get("type") == "item.completed" and e["item"]["type"] == "command_execution"]
    assert ran and ran[0]["exit_code"] == 0, done.stdout
    assert MARKER in ran[0]["aggregated_output"], done.stdout  # Codex ran it: the file's line
    assert_call_then_answer(server, since)


def test_gemini_cli_reads_a_file_on_the_default_config(server: ServerProcess, tmp_path: Path) -> None:
    gemini = agent_binary("gemini", "Gemini CLI")
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False, "maxAttempts": 1},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "tools": {"core": ["read_file"]},  # one tool: the prompt fits the local model
        # the CLI sends temperature 1: a 135M model's arguments then miss the path (docs/local-agents.md)
        "modelConfigs": {
            "customOverrides": [
                {
                    "match": {"model": MODEL},
                    "modelConfig": {"generateContentConfig": {"temperature": 0.2, "maxOutputTokens": 256}},
                }
            ]
        },
    }
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    system = tmp_path / "system.md"
    system.write_text("You read files.\n")
    work = tmp_path / "work"
    work.mkdir()
    notes = work / "notes.txt"
    notes.write_text(f"{MARKER}\n")
    (tmp_path / "tmp").mkdir()
    env = agent_env(
        tmp_path,
        server,
        TMPDIR=str(tmp_path / "tmp"),
        GOOGLE_GEMINI_BASE_URL=server.base_url,
        GEMINI_API_KEY=server.key,
        GEMINI_CLI_TRUST_WORKSPACE="true",
        GEMINI_SYSTEM_MD=str(system),  # its system prompt, replaced by one line
    )
    prompt = "functions.read_file:\n" + json.dumps({"file_path": str(notes)})
    since = time.time()
    done = run_agent(
        [str(gemini), "-p", prompt, "-m", MODEL, "--output-format", "stream-json"],
        cwd=work,
        env=env,
    )
    seen = events(done.stdout)
    uses = [e for e in seen if e.get("type") == "tool_use"]
    assert uses and uses[0]["tool_name"] == "read_file", done.stdout
    assert uses[0]["parameters"]["file_path"] == str(notes), done.stdout
    results = [e for e in seen if e.get("type") == "tool_result"]
    assert results[0]["status"] == "success", done.stdout  # the CLI read it
    assert_call_then_answer(server, since)


def test_the_sessions_api_lists_the_agents_sessions(server: ServerProcess) -> None:
    """What the console's sessions view shows (docs/sessions.md): after the tests above, Claude Code's
    and Codex's sessions on the default config, each with its two turns and no failure. (The Gemini
    API has no session field: Gemini CLI's requests show their agent on their records instead.)"""
    listed = httpx.get(f"{server.base_url}/api/v1/sessions", headers=server.headers).json()["data"]
    by_agent = {s["agent"]: s for s in listed}
    for agent in ("claude-code", "codex"):
        if agent not in by_agent:
            pytest.skip(f"{agent} did not run here (see its test)")
        assert by_agent[agent]["requests"] >= 2 and by_agent[agent]["failed"] == 0, by_agent[agent]
        assert by_agent[agent]["models"] == [MODEL]
