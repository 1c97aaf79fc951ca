"""The seed's "Stream Responses in JavaScript" loop (openai-node under node) against a real tidegate and
the emulators: a clean answer on every HTTP provider kind ends in `response.completed` (exit 0, the
answer on stdout); every injected failure after the commit point (in-band error, dropped upstream
connection, idle stall, truncated stream, undecodable data) reaches the loop as `response.failed`,
which throws (non-zero exit) — and the replay of the loop's own Idempotency-Key agrees that the
generation failed, with the partial answer the loop printed. A failure before the stream and a gateway
that dies mid-stream make the loop throw too.

The `openai` npm package is installed once into a cache directory outside the repo (OPENAI_NODE is
the pinned version; $TIDEGATE_NODE_CACHE overrides the place) and reused; node and npm are required:
without them the tests fail, they never skip.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import pytest

from tests.conformance.stack import FAULTS, REMOTE_KINDS, Stack, fault_scenario, route, running_stack
from tests.support.process import start_server

OPENAI_NODE = "7.59.0"
NODE_CACHE = Path(os.environ.get("TIDEGATE_NODE_CACHE") or Path.home() / ".cache" / "tidegate-node")
LOOP_SOURCE = Path(__file__).resolve().parent.parent / "seed_clients" / "responses_loop.mjs"
KEEPALIVE = 0.2
IDLE = 1.0
ANSWER = {"openai": "Hello, world \u00e9\u2713!", "default": "Hello from the emulator."}
FAILED = re.compile(r"Error: Stream did not complete: ([0-9a-f-]{36})")
CASES = [(fault, kind) for fault in FAULTS for kind in REMOTE_KINDS]


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: the seed's JavaScript Responses loop cannot be checked")
    return found


def installed_loop() -> Path:
    """The loop script placed beside a cached `node_modules/openai` (ESM resolves imports from the
    script's own directory, so the script runs from the cache, never from the repo)."""
    node, npm = _tool("node"), _tool("npm")
    NODE_CACHE.mkdir(parents=True, exist_ok=True)
    with open(NODE_CACHE / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent test runs share the cache
        manifest = NODE_CACHE / "node_modules" / "openai" / "package.json"
        have = orjson.loads(manifest.read_bytes()).get("version") if manifest.exists() else None
        if have != OPENAI_NODE:
            done = subprocess.run(
                [npm, "install", "--prefix", str(NODE_CACHE), "--no-audit", "--no-fund", f"openai@{OPENAI_NODE}"],
                capture_output=True,
                text=True,
                timeout=300,
            )
            if done.returncode != 0:
                pytest.fail(f"npm could not install openai@{OPENAI_NODE}:\n{done.stdout}\n{done.stderr}")
        script = NODE_CACHE / LOOP_SOURCE.name
        source = LOOP_SOURCE.read_bytes()
        if not script.exists() or script.read_bytes() != source:
            tmp = script.with_suffix(".tmp")
            tmp.write_bytes(source)
            tmp.replace(script)
    probe = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    assert probe.returncode == 0, probe.stderr
    return script


@pytest.fixture(scope="module")
def loop_script() -> Path:
    return installed_loop()


def _models() -> dict[str, list[tuple[str, str]]]:
    models = {f"{kind}/text": [route(kind, "text")] for kind in REMOTE_KINDS}
    for fault, kind in CASES:  # a twin behind each fault: never used once the stream committed
        models[f"{kind}/{fault}"] = [route(kind, fault_scenario(fault, kind)), route(kind, "text", twin=True)]
    models["openai/slow"] = [route("openai", "slow:0.05")]
    return models


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    settings = {"keepalive_s": KEEPALIVE, "upstream_idle_timeout_s": IDLE}
    with running_stack(tmp_path_factory.mktemp("js-responses"), _models(), server=settings) as st:
        yield st


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str


def start_loop(script: Path, base_url: str, key: str, model: str) -> subprocess.Popen[str]:
    env = {**os.environ, "TIDEGATE_API_KEY": key, "NO_COLOR": "1"}
    cmd = [_tool("node"), str(script), base_url + "/v1", model]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], timeout: float = 30) -> Run:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the JavaScript Responses loop hung:\n{out}\n{err}")
    return Run(proc.returncode, out, err)


