"""The console's JSON API at scale (docs/console-api.md) through real gateways on each store:
series from the rollups after real requests (a failed one too), the log's filters and keyset
paging, the audit log of the keys admin API, body logging per key and per model with its
retention, the routes' last failures with secrets redacted, and what a non-admin key may see."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream
from tests.support.process import MASTER_KEY, ServerProcess, start_server
from tests.support.store_backends import shared_store_url

CHAT = "/v1/chat/completions"
MASTER = {"Authorization": f"Bearer {MASTER_KEY}"}
# the upstream's own key: the emulator's 401 answer echoes it, and nothing the console shows may
UPSTREAM_SECRET = "sk-upstream-console-0123456789abcdef"
BODY_RETENTION_S = 4


def _config(store_url: str, emu: OpenAIUpstream) -> str:
    return f"""
[server]
host = "127.0.0.1"
[store]
url = "{store_url}"
[logging]
body_retention_s = {BODY_RETENTION_S}
[providers.emu]
kind = "openai"
base_url = "{emu.base_url}"
api_key_env = "CANARY_CONSOLE_UPSTREAM_KEY"
[models.chat]
routes = [{{ provider = "emu", model = "text" }}]
pricing = {{ prompt = 1, completion = 2 }}
[models.logged]
routes = [{{ provider = "emu", model = "text" }}]
log_bodies = true
[models.broken]
routes = [{{ provider = "emu", model = "http-500" }}]
[models.leaky]
routes = [{{ provider = "emu", model = "http-401" }}]
"""


@dataclass
class Stack:
    server: ServerProcess
    emu: OpenAIUpstream
    backend: str
    keys: dict[str, dict[str, Any]]

    def get(self, path: str, key: str | None = None, **params: Any) -> httpx.Response:
        headers = MASTER if key is None else {"Authorization": f"Bearer {key}"}
        return httpx.get(self.server.base_url + path, params=params, headers=headers, timeout=30)

    def chat(self, key: str, model: str = "chat", text: str = "hello", stream: bool = False) -> httpx.Response:
        body = {"model": model, "messages": [{"role": "user", "content": text}], "stream": stream}
        return httpx.post(
            self.server.base_url + CHAT, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )


@pytest.fixture(scope="module", params=["sqlite", "redis", "postgres"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp(f"console-{request.param}")
    with OpenAIUpstream() as emu, shared_store_url(request.param, tmp, "console") as url:
        server = start_server(tmp / "gw", _config(url, emu), extra_env={"CANARY_CONSOLE_UPSTREAM_KEY": UPSTREAM_SECRET})
        try:
            keys = {}
            for name, extra in (("ops", {"admin": True}), ("app", {}), ("traced", {"log_bodies": True})):
                r = httpx.post(server.base_url + "/api/v1/keys", json={"name": name, **extra}, headers=MASTER)
                assert r.status_code == 201, r.text
                keys[name] = r.json()
            yield Stack(server, emu, request.param, keys)
        finally:
            server.stop()
    log = server.log()
    assert MASTER_KEY not in log and UPSTREAM_SECRET not in log


def _series(stack: Stack, **params: Any) -> dict[str, Any]:
    r = stack.get("/api/v1/stats/series", **params)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_series_buckets_and_totals_after_real_requests(stack: Stack) -> None:
    app = stack.keys["app"]["key"]
    before = _series(stack, window="hour", by="model")["totals"]
    for _ in range(3):
        assert stack.chat(app).status_code == 200
    assert stack.chat(app, stream=True).status_code == 200
    assert stack.chat(app, model="broken").status_code == 502
    after = _series(stack, window="hour", by="model")
    assert after["bucket_s"] == 60 and after["to"] - after["from"] == 3600
    totals = after["totals"]
    assert totals["requests"] - before["requests"] == 5
    assert totals["errors"] - before["errors"] == 1
    assert totals["input_tokens"] > before["input_tokens"] and totals["output_tokens"] > before["output_tokens"]
    assert totals["cost"] > before["cost"]
    assert totals["ttft_p50_ms"] is not None and totals["ttft_p95_ms"] >= totals["ttft_p50_ms"]
    groups = {s["group"]: s for s in after["series"]}
    assert {"chat", "broken"} <= set(groups)
    for s in after["series"]:
        assert len(s["points"]) == 60
        assert [p["t"] for p in s["points"]] == list(range(after["from"], after["to"], 60))
    broken = groups["broken"]["points"]
    assert sum(p["errors"] for p in broken) >= 1 and sum(p["cost"] for p in broken) == 0
    assert sum(p["requests"] for p in groups["chat"]["points"]) >= 4
    # the same records in the day's hour buckets and the month's day buckets, and by key
    day = _series(stack, window="day")
    assert len(day["series"]) == 1 and day["series"][0]["group"] == "all" and len(day["series"][0]["points"]) == 24
    assert day["totals"]["requests"] >= totals["requests"]
    month = _series(stack, window="month", by="key", key_id=stack.keys["app"]["id"])
    assert [s["group"] for s in month["series"]] == [stack.keys["app"]["id"]]
    assert len(month["series"][0]["points"]) == 30 and month["totals"]["requests"] >= 5
    assert _series(stack, window="hour", model="nothing-ran")["totals"]["requests"] == 0


def test_series_refuses_bad_input_and_non_admin_keys(stack: Stack) -> None:
    assert stack.get("/api/v1/stats/series", window="week").status_code == 400
    assert stack.get("/api/v1/stats/series", by="colour").json()["error"]["type"] == "invalid_request_error"
    r = stack.get("/api/v1/stats/series", key=stack.keys["app"]["key"])
    assert r.status_code == 403, r.text
    assert stack.get("/api/v1/stats/series", key=stack.keys["ops"]["key"]).status_code == 200


def _pages(stack: Stack, key: str | None = None, during: Any = None, **params: Any) -> list[dict[str, Any]]:
    """Every page of the log's query, `during()` run between two pages (new records arriving)."""
    seen: list[dict[str, Any]] = []
    cursor = None
    while True:
        r = stack.get("/api/v1/generations", key=key, **params, **({"cursor": cursor} if cursor else {}))
        assert r.status_code == 200, r.text
        body = r.json()
        seen.extend(body["data"])
        cursor = body["next"]
        if cursor is None:
            return seen
        if during is not None:
            during()


