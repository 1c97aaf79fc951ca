"""The seed document's own stream loops (Python `requests`, JavaScript `fetch` under node) against a
real tidegate and the emulators: every clean answer is judged complete (exit 0), every injected
failure incomplete (non-zero exit) — failures after the commit point on every kind, a failure before
the stream, and a gateway that dies mid-stream.

The keep-alive interval is short (0.2 s) so the loops also meet comment lines between events.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conformance.stack import FAULT_CASES, FAULTS, Stack, fault_scenario, route, running_stack
from tests.support.process import start_server
from tests.support.streams import stream_sse
from tests.support.waits import poll_until

SEED_CLIENTS = Path(__file__).resolve().parent.parent / "seed_clients"
PY_LOOP = SEED_CLIENTS / "seed_loop.py"
JS_LOOP = SEED_CLIENTS / "seed_loop.mjs"
KEEPALIVE = 0.2
IDLE = 1.0


def node_binary() -> str:
    """node is required (CI has it): a missing node fails the JS case loudly, it never skips."""
    found = shutil.which("node") or ("/usr/bin/node" if Path("/usr/bin/node").exists() else None)
    if found is None:
        pytest.fail("node is not installed: the seed's JavaScript fetch loop cannot be checked")
    return found


@dataclass(frozen=True)
class Clean:
    model: str
    routes: list[tuple[str, str]]
    answer: str  # must appear on the loop's stdout


CLEAN = [
    Clean("clean/openai-text", [route("openai", "text")], "Hello, world \u00e9\u2713!"),
    Clean("clean/anthropic-text", [route("anthropic", "text")], "Hello from the emulator."),
    Clean("clean/bedrock-thinking", [route("bedrock", "thinking")], "The answer is 4."),
    Clean("clean/vertex-tools", [route("vertex", "tools")], "Let me check."),
    # keep-alive comments arrive between the second and third chunk (0.6 s of silence < idle 1 s)
    Clean("clean/openai-keepalives", [route("openai", "silence:0.6")], "Hello, world \u00e9\u2713!"),
    # a 429 before the stream falls back to the twin: still one complete answer
    Clean(
        "clean/bedrock-fallback", [route("bedrock", "429"), route("bedrock", "text", twin=True)], "from the emulator."
    ),
]


def _models() -> dict[str, list[tuple[str, str]]]:
    models = {c.model: c.routes for c in CLEAN}
    for fault, kind in FAULT_CASES:
        models[f"{kind}/{fault}"] = [route(kind, fault_scenario(fault, kind))]
    models["before/all-429"] = [route("openai", "http-429:2"), route("anthropic", "429")]
    models["openai/slow"] = [route("openai", "slow:0.05")]
    return models


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    settings = {"keepalive_s": KEEPALIVE, "upstream_idle_timeout_s": IDLE}
    with running_stack(tmp_path_factory.mktemp("seed-loops"), _models(), server=settings) as st:
        yield st


@dataclass
class LoopRun:
    name: str
    code: int
    stdout: str
    stderr: str


def start_loops(base_url: str, key: str, model: str) -> list[tuple[str, subprocess.Popen[str]]]:
    """Both seed loops at once (they are independent clients)."""
    env = {**os.environ, "TIDEGATE_API_KEY": key}
    commands = {
        "python-requests": [sys.executable, str(PY_LOOP), base_url + "/v1", model],
        "node-fetch": [node_binary(), str(JS_LOOP), base_url + "/v1", model],
    }
    return [
        (name, subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for name, cmd in commands.items()
    ]


def finish(procs: list[tuple[str, subprocess.Popen[str]]], timeout: float = 30) -> list[LoopRun]:
    runs = []
    for name, proc in procs:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"the {name} seed loop hung:\n{out}\n{err}")
        runs.append(LoopRun(name, proc.returncode, out, err))
    return runs


def run_loops(stack: Stack, model: str) -> list[LoopRun]:
    return finish(start_loops(stack.server.base_url, stack.server.key, model))


@pytest.mark.parametrize("case", CLEAN, ids=[c.model for c in CLEAN])
def test_clean_answer_is_complete(stack: Stack, case: Clean) -> None:
    for run in run_loops(stack, case.model):
        assert run.code == 0, f"{run.name} judged a clean answer incomplete:\n{run.stdout}\n{run.stderr}"
        assert run.stdout.startswith("generation: ") and case.answer in run.stdout, run.stdout
        assert "error" not in run.stderr.lower()


def test_keepalive_comments_really_reach_the_loops(stack: Stack) -> None:
    """The keep-alive case above is only meaningful if tidegate sent comment lines in that stream."""
    body = {"model": "clean/openai-keepalives", "stream": True, "messages": [{"role": "user", "content": "Hallo!"}]}
    r = stream_sse(stack.chat_url, body, stack.server.headers)
    assert r.done and r.comments >= 1
    assert b"\n: " in r.raw.split(b"data: [DONE]")[0]


@pytest.mark.parametrize(("fault", "kind"), FAULT_CASES, ids=[f"{f}-{k}" for f, k in FAULT_CASES])
def test_failure_after_commit_is_incomplete(stack: Stack, fault: str, kind: str) -> None:
    code = FAULTS[fault][1]
    for run in run_loops(stack, f"{kind}/{fault}"):
        assert run.code != 0, f"{run.name} judged a failed stream complete:\n{run.stdout}\n{run.stderr}"
        assert f"{code}: " in run.stderr and "(partial answer)" in run.stderr, run.stderr
        assert run.stdout.startswith("generation: ")


def test_failure_before_stream_is_incomplete(stack: Stack) -> None:
    for run in run_loops(stack, "before/all-429"):
        assert run.code != 0, run.stdout
        assert "rate_limited: " in run.stderr, run.stderr
        assert "generation:" not in run.stdout


def test_gateway_dying_mid_stream_is_incomplete(stack: Stack, tmp_path: Path) -> None:
    """No failure chunk can be written by a killed gateway: the loops must see the missing [DONE]."""
    store = tmp_path / "own.db"
    config = stack.server.config_path.read_text()
    config = config.replace(str(stack.server.workdir / "tidegate.db"), str(store))
    assert str(store) in config
    victim = start_server(tmp_path, config, extra_env=stack.server.env)
    try:
        procs = start_loops(victim.base_url, victim.key, "openai/slow")
        assert poll_until(
            lambda: sum(1 for q in list(stack.oai.requests) if q.scenario == "slow" and q.closed_at is None) >= 2, 20
        ), "the seed loops never reached the upstream"
        time.sleep(0.5)  # both loops are printing ticks now
        victim.kill()
        runs = finish(procs)
    finally:
        victim.stop()
    for run in runs:
        assert run.code != 0, f"{run.name} judged a cut stream complete:\n{run.stdout}\n{run.stderr}"
        assert "tick0 " in run.stdout, run.stdout
