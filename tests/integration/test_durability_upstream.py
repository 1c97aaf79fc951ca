"""docs/api-operations.md §7 against a counting upstream: one key, one upstream request; kill; tenants; the
seed's curl."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.process import ServerProcess, sqlite_url, start_server, started_server
from tests.support.streams import RawStream, stream_sse

CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream() as emu:
        yield emu


def _config(workdir: Path, upstream: OpenAIUpstream) -> str:
    return tidegate_toml(
        sqlite_url(workdir),
        {"emu": {"kind": "openai", "base_url": upstream.base_url}},
        {
            "m/text": [("emu", "text")],
            "m/slowish": [("emu", "silence:1.0")],
            "m/endless": [("emu", "slow:0.05")],
            "m/ticking": [("emu", "slow:0.02")],
        },
        server={"lease_ttl_s": 1.5},
    )


@pytest.fixture(scope="module")
def server(upstream: OpenAIUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with started_server(tmp_path_factory, "durability", lambda workdir: _config(workdir, upstream)) as srv:
        yield srv


def _key(server: ServerProcess) -> str:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidegate",
            "keys",
            "create",
            "--name",
            uuid.uuid4().hex[:8],
            "--config",
            str(server.config_path),
        ],
        capture_output=True,
        text=True,
        check=True,
        env=server.env,
        cwd=server.workdir,
    )
    return out.stdout.strip().splitlines()[-1]


def test_same_key_sequential_reaches_upstream_once(server: ServerProcess, upstream: OpenAIUpstream) -> None:
    h = {**server.headers, "Idempotency-Key": uuid.uuid4().hex}
    before = len(upstream.for_model("text"))
    first = stream_sse(server.base_url + CHAT, {"model": "m/text", "stream": True, "messages": HI}, h)
    second = stream_sse(server.base_url + CHAT, {"model": "m/text", "stream": True, "messages": HI}, h)
    assert first.done and second.done and second.raw == first.raw
    assert len(upstream.for_model("text")) - before == 1


def test_same_key_concurrent_reaches_upstream_once(server: ServerProcess, upstream: OpenAIUpstream) -> None:
    h = {**server.headers, "Idempotency-Key": uuid.uuid4().hex}
    body = {"model": "m/slowish", "stream": False, "messages": HI}
    before = len(upstream.for_model("silence:1.0"))
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda _: httpx.post(server.base_url + CHAT, json=body, headers=h), range(6)))
    statuses = sorted(r.status_code for r in results)
    assert statuses.count(200) >= 1 and set(statuses) <= {200, 409}
    assert all(r.headers["retry-after"] for r in results if r.status_code == 409)
    assert len({r.headers["x-generation-id"] for r in results}) == 1
    assert len(upstream.for_model("silence:1.0")) - before == 1


def test_another_api_key_cannot_replay(server: ServerProcess) -> None:
    idem = uuid.uuid4().hex
    resp = httpx.post(
        server.base_url + CHAT,
        json={"model": "m/text", "messages": HI},
        headers={**server.headers, "Idempotency-Key": idem},
    )
    assert resp.status_code == 200
    other = _key(server)
    replay = httpx.post(
        server.base_url + "/api/v1/llm/responses/replay",
        headers={"Authorization": f"Bearer {other}", "Idempotency-Key": idem},
    )
    assert replay.status_code == 404 and replay.json()["error"]["code"] == "generation_not_found"


def test_seed_curl_replay_command_verbatim(server: ServerProcess) -> None:
    idem = uuid.uuid4().hex
    resp = httpx.post(
        server.base_url + CHAT,
        json={"model": "m/text", "messages": HI},
        headers={**server.headers, "Idempotency-Key": idem},
    )
    assert resp.status_code == 200
    # The seed's command, with only the base URL changed:
    command = (
        f"curl -X POST {server.base_url}/api/v1/llm/responses/replay \\\n"
        '  -H "Authorization: Bearer $KENDR_API_KEY" \\\n'
        '  -H "Idempotency-Key: YOUR_ORIGINAL_REQUEST_ID"'
    ).replace("YOUR_ORIGINAL_REQUEST_ID", idem)
    out = subprocess.run(
        ["bash", "-c", command + " -s"],
        capture_output=True,
        text=True,
        env={**os.environ, "KENDR_API_KEY": server.key},
        check=True,
    )
    result = orjson.loads(out.stdout)
    assert result["status"] == "completed" and result["output_text"] == "Hello, world \u00e9\u2713!"


def test_a_resume_reads_the_frames_that_left_memory_from_the_store(server: ServerProcess) -> None:
    """A running keyed generation keeps in memory only the frames not yet stored: a resume from an early
    id, a second later, reads the older frames back from the store, then follows live, byte for byte."""
    body = {"model": "m/ticking", "stream": True, "messages": HI}
    h = {**server.headers, "Idempotency-Key": uuid.uuid4().hex}
    first = RawStream(server.base_url, CHAT, body, h)
    resumed: RawStream | None = None
    try:
        first.read_events(5)
        time.sleep(1.2)  # ~60 frames, several 250 ms flushes: the early ones are only in the store now
        resumed = RawStream(server.base_url, CHAT, body, {**h, "Accept": "text/event-stream", "Last-Event-ID": "2"})
        assert resumed.status == 200 and resumed.headers["idempotent-replayed"] == "true"
        resumed.read_events(len(first.read_events(60)) + 20)  # past what was stored: live from memory
        gid = first.headers["x-generation-id"]
        cancel = httpx.post(f"{server.base_url}/api/v1/generations/{gid}/cancel", headers=server.headers)
        assert cancel.status_code == 202
        original, again = first.read_to_end(), resumed.read_to_end()
    finally:
        first.close()
        if resumed is not None:
            resumed.close()
    assert [e.id for e in resumed.events[:2]] == ["3", "4"]
    assert len(resumed.events) > 80 and b'"code":"cancelled"' in again
    assert original.endswith(again) and original[: len(original) - len(again)].endswith(b"\n\n")
    assert [(e.id, e.data) for e in first.events if e.id is not None and int(e.id) > 2] == [
        (e.id, e.data) for e in resumed.events
    ]


def test_kill_mid_stream_then_replay_502_interrupted_with_prefix(upstream: OpenAIUpstream, tmp_path: Path) -> None:
    srv = start_server(tmp_path, _config(tmp_path, upstream))
    idem = uuid.uuid4().hex
    before = len(upstream.for_model("slow:0.05"))
    try:
        stream = RawStream(
            srv.base_url,
            CHAT,
            {"model": "m/endless", "stream": True, "messages": HI},
            {**srv.headers, "Idempotency-Key": idem},
        )
        events = stream.read_events(12)
        time.sleep(0.6)  # everything sent > 250 ms before the crash is flushed
        os.kill(srv.proc.pid, signal.SIGKILL)
        srv.proc.wait()
        events = stream.read_events(10**6, timeout=5)  # whatever reached the client before the crash
        stream.close()
    finally:
        srv.kill()
    seen = "".join(
        (c["choices"][0]["delta"].get("content") or "")
        for c in (orjson.loads(e.data) for e in events if e.data.startswith("{"))
        if c.get("choices")
    )
    restarted = start_server(tmp_path, _config(tmp_path, upstream))  # on another port: a new owner
    try:
        deadline = time.monotonic() + 6  # the dead one's 1.5 s lease, a sweep, a loaded machine's slack
        while True:
            resp = httpx.post(
                restarted.base_url + "/api/v1/llm/responses/replay",
                headers={**restarted.headers, "Idempotency-Key": idem},
            )
            if resp.status_code != 409 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert resp.status_code == 502
        body = resp.json()
        assert body["status"] == "interrupted" and body["error"]["code"] == "interrupted"
        assert body["partial_output"] and seen.startswith(body["partial_output"])
    finally:
        restarted.stop()
    assert len(upstream.for_model("slow:0.05")) - before == 1
