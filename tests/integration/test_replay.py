"""`POST /api/v1/llm/responses/replay` (docs/api-operations.md §7): stored results, live follow, failures, crashes."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import httpx
import orjson

from tests.support.keyed_streams import LONG, body, open_stream, read_until
from tests.support.process import ServerProcess, local_config, start_server
from tests.support.records import fetch_record, wait_record
from tests.support.streams import RawStream, stream_sse

REPLAY = "/api/v1/llm/responses/replay"


def replay(server: ServerProcess, key: str, **headers: str) -> httpx.Response:
    return httpx.post(server.base_url + REPLAY, headers={**server.headers, "Idempotency-Key": key, **headers})


def chat_text(events: list[dict[str, object]]) -> str:
    out = []
    for c in events:
        for ch in c.get("choices") or []:  # type: ignore[attr-defined]
            out.append(ch["delta"].get("content") or "")
    return "".join(out)


def test_replay_of_completed_chat_stream(local_server: ServerProcess) -> None:
    key = uuid.uuid4().hex
    streamed = stream_sse(
        local_server.base_url + "/v1/chat/completions",
        body(max_tokens=16),
        {**local_server.headers, "Idempotency-Key": key},
    )
    assert streamed.done
    gid = streamed.headers["x-generation-id"]
    resp = replay(local_server, key)  # right after [DONE]: already 200
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-generation-id"] == gid
    result = resp.json()
    assert result["id"] == gid and result["status"] == "completed"
    assert result["provider"] == "local" and result["served_model"] == "smollm2-135m-instruct"
    assert result["output_text"] == chat_text(streamed.json_events())
    usage = streamed.json_events()[-1]["usage"]
    assert result["usage"]["completion_tokens"] == usage["completion_tokens"]
    assert result["finish_reason"] in ("stop", "length")
    assert result["output"][0]["type"] == "message"
    # streaming replay: native events, ending with the same `done` object
    sse = stream_sse(
        local_server.base_url + REPLAY,
        b"",
        {**local_server.headers, "Idempotency-Key": key, "Accept": "text/event-stream"},
    )
    assert sse.status == 200
    names = [e.event for e in sse.events]
    assert names[0] == "start" and names[-1] == "done"
    assert orjson.loads(sse.events[0].data)["id"] == gid
    assert orjson.loads(sse.events[-1].data) == result
    assert [e.id for e in sse.events] == [str(i) for i in range(len(sse.events))]
    # Last-Event-ID skips what the client already has
    tail = stream_sse(
        local_server.base_url + REPLAY,
        b"",
        {**local_server.headers, "Idempotency-Key": key, "Accept": "text/event-stream", "Last-Event-ID": "1"},
    )
    assert [e.data for e in tail.events] == [e.data for e in sse.events[2:]]


def test_replay_errors(local_server: ServerProcess) -> None:
    missing = replay(local_server, "never-used-" + uuid.uuid4().hex)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "generation_not_found"
    no_key = httpx.post(local_server.base_url + REPLAY, headers=local_server.headers)
    assert no_key.status_code == 400 and "Idempotency-Key" in no_key.json()["error"]["message"]
    with_body = httpx.post(
        local_server.base_url + REPLAY,
        content=b'{"model": "x"}',
        headers={**local_server.headers, "Idempotency-Key": "k"},
    )
    assert with_body.status_code == 400 and "no body" in with_body.json()["error"]["message"]
    assert httpx.post(local_server.base_url + REPLAY, headers={"Idempotency-Key": "k"}).status_code == 401


def test_replay_running_is_409_then_follows_live(local_server: ServerProcess) -> None:
    key = uuid.uuid4().hex
    sock = open_stream(
        local_server, body(max_tokens=80, messages=LONG), {**local_server.headers, "Idempotency-Key": key}
    )
    try:
        head = read_until(sock, 2)
        gid = head.split(b"x-generation-id: ")[1].split(b"\r\n")[0].decode()
        busy = replay(local_server, key)
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "generation_in_progress"
        assert int(busy.headers["retry-after"]) >= 1
        live = stream_sse(
            local_server.base_url + REPLAY,
            b"",
            {**local_server.headers, "Idempotency-Key": key, "Accept": "text/event-stream"},
        )
        assert live.events[-1].event == "done"
        done = orjson.loads(live.events[-1].data)
        assert done["id"] == gid
        deltas = "".join(orjson.loads(e.data).get("text", "") for e in live.events if e.event == "delta")
        assert deltas == done["output_text"] == fetch_record(local_server, gid)["output_text"]
    finally:
        sock.close()


def test_replay_of_cancelled_is_502_with_partial_output(local_server: ServerProcess) -> None:
    key = uuid.uuid4().hex
    sock = open_stream(
        local_server, body(max_tokens=1500, messages=LONG), {**local_server.headers, "Idempotency-Key": key}
    )
    head = read_until(sock, 4)
    gid = head.split(b"x-generation-id: ")[1].split(b"\r\n")[0].decode()
    httpx.post(f"{local_server.base_url}/api/v1/generations/{gid}/cancel", headers=local_server.headers)
    sock.close()
    wait_record(local_server, gid, within_s=10)
    resp = replay(local_server, key)
    assert resp.status_code == 502
    payload = resp.json()
    assert payload["status"] == "cancelled"
    assert payload["error"]["code"] == "cancelled"
    assert payload["partial_output"]


def test_native_door_replay_streams_identical_frames(local_server: ServerProcess) -> None:
    key = uuid.uuid4().hex
    original = stream_sse(
        local_server.base_url + "/api/v1/llm/responses",
        {"model": "local/smollm2", "input": "Name a colour.", "max_output_tokens": 8},
        {**local_server.headers, "Idempotency-Key": key},
    )
    assert original.status == 200 and original.events[-1].event == "done"
    again = stream_sse(
        local_server.base_url + REPLAY,
        b"",
        {**local_server.headers, "Idempotency-Key": key, "Accept": "text/event-stream"},
    )
    assert again.raw == original.raw
    as_json = replay(local_server, key).json()
    assert as_json == orjson.loads(original.events[-1].data)


def test_interrupted_after_crash_replays_502_with_flushed_prefix(tmp_path: Path) -> None:
    config = local_config(tmp_path, server_extra="lease_ttl_s = 1.5")
    server = start_server(tmp_path, config)
    key = uuid.uuid4().hex
    try:
        stream = RawStream(
            server.base_url,
            "/v1/chat/completions",
            body(max_tokens=1500, messages=LONG),
            {**server.headers, "Idempotency-Key": key},
        )
        events = stream.read_events(15)
        time.sleep(0.6)  # everything sent > 250 ms before the crash must be flushed
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait()
        stream.close()
    finally:
        server.kill()
    seen_text = chat_text([orjson.loads(e.data) for e in events])
    assert seen_text
    restarted = start_server(tmp_path, config)  # another port: the dead one's lease expires all the same
    try:
        deadline = time.monotonic() + 6  # the lease's 1.5 s, a sweep, slack for a loaded machine
        while (resp := replay(restarted, key)).status_code == 409 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert resp.status_code == 502
        payload = resp.json()
        assert payload["status"] == "interrupted"
        assert payload["error"]["code"] == "interrupted"
        assert payload["partial_output"].startswith(seen_text)
    finally:
        restarted.stop()
