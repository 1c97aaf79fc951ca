"""Keys, budgets and rate limits through real gateways (docs/api-operations.md §11): the admin API and its bad input,
credits reserved before the upstream call, 429s whose Retry-After is right, limits that hold across
three gateways on one store, the usage report, and the `tidegate keys` CLI against a running gateway."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream
from tests.support.process import MASTER_KEY, ServerProcess, running_server, start_server
from tests.support.store_backends import shared_store_url
from tests.support.waits import poll_until

CHAT = "/v1/chat/completions"
KEYS = "/api/v1/keys"
# completion tokens at 1000 USD a million: a request capped at 100 tokens reserves exactly $0.10
PRICE_PER_TOKEN = 0.001


def _config(store_url: str, emu: OpenAIUpstream) -> str:
    return f"""
[server]
host = "127.0.0.1"
lease_ttl_s = 3
[store]
url = "{store_url}"
[providers.emu]
kind = "openai"
base_url = "{emu.base_url}"
[models.chat]
routes = [{{ provider = "emu", model = "text" }}]
pricing = {{ prompt = 0, completion = 1000 }}
[models.held]
routes = [{{ provider = "emu", model = "late-text:3" }}]
pricing = {{ prompt = 0, completion = 1000 }}
[models.ticking]
routes = [{{ provider = "emu", model = "slow:0.2" }}]
[models.overbilled]
routes = [{{ provider = "emu", model = "overbill:5000000" }}]
pricing = {{ prompt = 0, completion = 1000 }}
[models.other]
routes = [{{ provider = "emu", model = "text" }}]
max_output_tokens = 50
pricing = {{ prompt = 0, completion = 1000 }}
"""


@pytest.fixture
def emu() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream() as upstream:
        yield upstream


@pytest.fixture
def gateway(tmp_path: Path, emu: OpenAIUpstream) -> Iterator[ServerProcess]:
    with running_server(tmp_path / "gw", _config(f"sqlite:///{tmp_path / 'gw.db'}", emu)) as server:
        yield server


def _master(server: ServerProcess) -> dict[str, str]:
    return {"Authorization": f"Bearer {MASTER_KEY}"}


def _create(server: ServerProcess, **fields: Any) -> dict[str, Any]:
    resp = httpx.post(server.base_url + KEYS, json={"name": "team", **fields}, headers=_master(server))
    assert resp.status_code == 201, resp.text
    body: dict[str, Any] = resp.json()
    return body


def _chat(server: ServerProcess, secret: str, model: str = "chat", **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100, **extra}
    return httpx.post(server.base_url + CHAT, json=body, headers={"Authorization": f"Bearer {secret}"}, timeout=30)


def _error(resp: httpx.Response) -> tuple[int, str]:
    return resp.status_code, resp.json()["error"]["code"]


def test_admin_api_lifecycle_and_bad_input(gateway: ServerProcess) -> None:
    created = _create(gateway, credits=1.5, limits={"rpm": 100}, models=["chat"], metadata={"team": "search"})
    secret, key_id = created["key"], created["id"]
    assert secret.startswith("tg-") and created["credits"] == 1.5 and created["limits"]["rpm"] == 100
    assert created["spent"] == 0 and created["reserved"] == 0 and created["revoked"] is False
    listed = httpx.get(gateway.base_url + KEYS, headers=_master(gateway)).json()["data"]
    assert [k["id"] for k in listed] == [key_id] and "key" not in listed[0]
    assert secret not in httpx.get(gateway.base_url + KEYS + "/" + key_id, headers=_master(gateway)).text

    # a key that is not admin may not use the admin API; an admin key may
    assert _error(httpx.get(gateway.base_url + KEYS, headers={"Authorization": f"Bearer {secret}"})) == (
        403,
        "forbidden",
    )
    admin = _create(gateway, admin=True)
    assert httpx.get(gateway.base_url + KEYS, headers={"Authorization": f"Bearer {admin['key']}"}).status_code == 200

    # bad input: a clear 400 each, and nothing half-written
    item = gateway.base_url + KEYS + "/" + key_id
    for bad in (
        {"credits": -1},
        {"limits": {"rpm": 0}},
        {"limits": {"rpm": 10, "burst": 3}},
        {"colour": "red"},
        {"models": ["no-such-model"]},
        {"expires_at": 1.0},
        {"budget_period": "weekly"},
        {"name": "x", "credits": "lots"},
    ):
        resp = httpx.patch(item, json=bad, headers=_master(gateway))
        assert _error(resp) == (400, "invalid_request"), (bad, resp.text)
    assert _error(httpx.post(gateway.base_url + KEYS, json={"credits": 1}, headers=_master(gateway))) == (
        400,
        "invalid_request",
    )
    after = httpx.get(item, headers=_master(gateway)).json()
    assert {k: after[k] for k in ("credits", "limits", "models", "name")} == {
        "credits": 1.5,
        "limits": {"rpm": 100, "tpm": None, "concurrent": None},
        "models": ["chat"],
        "name": "team",
    }
    assert _error(httpx.get(gateway.base_url + KEYS + "/key_nope", headers=_master(gateway))) == (404, "not_found")
    assert _error(httpx.put(item, json={}, headers=_master(gateway))) == (405, "method_not_allowed")
    assert _error(httpx.put(gateway.base_url + KEYS, json={}, headers=_master(gateway))) == (405, "method_not_allowed")
    # a route's path asked with another method: 405, and `Allow` names the route's (server/route.py)
    refused = httpx.get(item + "/credits", headers=_master(gateway))
    assert (_error(refused), refused.headers["allow"]) == ((405, "method_not_allowed"), "POST")
    refused = httpx.get(gateway.base_url + "/v1/chat/completions", headers=_master(gateway))
    assert (_error(refused), refused.headers["allow"]) == ((405, "method_not_allowed"), "POST")

    # the key's models: another is 403 model_not_allowed
    assert _chat(gateway, secret).status_code == 200
    assert _error(_chat(gateway, secret, model="other")) == (403, "model_not_allowed")

    # top-up adds; PATCH changes only what it names
    topped = httpx.post(item + "/credits", json={"amount": 0.5}, headers=_master(gateway))
    assert topped.status_code == 200 and topped.json()["credits"] == pytest.approx(2.0)
    assert _error(httpx.post(item + "/credits", json={"amount": -3}, headers=_master(gateway))) == (
        400,
        "invalid_request",
    )
    patched = httpx.patch(item, json={"models": None, "credits": None}, headers=_master(gateway)).json()
    assert patched["models"] is None and patched["credits"] is None and patched["metadata"] == {"team": "search"}
    assert _chat(gateway, secret, model="other").status_code == 200

    # expired and revoked keys: 401
    soon = _create(gateway, expires_at=time.time() + 1.5)
    assert _chat(gateway, soon["key"]).status_code == 200
    time.sleep(1.6)
    expired = _chat(gateway, soon["key"])
    assert _error(expired) == (401, "unauthorized") and "expired" in expired.json()["error"]["message"]
    revoked = httpx.delete(item, headers=_master(gateway))
    assert revoked.status_code == 200 and revoked.json()["revoked"] is True
    refused = _chat(gateway, secret)
    assert _error(refused) == (401, "unauthorized") and secret not in refused.text

    # the canary: the gateway ran at DEBUG; no secret it issued is in its log or its store's files
    secrets = [secret, admin["key"], soon["key"]]
    files = [gateway.log_path, *gateway.workdir.parent.glob("gw.db*")]
    assert len(files) >= 2
    for path in files:
        data = path.read_bytes()
        assert not [s for s in secrets if s.encode() in data], path


def test_credit_for_exactly_ten_reservations_admits_ten_of_a_hundred(
    gateway: ServerProcess, emu: OpenAIUpstream
) -> None:
    key = _create(gateway, credits=10 * 100 * PRICE_PER_TOKEN)  # ten reservations of 100 tokens

    async def burst() -> list[httpx.Response]:
        body = {"model": "held", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100}
        headers = {"Authorization": f"Bearer {key['key']}"}
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=100)) as client:
            sends = [client.post(gateway.base_url + CHAT, json=body, headers=headers) for _ in range(100)]
            return list(await asyncio.gather(*sends))

    answers = asyncio.run(burst())
    statuses = sorted(r.status_code for r in answers)
    assert statuses.count(200) == 10 and statuses.count(402) == 90, statuses
    assert emu.counts().get("late-text") == 10  # exactly ten reached the upstream
    refused = next(r for r in answers if r.status_code == 402).json()["error"]
    assert refused["code"] == "insufficient_credits" and "$0.100000" in refused["message"]

    settled = httpx.get(gateway.base_url + KEYS + "/" + key["id"], headers=_master(gateway)).json()
    assert settled["reserved"] == 0 and 0 < settled["spent"] <= settled["credits"]
    usage = httpx.get(gateway.base_url + "/api/v1/usage", params={"group_by": "key"}, headers=_master(gateway)).json()[
        "data"
    ]
    mine = next(g for g in usage if g["group"] == key["id"])
    assert mine["requests"] == 10 and mine["failures"] == 0
    assert mine["cost"] == pytest.approx(settled["spent"]) == pytest.approx(10 * 7 * PRICE_PER_TOKEN)
    by_model = httpx.get(
        gateway.base_url + "/api/v1/usage", params={"group_by": "model"}, headers=_master(gateway)
    ).json()["data"]
    assert [g["group"] for g in by_model] == ["held"]
    bad = httpx.get(gateway.base_url + "/api/v1/usage", params={"group_by": "colour"}, headers=_master(gateway))
    assert _error(bad) == (400, "invalid_request")


def _overrun_bounded(gateways: list[ServerProcess]) -> None:
    """30 concurrent streams of a $0.01 key (ten reservations of one token), each billed five million
    completion tokens by the upstream: the key's spend stops at its credits, never past them."""
    key = _create(gateways[0], credits=0.01)

    async def burst() -> list[httpx.Response]:
        body = {"model": "overbilled", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        headers = {"Authorization": f"Bearer {key['key']}"}
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=100)) as client:
            sends = [
                client.post(gateways[i % len(gateways)].base_url + CHAT, json={**body, "stream": True}, headers=headers)
                for i in range(30)
            ]
            return list(await asyncio.gather(*sends))

    answers = asyncio.run(burst())
    assert {r.status_code for r in answers} <= {200, 402} and any(r.status_code == 200 for r in answers)
    settled = httpx.get(gateways[0].base_url + KEYS + "/" + key["id"], headers=_master(gateways[0])).json()
    assert settled["reserved"] == 0 and settled["spent"] == pytest.approx(0.01), settled
    assert settled["spent"] <= settled["credits"] + 1e-12
    after = _chat(gateways[-1], key["key"], model="overbilled", max_tokens=1)
    assert _error(after) == (402, "insufficient_credits")
    log = b"".join(g.log_path.read_bytes() for g in gateways)
    assert b"more than the $0.001000 reserved for it" in log


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with shared_store_url(request.param, tmp_path, "overrun") as url:
        yield url