def test_log_filters_and_keyset_paging_while_records_arrive(stack: Stack) -> None:
    app, ops = stack.keys["app"], stack.keys["ops"]
    start = time.time()
    for i in range(7):
        assert stack.chat(app["key"], text=f"page {i}").status_code == 200
    assert stack.chat(app["key"], model="broken").status_code == 502
    made = _pages(stack, since=start, key_id=app["id"], limit=200)
    assert len(made) == 8
    assert [(g["created_at"], g["id"]) for g in made] == sorted(
        ((g["created_at"], g["id"]) for g in made), reverse=True
    )
    paged = _pages(stack, since=start, key_id=app["id"], limit=3, during=lambda: stack.chat(app["key"]))
    assert [g["id"] for g in paged] == [g["id"] for g in made]  # no duplicate, no gap, nothing newer
    failed = _pages(stack, since=start, status="failed")
    assert [g["id"] for g in failed] == [g["id"] for g in made if g["status"] == "failed"]
    assert failed[0]["model"] == "broken" and failed[0]["key_id"] == app["id"]
    assert all(g["model"] == "broken" for g in _pages(stack, since=start, model="broken"))
    assert len(_pages(stack, since=start, provider="emu", until=made[0]["created_at"])) >= 7
    assert [g["id"] for g in _pages(stack, id=made[3]["id"])] == [made[3]["id"]]
    assert _pages(stack, since=start, session="no-such-session") == []
    # a key that is not admin sees its own records only, whatever it asks
    assert stack.chat(ops["key"]).status_code == 200
    own = _pages(stack, key=app["key"], since=start, key_id=ops["id"])
    assert own and {g["key_id"] for g in own} == {app["id"]}
    assert {g["key_id"] for g in _pages(stack, key=ops["key"], since=start)} == {app["id"], ops["id"]}
    for bad in ({"limit": 0}, {"limit": 201}, {"status": "done"}, {"cursor": "!!"}, {"since": "yesterday"}):
        r = stack.get("/api/v1/generations", **bad)
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", (bad, r.text)


def test_audit_log_of_the_keys_admin_api_without_secrets(stack: Stack) -> None:
    ops = stack.keys["ops"]
    as_ops = {"Authorization": f"Bearer {ops['key']}"}
    base = stack.server.base_url + "/api/v1/keys"
    made = httpx.post(base, json={"name": "audited", "credits": 1.0, "limits": {"rpm": 5}}, headers=as_ops).json()
    assert httpx.patch(f"{base}/{made['id']}", json={"name": "audited-2"}, headers=as_ops).status_code == 200
    assert httpx.post(f"{base}/{made['id']}/credits", json={"amount": 2.5}, headers=MASTER).status_code == 200
    assert httpx.delete(f"{base}/{made['id']}", headers=as_ops).status_code == 200
    entries = [e for e in _audit_pages(stack) if e["target"] == made["id"]]
    assert [e["action"] for e in entries] == ["key.revoke", "key.credits", "key.update", "key.create"]
    assert entries[0]["actor"] == {"key_id": ops["id"], "name": "ops"}
    assert entries[1]["actor"]["key_id"] == "master"
    assert entries[3]["detail"] == {
        "name": "audited",
        "credits": 1.0,
        "limits": {"rpm": 5, "tpm": None, "concurrent": None},
    }
    assert entries[2]["detail"] == {"name": "audited-2"} and entries[1]["detail"]["amount"] == 2.5
    assert all(e["at"] <= time.time() for e in entries)
    text = str(_audit_pages(stack))
    assert made["key"] not in text and MASTER_KEY not in text and "secret_hash" not in text
    assert stack.get("/api/v1/audit", key=stack.keys["app"]["key"]).status_code == 403
    assert stack.get("/api/v1/audit", cursor="nope").status_code == 400


