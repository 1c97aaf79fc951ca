"""docs/api-operations.md §7 on the chat door: idempotency keys, stored answers, live resume, cancel, crash recovery."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.support.keyed_streams import LONG, body, open_stream, read_until
from tests.support.process import ServerProcess, local_config, start_server
from tests.support.records import fetch_record, wait_record
from tests.support.streams import stream_sse
from tidegate.sse import SSEDecoder

CHAT = "/v1/chat/completions"


def test_same_key_stream_is_replayed_not_regenerated(local_server: ServerProcess) -> None:
    key = str(uuid.uuid4())
    h = {**local_server.headers, "Idempotency-Key": key}
    first = stream_sse(local_server.base_url + CHAT, body(), h)
    assert first.status == 200 and first.done
    assert "idempotent-replayed" not in first.headers
    second = stream_sse(local_server.base_url + CHAT, body(), h)
    assert second.status == 200 and second.done
    assert second.headers["idempotent-replayed"] == "true"
    assert second.headers["x-generation-id"] == first.headers["x-generation-id"]
    assert second.headers["x-provider"] == "local"
    assert second.raw == first.raw  # the same events, ids included, byte for byte


def test_same_key_non_stream_returns_stored_json(local_server: ServerProcess) -> None:
    h = {**local_server.headers, "Idempotency-Key": "nonstream-" + uuid.uuid4().hex}
    first = httpx.post(local_server.base_url + CHAT, json=body(stream=False), headers=h)
    second = httpx.post(local_server.base_url + CHAT, json=body(stream=False), headers=h)
    assert first.status_code == second.status_code == 200
    assert second.content == first.content
    assert second.headers["idempotent-replayed"] == "true"
    assert second.headers["x-generation-id"] == first.headers["x-generation-id"]


def test_same_key_different_body_is_422(local_server: ServerProcess) -> None:
    h = {**local_server.headers, "Idempotency-Key": uuid.uuid4().hex}
    assert httpx.post(local_server.base_url + CHAT, json=body(stream=False), headers=h).status_code == 200
    resp = httpx.post(local_server.base_url + CHAT, json=body(max_tokens=5, stream=False), headers=h)
    assert resp.status_code == 422
    assert resp.json()["error"]["code"] == "idempotency_key_reused"


def test_bad_idempotency_key_and_invalid_request_store_nothing(local_server: ServerProcess) -> None:
    bad = httpx.post(
        local_server.base_url + CHAT,
        json=body(stream=False),
        headers={**local_server.headers, "Idempotency-Key": "has space"},
    )
    assert bad.status_code == 400 and "Idempotency-Key" in bad.json()["error"]["message"]
    h = {**local_server.headers, "Idempotency-Key": uuid.uuid4().hex}
    invalid = httpx.post(local_server.base_url + CHAT, json={"model": "local/smollm2"}, headers=h)
    assert invalid.status_code == 400
    # the key was not consumed by the invalid request: a valid, different body now works
    ok = httpx.post(local_server.base_url + CHAT, json=body(stream=False), headers=h)
    assert ok.status_code == 200 and "idempotent-replayed" not in ok.headers


def test_running_key_409_then_live_resume_with_last_event_id(local_server: ServerProcess) -> None:
    key = uuid.uuid4().hex
    h = {**local_server.headers, "Idempotency-Key": key}
    payload = body(max_tokens=120, messages=LONG)
    sock = open_stream(local_server, payload, h)
    try:
        head = read_until(sock, 3)
        gid = head.split(b"x-generation-id: ")[1].split(b"\r\n")[0].decode()
        busy = httpx.post(local_server.base_url + CHAT, json=payload, headers=h)
        assert busy.status_code == 409
        assert busy.json()["error"]["code"] == "generation_in_progress"
        assert int(busy.headers["retry-after"]) >= 1
        assert busy.headers["x-generation-id"] == gid
        resumed = stream_sse(
            local_server.base_url + CHAT, payload, {**h, "Accept": "text/event-stream", "Last-Event-ID": "1"}
        )
        assert resumed.status == 200 and resumed.done
        assert resumed.events[0].id == "2"
        ids = [int(e.id or -1) for e in resumed.events]
        assert ids == list(range(2, 2 + len(ids)))
    finally:
        sock.close()
    full = stream_sse(local_server.base_url + CHAT, payload, h)
    assert full.headers["idempotent-replayed"] == "true"
    assert [e.data for e in full.events[2:]] == [e.data for e in resumed.events]
    # Last-Event-ID equal to the last event: an empty stream that ends normally (the client has the
    # ending); past it: the stream's ending again, so the client can tell it ended rather than was cut
    last = int(full.events[-1].id or -1)
    again = stream_sse(local_server.base_url + CHAT, payload, {**h, "Last-Event-ID": str(last)})
    assert again.status == 200 and again.events == [] and again.raw == b""  # (read to its clean end)
    past = stream_sse(local_server.base_url + CHAT, payload, {**h, "Last-Event-ID": str(last + 5)})
    assert past.status == 200 and past.done and len(past.events) == 1
    assert past.events[0].id == str(last)


def test_disconnect_with_key_keeps_generating(local_server: ServerProcess) -> None:
    h = {**local_server.headers, "Idempotency-Key": uuid.uuid4().hex}
    sock = open_stream(local_server, body(max_tokens=60, messages=LONG), h)
    head = read_until(sock, 2)
    gid = head.split(b"x-generation-id: ")[1].split(b"\r\n")[0].decode()
    sock.close()
    rec = wait_record(local_server, gid, within_s=30, poll_s=0.1)
    assert rec["status"] == "completed"
    replay = stream_sse(local_server.base_url + CHAT, body(max_tokens=60, messages=LONG), h)
    assert replay.done and replay.headers["x-generation-id"] == gid
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in replay.json_events() if c["choices"])
    assert text == rec["output_text"]


def test_keys_are_scoped_per_api_key(local_server: ServerProcess, tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidegate",
            "keys",
            "create",
            "--name",
            "other",
            "--config",
            str(local_server.config_path),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    other = out.stdout.strip().splitlines()[-1]
    idem = uuid.uuid4().hex
    a = httpx.post(
        local_server.base_url + CHAT, json=body(stream=False), headers={**local_server.headers, "Idempotency-Key": idem}
    )
    b = httpx.post(
        local_server.base_url + CHAT,
        json=body(stream=False),
        headers={"Authorization": f"Bearer {other}", "Idempotency-Key": idem},
    )
    assert a.status_code == b.status_code == 200
    assert a.headers["x-generation-id"] != b.headers["x-generation-id"]
    assert "idempotent-replayed" not in b.headers
    # another key's generation is a 404
    gid = a.headers["x-generation-id"]
    resp = httpx.get(f"{local_server.base_url}/api/v1/generations/{gid}", headers={"Authorization": f"Bearer {other}"})
    assert resp.status_code == 404


def test_cancel_endpoint_ends_stream_with_cancelled(local_server: ServerProcess) -> None:
    h = {**local_server.headers, "Idempotency-Key": uuid.uuid4().hex}
    sock = open_stream(local_server, body(max_tokens=1500, messages=LONG), h)
    try:
        got = read_until(sock, 3)
        gid = got.split(b"x-generation-id: ")[1].split(b"\r\n")[0].decode()
        resp = httpx.post(f"{local_server.base_url}/api/v1/generations/{gid}/cancel", headers=local_server.headers)
        assert resp.status_code == 202 and resp.json()["id"] == gid
        sock.settimeout(10)
        while b"0\r\n\r\n" not in got[-16:]:
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
    finally:
        sock.close()
    body_part = got.split(b"\r\n\r\n", 1)[1]
    assert b"[DONE]" not in body_part
    assert b'"code":"cancelled"' in body_part and b'"finish_reason":"error"' in body_part
    rec = fetch_record(local_server, gid)
    assert rec["status"] == "cancelled"
    assert rec["error"]["code"] == "cancelled"  # type: ignore[index]


def test_failed_key_starts_new_generation(local_server: ServerProcess) -> None:
    h = {**local_server.headers, "Idempotency-Key": uuid.uuid4().hex}
    payload = body(max_tokens=200, messages=LONG)
    sock = open_stream(local_server, payload, h)
    got = read_until(sock, 2)
    first_id = got.split(b"x-generation-id: ")[1].split(b"\r\n")[0].decode()
    httpx.post(f"{local_server.base_url}/api/v1/generations/{first_id}/cancel", headers=local_server.headers)
    sock.close()
    wait_record(local_server, first_id, within_s=10)
    assert fetch_record(local_server, first_id)["status"] == "cancelled"
    # a resume (Last-Event-ID) of the ended generation re-sends what it stored, ending with its failure
    resumed = stream_sse(local_server.base_url + CHAT, payload, {**h, "Last-Event-ID": "0"})
    assert resumed.headers["x-generation-id"] == first_id
    assert not resumed.done and resumed.events[0].id == "1"
    assert resumed.json_events()[-1]["error"]["code"] == "cancelled"
    # only `completed` is returned as stored: the same key and body start a new generation
    again = stream_sse(local_server.base_url + CHAT, payload, h, timeout=120)
    assert again.status == 200
    assert again.headers["x-generation-id"] != first_id
    assert "idempotent-replayed" not in again.headers


@pytest.mark.skipif(sys.platform != "linux", reason="SIGKILL semantics")
def test_crash_marks_interrupted_on_restart(tmp_path: Path) -> None:
    config = local_config(tmp_path, server_extra="lease_ttl_s = 1.5")
    server = start_server(tmp_path, config)
    idem = uuid.uuid4().hex
    h = {**server.headers, "Idempotency-Key": idem}
    seen = b""
    gid = ""
    try:
        sock = open_stream(server, body(max_tokens=1500, messages=LONG), h)
        decoder = SSEDecoder()
        events = 0
        head_done = False
        while events < 12:
            chunk = sock.recv(65536)
            seen += chunk
            if not head_done and b"\r\n\r\n" in seen:
                head, rest = seen.split(b"\r\n\r\n", 1)
                gid = head.split(b"x-generation-id: ")[1].split(b"\r\n")[0].decode()
                head_done = True
                events += len(decoder.feed(rest))
            elif head_done:
                events += len(decoder.feed(chunk))
        time.sleep(0.6)  # > 250 ms: what was sent by now must have been flushed
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait()
        sock.close()
    finally:
        server.kill()
    restarted = start_server(tmp_path, config)  # another port: the dead one's lease expires all the same
    try:
        # the lease's 1.5 s, a sweep, slack for a loaded machine
        rec = wait_record(restarted, gid, within_s=6, poll_s=0.1)
        assert rec["status"] == "interrupted"
        assert rec["error"]["code"] == "interrupted"  # type: ignore[index]
        again = httpx.post(restarted.base_url + CHAT, json=body(max_tokens=4, messages=LONG), headers=h)
        assert again.status_code == 422  # a different body with the same key
    finally:
        restarted.stop()


def test_keys_expire_after_retention(tmp_path: Path) -> None:
    config = local_config(tmp_path).replace("[store]\n", "[store]\nretention_hours = 0.0002\n")  # 0.72 s
    server = start_server(tmp_path, config)
    h = {**server.headers, "Idempotency-Key": uuid.uuid4().hex}
    try:
        # the local model's first answer loads it: seconds on a loaded machine, past httpx's default 5 s
        first = httpx.post(server.base_url + CHAT, json=body(max_tokens=4, stream=False), headers=h, timeout=60)
        replay = httpx.post(server.base_url + CHAT, json=body(max_tokens=4, stream=False), headers=h, timeout=60)
        assert replay.headers.get("idempotent-replayed") == "true"
    finally:
        server.stop()
    time.sleep(1.0)
    port = int(server.base_url.rsplit(":", 1)[1])
    server = start_server(tmp_path, config, port=port)  # startup prunes expired keys
    try:
        later = httpx.post(server.base_url + CHAT, json=body(max_tokens=4, stream=False), headers=h, timeout=60)
        assert later.status_code == 200
        assert "idempotent-replayed" not in later.headers
        assert later.headers["x-generation-id"] != first.headers["x-generation-id"]
        # the record itself is kept (the ledger)
        assert fetch_record(server, first.headers["x-generation-id"])["status"] == "completed"
    finally:
        server.stop()