def run_loop(script: Path, stack: Stack, model: str) -> Run:
    return finish(start_loop(script, stack.server.base_url, stack.server.key, model))


def replay(stack: Stack, key: str) -> httpx.Response:
    headers = {**stack.server.headers, "Idempotency-Key": key}
    return httpx.post(stack.server.base_url + "/api/v1/llm/responses/replay", headers=headers, timeout=10)


@pytest.mark.parametrize("kind", REMOTE_KINDS)
def test_clean_answer_completes(loop_script: Path, stack: Stack, kind: str) -> None:
    run = run_loop(loop_script, stack, f"{kind}/text")
    assert run.code == 0, f"the loop judged a clean answer incomplete:\n{run.stdout}\n{run.stderr}"
    assert run.stdout == ANSWER.get(kind, ANSWER["default"])
    assert "Error" not in run.stderr, run.stderr


@pytest.mark.parametrize(("fault", "kind"), CASES, ids=[f"{f}-{k}" for f, k in CASES])
def test_failure_after_commit_throws(loop_script: Path, stack: Stack, fault: str, kind: str) -> None:
    t0 = time.monotonic()
    run = run_loop(loop_script, stack, f"{kind}/{fault}")
    elapsed = time.monotonic() - t0
    assert run.code != 0, f"the loop judged a failed stream complete:\n{run.stdout}\n{run.stderr}"
    # the loop's own throw on `response.failed`, not a transport error or an SDK exception
    found = FAILED.search(run.stderr)
    assert found, run.stderr
    partial = run.stdout
    assert partial.startswith("Hello" if kind == "openai" else "Partial"), partial
    if FAULTS[fault][1] == "upstream_timeout":
        assert elapsed < IDLE + 5, elapsed  # the stall ended by the idle timeout, not by the upstream
    # the key the loop sent names the generation that failed, with what the loop printed
    resp = replay(stack, found.group(1))
    assert resp.status_code == 502, resp.text
    body = resp.json()
    assert body["status"] == "failed" and body["error"]["code"] == FAULTS[fault][1]
    assert body["partial_output"] == partial


def test_failure_before_stream_throws(loop_script: Path, stack: Stack) -> None:
    run = run_loop(loop_script, stack, "nope/missing-model")
    assert run.code != 0 and run.stdout == ""
    assert "404" in run.stderr and "Stream did not complete" not in run.stderr, run.stderr


def test_gateway_dying_mid_stream_throws(loop_script: Path, stack: Stack, tmp_path: Path) -> None:
    """A killed gateway writes no terminal event: the loop must notice `response.completed` never came."""
    store = tmp_path / "own.db"
    config = stack.server.config_path.read_text().replace(str(stack.server.workdir / "tidegate.db"), str(store))
    assert str(store) in config
    victim = start_server(tmp_path, config, extra_env=stack.server.env)
    try:
        proc = start_loop(loop_script, victim.base_url, victim.key, "openai/slow")
        before = sum(1 for q in list(stack.oai.requests) if q.scenario == "slow")
        deadline = time.monotonic() + 20
        while sum(1 for q in list(stack.oai.requests) if q.scenario == "slow") == before:
            assert time.monotonic() < deadline, "the loop never reached the upstream"
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        time.sleep(0.5)  # the loop is printing ticks now
        victim.kill()
        run = finish(proc)
    finally:
        victim.stop()
    assert run.code != 0, f"the loop judged a cut stream complete:\n{run.stdout}\n{run.stderr}"
    assert run.stdout.startswith("tick0 "), run.stdout
    assert "Interrupted stream" in run.stderr or "terminated" in run.stderr, run.stderr
