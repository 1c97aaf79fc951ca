"""Every refused request is visible (docs/observability.md#rejected-requests), through real gateways
on each store: its record (status `rejected`, HTTP status, error code, the key that authenticated,
the model asked for) resolves by its X-Generation-Id, is listed under the `rejected` filter, counts
in the console's error rate by its code and is in the access log; unauthenticated ones keep a
bounded number of records while every one is counted."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream
from tests.support.process import MASTER_KEY, ServerProcess, start_server
from tests.support.store_backends import shared_store_url

CHAT = "/v1/chat/completions"
MASTER = {"Authorization": f"Bearer {MASTER_KEY}"}
PRESENTED = "tg-not-a-key-presented-by-a-stranger-0123"
MAX_BODY = 4096
BURST = 60  # server/rejections.py UNAUTHENTICATED_BURST, as docs/observability.md states it


def _config(store_url: str, emu: OpenAIUpstream) -> str:
    return f"""
[server]
host = "127.0.0.1"
max_body_bytes = {MAX_BODY}
[store]
url = "{store_url}"
[providers.emu]
kind = "openai"
base_url = "{emu.base_url}"
[models.chat]
routes = [{{ provider = "emu", model = "text" }}]
"""


@dataclass
class Stack:
    server: ServerProcess
    keys: dict[str, dict[str, Any]]

    def get(self, path: str, headers: dict[str, str] = MASTER, **params: Any) -> httpx.Response:
        return httpx.get(self.server.base_url + path, params=params, headers=headers, timeout=30)

    def post(self, path: str, body: Any, headers: dict[str, str]) -> httpx.Response:
        return httpx.post(self.server.base_url + path, json=body, headers=headers, timeout=30)


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module", params=["sqlite", "redis", "postgres"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp(f"rejected-{request.param}")
    with OpenAIUpstream() as emu, shared_store_url(request.param, tmp, "rejected") as url:
        server = start_server(tmp / "gw", _config(url, emu))
        try:
            keys = {}
            for name, extra in (("app", {}), ("limited", {"limits": {"rpm": 1}})):
                r = httpx.post(server.base_url + "/api/v1/keys", json={"name": name, **extra}, headers=MASTER)
                assert r.status_code == 201, r.text
                keys[name] = r.json()
            yield Stack(server, keys)
        finally:
            server.stop()
    assert PRESENTED not in server.log() and MASTER_KEY not in server.log()


def _rejected_groups(stack: Stack) -> dict[str, tuple[int, int]]:
    r = stack.get("/api/v1/stats/series", window="hour", by="provider")
    assert r.status_code == 200, r.text
    out: dict[str, tuple[int, int]] = {}
    for s in r.json()["series"]:
        out[s["group"]] = (sum(p["requests"] for p in s["points"]), sum(p["errors"] for p in s["points"]))
    return out


def test_each_refusal_has_a_record_a_log_line_and_a_count(stack: Stack) -> None:
    app, limited = stack.keys["app"], stack.keys["limited"]
    hello = [{"role": "user", "content": "hi"}]
    before = _rejected_groups(stack)
    assert stack.post(CHAT, {"model": "chat", "messages": hello}, _auth(limited["key"])).status_code == 200
    cases = [  # (response, status, code, key id, model asked)
        (
            stack.post(CHAT, {"model": "chat", "messages": hello}, _auth(PRESENTED)),
            401,
            "unauthorized",
            "",
            None,
        ),  # its body is never read
        (
            stack.post(CHAT, {"model": "nope", "messages": hello}, _auth(app["key"])),
            404,
            "model_not_found",
            app["id"],
            "nope",
        ),
        (stack.post(CHAT, {"model": "chat"}, _auth(app["key"])), 400, "invalid_request", app["id"], "chat"),
        (
            stack.post(
                CHAT, {"model": "chat", "messages": [{"role": "user", "content": "x" * MAX_BODY}]}, _auth(app["key"])
            ),
            413,
            "payload_too_large",
            app["id"],
            None,
        ),
        (
            stack.post(CHAT, {"model": "chat", "messages": hello}, _auth(limited["key"])),
            429,
            "rate_limited",
            limited["id"],
            "chat",
        ),
        (stack.post("/v1/chat/complete", {"model": "chat"}, _auth(app["key"])), 404, "not_found", "", None),
        (  # the Gemini door names the model in its path, and answers in Google's shape
            stack.post(
                "/v1beta/models/nowhere:generateContent",
                {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
                {"x-goog-api-key": app["key"]},
            ),
            404,
            "model_not_found",
            app["id"],
            "nowhere",
        ),
    ]
    listed = {g["id"]: g for g in stack.get("/api/v1/generations", status="rejected", limit=200).json()["data"]}
    log = stack.server.log()
    for response, status, code, key_id, asked in cases:
        assert response.status_code == status, response.text
        gid = response.headers["x-generation-id"]
        record = stack.get(f"/api/v1/generations/{gid}").json()
        assert record["status"] == "rejected" and record["key_id"] == key_id, record
        assert record["error"]["status"] == status and record["error"]["code"] == code
        assert record["error"]["model"] == asked
        assert record["model"] == ("chat" if asked == "chat" else "")  # a catalog model only
        assert gid in listed and listed[gid]["status"] == "rejected"
        if key_id:  # the key that made it sees it too; another key does not
            owner = next(k for k in stack.keys.values() if k["id"] == key_id)
            assert stack.get(f"/api/v1/generations/{gid}", _auth(owner["key"])).status_code == 200
            other = stack.keys["app" if owner["name"] == "limited" else "limited"]
            assert stack.get(f"/api/v1/generations/{gid}", _auth(other["key"])).status_code == 404
        line = next(ln for ln in log.splitlines() if f"generation={gid}" in ln)
        assert f" {status} " in line and "outcome=rejected" in line and f"error={code}" in line, line
    after = _rejected_groups(stack)
    for code, n in {"unauthorized": 1, "model_not_found": 2, "invalid_request": 1, "payload_too_large": 1}.items():
        requests, errors = after[f"rejected:{code}"]
        was = before.get(f"rejected:{code}", (0, 0))
        assert (requests - was[0], errors - was[1]) == (n, n), (code, after)
    # the overview's error rate: the one success and the refusals, every refusal an error
    totals = stack.get("/api/v1/stats/series", window="hour").json()["totals"]
    assert totals["errors"] >= len(cases) and totals["requests"] >= len(cases) + 1
    metrics = httpx.get(stack.server.base_url + "/metrics", timeout=30).text
    for code in ("unauthorized", "model_not_found", "invalid_request", "payload_too_large", "rate_limited"):
        assert f'tidegate_rejected_total{{code="{code}"}}' in metrics, code
    # a successful request leaves its own record, never a rejected one
    ok = stack.post(CHAT, {"model": "chat", "messages": hello}, _auth(app["key"]))
    assert (
        ok.status_code == 200
        and stack.get(f"/api/v1/generations/{ok.headers['x-generation-id']}").json()["status"] == "completed"
    )


def test_unauthenticated_refusals_keep_a_bounded_number_of_records_and_are_all_counted(stack: Stack) -> None:
    before = _rejected_groups(stack).get("rejected:unauthorized", (0, 0))[0]
    started = time.time()
    sent = BURST + 40
    ids = []
    with httpx.Client(base_url=stack.server.base_url, timeout=30) as client:
        for _ in range(sent):
            r = client.post(CHAT, json={"model": "chat"}, headers=_auth(PRESENTED))
            assert r.status_code == 401
            ids.append(r.headers["x-generation-id"])
    elapsed = time.time() - started
    kept = [gid for gid in ids if stack.get(f"/api/v1/generations/{gid}").status_code == 200]
    # the bucket was full or nearly (the first test's refusals took a token or two) plus its refill
    assert BURST - 5 <= len(kept) <= BURST + elapsed * 1.0 + 1, (len(kept), elapsed)
    assert _rejected_groups(stack)["rejected:unauthorized"][0] - before == sent  # every one counted