def test_a_provider_that_overbills_cannot_overspend_a_key(tmp_path: Path, emu: OpenAIUpstream, any_store: str) -> None:
    config = _config(any_store, emu)
    gateways = [start_server(tmp_path / f"gw{i}", config) for i in range(2)]
    try:
        _overrun_bounded(gateways)
    finally:
        for g in gateways:
            g.stop()


def test_a_request_that_fails_after_the_provider_took_its_prompt_bills_the_prompt(
    tmp_path: Path, emu: OpenAIUpstream
) -> None:
    """The upstream accepted the request (200) and went silent past its idle timeout: the prompt it
    processed is billed, streamed (a keep-alive committed it) or not (the JSON answer is a 504), and
    a cancel of the same request is billed the same. A route that answered an error bills nothing."""
    config = f"""
[server]
host = "127.0.0.1"
keepalive_s = 0.3
[store]
url = "sqlite:///{tmp_path / "gw.db"}"
[providers.emu]
kind = "openai"
base_url = "{emu.base_url}"
upstream_idle_timeout_s = 1.5
[models.stalled]
routes = [{{ provider = "emu", model = "headers-then-silence:30" }}]
pricing = {{ prompt = 1000, completion = 1000 }}
[models.refused]
routes = [{{ provider = "emu", model = "http-500" }}]
pricing = {{ prompt = 1000, completion = 1000 }}
"""
    server = start_server(tmp_path / "gw", config)
    try:
        key = _create(server, credits=100)
        headers = {"Authorization": f"Bearer {key['key']}"}
        prompt = "every word of this prompt is processed " * 500
        body = {"model": "stalled", "messages": [{"role": "user", "content": prompt}], "max_tokens": 10}
        ids = []
        with httpx.stream("POST", server.base_url + CHAT, json={**body, "stream": True}, headers=headers) as r:
            assert r.status_code == 200
            ids.append(r.headers["x-generation-id"])
            text = r.read().decode()
        assert ": TIDEGATE PROCESSING" in text and '"upstream_timeout"' in text and "[DONE]" not in text
        timed_out = httpx.post(server.base_url + CHAT, json=body, headers=headers, timeout=30)
        assert timed_out.status_code == 504
        ids.append(timed_out.headers["x-generation-id"])
        with httpx.stream("POST", server.base_url + CHAT, json={**body, "stream": True}, headers=headers) as r:
            ids.append(r.headers["x-generation-id"])
            time.sleep(0.5)
            cancel = httpx.post(f"{server.base_url}/api/v1/generations/{ids[-1]}/cancel", headers=headers)
            assert cancel.status_code == 202
            r.read()
        refused = httpx.post(server.base_url + CHAT, json={**body, "model": "refused"}, headers=headers)
        assert refused.status_code == 502
        records = [httpx.get(f"{server.base_url}/api/v1/generations/{i}", headers=headers).json() for i in ids]
        assert [r["status"] for r in records] == ["failed", "failed", "cancelled"]
        for record in records:
            assert record["usage"]["prompt_tokens"] > 3000
            assert record["cost"] == pytest.approx(record["usage"]["prompt_tokens"] * PRICE_PER_TOKEN)
        not_taken = httpx.get(
            f"{server.base_url}/api/v1/generations/{refused.headers['x-generation-id']}", headers=headers
        )
        assert not_taken.json()["cost"] == 0
        time.sleep(0.3)
        spent = httpx.get(f"{server.base_url}{KEYS}/{key['id']}", headers=_master(server)).json()["spent"]
        assert spent == pytest.approx(sum(r["cost"] for r in records))
    finally:
        server.stop()