def _audit_pages(stack: Stack) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    cursor = None
    while True:
        r = stack.get("/api/v1/audit", limit=2, **({"cursor": cursor} if cursor else {}))
        assert r.status_code == 200, r.text
        seen.extend(r.json()["data"])
        cursor = r.json()["next"]
        if cursor is None:
            assert len({e["id"] for e in seen}) == len(seen)
            return seen


def test_routes_last_failures_name_the_generation_with_secrets_redacted(stack: Stack) -> None:
    app = stack.keys["app"]["key"]
    failed = stack.chat(app, model="leaky")
    assert failed.status_code >= 400
    assert stack.chat(app, model="broken", stream=True).status_code == 502  # before the first byte: a 502
    routes = {r["route"]: r for r in stack.get("/api/v1/routes").json()["data"]}
    leaky = routes["emu/http-401"]["last_failures"]
    assert leaky and leaky[0]["generation_id"] == failed.headers["x-generation-id"]
    assert leaky[0]["status"] == "failed" and leaky[0]["code"] and leaky[0]["at"] <= time.time()
    assert "Incorrect API key" in leaky[0]["upstream_error"] and UPSTREAM_SECRET not in str(routes)
    broken = routes["emu/http-500"]["last_failures"]
    assert 1 <= len(broken) <= 5 and broken == sorted(broken, key=lambda f: f["at"], reverse=True)
    assert routes["emu/text"]["last_failures"] == [] or routes["emu/text"]["error_rate"] > 0
    assert stack.get("/api/v1/routes", key=app).status_code == 403


def test_seed_and_scale_bench_run_small(tmp_path: Path) -> None:
    """`tidegate seed-generations` writes the records and their rollups, and bench/console_scale.py
    times every console endpoint against a real gateway on the seeded store (1M rows in the bench)."""
    out = tmp_path / "report.md"
    bench = Path(__file__).resolve().parents[2] / "bench" / "console_scale.py"
    done = subprocess.run(
        [sys.executable, str(bench), "--count", "3000", "--runs", "3", "--stores", "sqlite", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "seeded 3000 generation records" in done.stdout
    report = out.read_text()
    rows = [line for line in report.splitlines() if line.startswith("| ") and "endpoint" not in line]
    assert len(rows) == 29 and "(met)" in report
    assert any(r.startswith("| generations deep keyset page |") for r in rows)


def _bodies(stack: Stack, generation_id: str) -> tuple[Any, Any]:
    r = stack.get(f"/api/v1/generations/{generation_id}")
    assert r.status_code == 200, r.text
    return r.json()["request_body"], r.json()["response_body"]


def test_body_logging_per_key_and_per_model_with_retention(stack: Stack, tmp_path: Path) -> None:
    traced, app = stack.keys["traced"], stack.keys["app"]
    assert traced["log_bodies"] is True and app["log_bodies"] is False
    on = stack.chat(traced["key"], text=f"keep me {UPSTREAM_SECRET}")
    off = stack.chat(app["key"], text="forget me")
    by_model = stack.chat(app["key"], model="logged", text="the model keeps me", stream=True)
    assert on.status_code == off.status_code == by_model.status_code == 200
    request, response = _bodies(stack, on.headers["x-generation-id"])
    assert request["messages"][0]["content"] == "keep me ***"  # a provider credential in a prompt is masked
    assert response == on.json()["choices"][0]["message"]["content"] and "authorization" not in str(request).lower()
    assert _bodies(stack, off.headers["x-generation-id"]) == (None, None)
    request, response = _bodies(stack, by_model.headers["x-generation-id"])
    assert request["model"] == "logged" and request["stream"] is True and response
    time.sleep(BODY_RETENTION_S + 0.5)
    assert _bodies(stack, on.headers["x-generation-id"]) == (None, None)  # past retention
    if stack.backend == "sqlite":  # a gateway's start prunes: the row itself goes
        path = stack.server.config_path.read_text().split('url = "sqlite:///', 1)[1].split('"', 1)[0]

        def kept() -> int:
            with sqlite3.connect(path) as db:
                return int(db.execute("SELECT count(*) FROM generation_bodies").fetchone()[0])

        assert kept() >= 2
        second = start_server(tmp_path / "second", stack.server.config_path.read_text())
        second.stop()
        assert kept() == 0
    assert UPSTREAM_SECRET not in stack.server.log()


def test_a_keys_page_has_its_daily_spend(stack: Stack) -> None:
    app = stack.keys["app"]
    assert stack.chat(app["key"]).status_code == 200
    body = stack.get(f"/api/v1/keys/{app['id']}").json()
    series = body["spend_series"]
    assert len(series) == 30 and series[-1]["t"] <= time.time() < series[-1]["t"] + 86_400
    assert series[-1]["cost"] > 0 and all(p["cost"] == 0 for p in series[:-2])
    assert "key" not in body and "secret_hash" not in body
