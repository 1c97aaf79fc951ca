"""The real coding agents the tests drive (Codex CLI, Claude Code, Gemini CLI), pinned in
tests/coding_agents/package.json and installed there by `make install` (`npm ci`); a test run on a
tree where that has not happened installs them once, under a lock that concurrent runs share."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

import pytest

AGENTS = Path(__file__).resolve().parents[1] / "coding_agents"


def agent_binary(name: str, what: str) -> Path:
    """`node_modules/.bin/<name>`, installed first if missing; the test skips (saying why) where
    node and npm are not installed. `what`: the agent's name, for that reason."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip(f"node and npm are not installed: {what} (an npm package) cannot run")
    binary = AGENTS / "node_modules" / ".bin" / name
    with open(AGENTS / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent runs share one node_modules
        if not binary.exists():
            done = subprocess.run(
                ["npm", "ci", "--no-audit", "--no-fund"], cwd=AGENTS, capture_output=True, text=True, timeout=600
            )
            assert done.returncode == 0, f"npm ci in tests/coding_agents failed:\n{done.stdout}\n{done.stderr}"
    return binary