def test_rate_limit_headers_and_a_retry_at_retry_after_succeeds(gateway: ServerProcess) -> None:
    key = _create(gateway, limits={"rpm": 20, "tpm": 100_000})
    remaining = []
    for _ in range(20):
        ok = _chat(gateway, key["key"])
        assert ok.status_code == 200, ok.text
        assert ok.headers["x-ratelimit-limit-requests"] == "20"
        assert ok.headers["x-ratelimit-limit-tokens"] == "100000"
        remaining.append(int(ok.headers["x-ratelimit-remaining-requests"]))
        assert float(ok.headers["x-ratelimit-reset-requests"]) > 0
    assert remaining[0] == 19 and remaining[-1] <= 1
    limited = _chat(gateway, key["key"])
    while limited.status_code == 200:  # a slow machine took more than a request's 3 s to send 20
        limited = _chat(gateway, key["key"])
    assert _error(limited) == (429, "rate_limited")
    retry_after = int(limited.headers["retry-after"])
    assert 1 <= retry_after <= 3
    assert limited.headers["x-ratelimit-remaining-requests"] == "0"
    time.sleep(retry_after)
    assert _chat(gateway, key["key"]).status_code == 200


def test_concurrent_streams_limit(gateway: ServerProcess) -> None:
    key = _create(gateway, limits={"concurrent": 2})
    headers = {"Authorization": f"Bearer {key['key']}"}
    body = {"model": "ticking", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with httpx.Client(timeout=30) as client:
        streams = [client.stream("POST", gateway.base_url + CHAT, json=body, headers=headers) for _ in range(2)]
        opened = [s.__enter__() for s in streams]
        try:
            assert [r.status_code for r in opened] == [200, 200]
            third = _chat(gateway, key["key"], model="chat")
            assert _error(third) == (429, "rate_limited") and "concurrent" in third.json()["error"]["message"]
        finally:
            for s in streams:
                s.__exit__(None, None, None)
    # the slots come back at the end
    assert poll_until(lambda: _chat(gateway, key["key"], model="chat").status_code == 200, 10, poll_s=0.2)


@pytest.fixture(params=["sqlite", "redis"])
def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with shared_store_url(request.param, tmp_path, "limits") as url:
        yield url


def test_three_gateways_share_one_limit(tmp_path: Path, emu: OpenAIUpstream, shared_store: str) -> None:
    config = _config(shared_store, emu)
    gateways = [start_server(tmp_path / f"gw{i}", config) for i in range(3)]
    try:
        _share_one_limit(gateways)
    finally:
        for g in gateways:
            g.stop()


def _share_one_limit(gateways: list[ServerProcess]) -> None:
    key = _create(gateways[0], limits={"rpm": 60})

    async def burst() -> tuple[list[int], float]:
        body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
        headers = {"Authorization": f"Bearer {key['key']}"}
        started = time.monotonic()
        async with httpx.AsyncClient(timeout=60) as client:
            sends = [client.post(gateways[i % 3].base_url + CHAT, json=body, headers=headers) for i in range(150)]
            answers = await asyncio.gather(*sends)
        return [r.status_code for r in answers], time.monotonic() - started

    statuses, elapsed = asyncio.run(burst())
    admitted = statuses.count(200)
    assert statuses.count(429) == 150 - admitted
    # 60 at once, then one a second while the burst lasts: never 60 per gateway
    assert 60 <= admitted <= 60 + int(elapsed) + 1, (admitted, elapsed)


def test_keys_cli_against_a_running_gateway(gateway: ServerProcess) -> None:
    env = {**os.environ, "TIDEGATE_URL": gateway.base_url, "TIDEGATE_MASTER_KEY": MASTER_KEY}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tidegate", "keys", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True)

    made = cli("create", "--name", "cli-team", "--credits", "2", "--rpm", "30", "--model", "chat")
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip().splitlines()[-1]
    assert secret.startswith("tg-") and _chat(gateway, secret).status_code == 200
    key_id = made.stdout.split()[2]
    listed = cli("list")
    assert key_id in listed.stdout and "credits=2 USD" in listed.stdout and secret not in listed.stdout
    got = cli("get", key_id)
    assert '"rpm": 30' in got.stdout and secret not in got.stdout
    updated = cli("update", key_id, "--credits", "unlimited", "--budget-period", "monthly")
    assert '"credits": null' in updated.stdout and '"budget_period": "monthly"' in updated.stdout
    assert "unlimited credits" in cli("topup", key_id, "1").stderr
    cli("update", key_id, "--credits", "1")
    assert '"credits": 3.0' in cli("topup", key_id, "2").stdout
    assert cli("revoke", key_id).returncode == 0
    assert _chat(gateway, secret).status_code == 401
    denied = subprocess.run(
        [sys.executable, "-m", "tidegate", "keys", "list", "--api-key", secret], env=env, capture_output=True, text=True
    )
    assert denied.returncode != 0 and "401" in denied.stderr
