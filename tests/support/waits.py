"""Waiting for what another process or thread does: polled against a deadline rather than slept
for, so a test waits only as long as the thing takes, and a loaded machine gets slack, not a flake."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

import httpx
import pytest


def poll_until(check: Callable[[], object], within_s: float, *, poll_s: float = 0.05) -> bool:
    """Calls `check` every `poll_s` until it is true or `within_s` ran out; whether it came true.
    For a caller whose own assertion afterwards says what was expected."""
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True


def wait_until(
    check: Callable[[], object],
    within_s: float,
    what: str,
    *,
    poll_s: float = 0.05,
    log: Callable[[], str] | None = None,
) -> None:
    """`poll_until`, failing the test when time runs out: `what` did not happen, and `log()` (the
    gateway's log, say) to show why."""
    if not poll_until(check, within_s, poll_s=poll_s):
        pytest.fail(f"{what} did not happen within {within_s} s" + (f"; the log:\n{log()}" if log else ""))


def wait_for_log(log: Callable[[], str], text: str, within_s: float = 30.0) -> None:
    """Until `text` shows in `log()` (a gateway's `server.log`); the whole log when it never does."""
    poll_until(lambda: text in log(), within_s)
    assert text in log(), log()


def is_ready(base_url: str, headers: dict[str, str] | None = None) -> bool:
    """Whether `base_url`/readyz answers 200 now (a refused or timed-out connection: not yet)."""
    try:
        return httpx.get(base_url + "/readyz", headers=headers, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def wait_ready(
    base_url: str,
    within_s: float = 60.0,
    *,
    headers: dict[str, str] | None = None,
    proc: subprocess.Popen[bytes] | None = None,
    log: Callable[[], str] = str,
    name: str = "tidegate",
) -> None:
    """Until `base_url`/readyz answers 200. RuntimeError with `log()` when `proc` (the server's
    process) exits first or `within_s` runs out: a server that cannot start says why at once."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{log()}")
        if is_ready(base_url, headers):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{name} did not become ready:\n{log()}")
