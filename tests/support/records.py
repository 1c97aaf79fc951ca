"""A generation's record as the admin API serves it (GET /api/v1/generations/{id}): read once, or
polled until the generation has ended, since a record is written on its own schedule, after the
response a test reads has already arrived."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tests.support.process import ServerProcess


def fetch_record(
    server: ServerProcess, gid: str, *, headers: dict[str, str] | None = None, timeout: float = 10.0
) -> dict[str, Any]:
    """The record as it is now; it must exist. `headers`: another key's (the server's own by default)."""
    resp = httpx.get(f"{server.base_url}/api/v1/generations/{gid}", headers=headers or server.headers, timeout=timeout)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def wait_record(
    server: ServerProcess,
    gid: str,
    *,
    until: str | None = None,
    within_s: float = 5.0,
    poll_s: float = 0.05,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The record once it left `in_progress` (or reached the status `until`), polled every `poll_s`.
    When `within_s` runs out it is returned as it is: the caller's assertion says what was wrong."""
    deadline = time.monotonic() + within_s
    while True:
        record = fetch_record(server, gid, headers=headers)
        ended = record["status"] == until if until else record["status"] != "in_progress"
        if ended or time.monotonic() > deadline:
            return record
        time.sleep(poll_s)
