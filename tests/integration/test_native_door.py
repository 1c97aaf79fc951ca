"""`/api/v1/llm/responses` against a real tidegate server and the real local model."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.support.process import ServerProcess, local_config, start_server
from tests.support.streams import SSEResult, stream_sse
from tidegate.ids import is_ulid

NATIVE = "/api/v1/llm/responses"


def events_of(r: SSEResult) -> list[tuple[str, dict[str, Any]]]:
    assert [e.id for e in r.events] == [str(i) for i in range(len(r.events))]
    return [(e.event, orjson.loads(e.data)) for e in r.events]


def test_stream_start_status_delta_done(local_server: ServerProcess) -> None:
    r = stream_sse(
        local_server.base_url + NATIVE,
        {"model": "local/smollm2", "input": "Say hello in five words.", "max_output_tokens": 16},
        local_server.headers,
    )
    assert r.status == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["x-kendr-stream-mode"] == "streamed"
    gid = r.headers["x-generation-id"]
    assert is_ulid(gid)
    evs = events_of(r)
    names = [n for n, _ in evs]
    assert names[0] == "start" and names[-1] == "done" and names.count("done") == 1
    assert "error" not in names
    start, done = evs[0][1], evs[-1][1]
    assert start["id"] == gid == done["id"]
    assert start["model"] == "local/smollm2" and isinstance(start["created_at"], int)
    statuses = [p["status"] for n, p in evs if n == "status"]
    assert statuses[0] == "connecting" and "generating" in statuses
    text = "".join(p["text"] for n, p in evs if n == "delta" and p["type"] == "text")
    assert text and done["output_text"] == text
    assert done["status"] == "completed" and done["model"] == "local/smollm2"
    assert done["provider"] == "local" and done["served_model"] == "smollm2-135m-instruct"
    assert done["finish_reason"] in ("stop", "length")
    assert done["reasoning"] is None and done["reasoning_details"] == []
    assert done["output"][0]["type"] == "message"
    assert done["output"][0]["content"][0]["text"] == text
    record = httpx.get(f"{local_server.base_url}/api/v1/generations/{gid}", headers=local_server.headers).json()
    assert record["status"] == "completed"
    assert done["usage"] == record["usage"]
    assert record["output_text"] == text and record["finish_reason"] == done["finish_reason"]


def test_non_stream_returns_the_done_object(local_server: ServerProcess) -> None:
    resp = httpx.post(
        local_server.base_url + NATIVE,
        json={"model": "local/smollm2", "input": "Name a fruit.", "stream": False, "max_output_tokens": 8},
        headers=local_server.headers,
        timeout=60,
    )
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/json"
    body = resp.json()
    gid = resp.headers["x-generation-id"]
    assert body["id"] == gid and body["status"] == "completed" and body["output_text"]
    assert set(body) == {
        "id",
        "status",
        "model",
        "provider",
        "served_model",
        "output_text",
        "output",
        "reasoning",
        "reasoning_details",
        "finish_reason",
        "usage",
    }
    record = httpx.get(f"{local_server.base_url}/api/v1/generations/{gid}", headers=local_server.headers).json()
    assert body["usage"] == record["usage"] and body["usage"]["completion_tokens"] > 0


@pytest.mark.parametrize("stream", [True, False])
def test_repeat_with_idempotency_key_answers_the_same_result(local_server: ServerProcess, stream: bool) -> None:
    body = {"model": "local/smollm2", "input": "Count to three.", "stream": stream, "max_output_tokens": 10}
    headers = {**local_server.headers, "Idempotency-Key": f"native-{uuid.uuid4()}"}
    url = local_server.base_url + NATIVE
    if stream:
        first = stream_sse(url, body, headers)
        again = stream_sse(url, body, headers)
        assert again.headers.get("idempotent-replayed") == "true"
        assert again.headers["x-generation-id"] == first.headers["x-generation-id"]
        assert events_of(again) == events_of(first)  # the stored frames, `done` included
    else:
        one = httpx.post(url, json=body, headers=headers, timeout=60)
        two = httpx.post(url, json=body, headers=headers, timeout=60)
        assert one.status_code == two.status_code == 200
        assert two.headers.get("idempotent-replayed") == "true"
        assert two.json() == one.json()


@pytest.mark.parametrize(
    ("extra", "mentions"),
    [
        ({"tool_choice": "auto"}, "'tool_choice'"),
        ({"temperature": 0.5}, "'temperature'"),
        ({"messages": []}, "'messages'"),
        ({"tools": [{"type": "code_interpreter"}]}, "'tools[0].type'"),
        ({"stream": "yes"}, "'stream'"),
    ],
)
def test_unsupported_field_is_400_naming_it(local_server: ServerProcess, extra: dict[str, Any], mentions: str) -> None:
    body = {"model": "local/smollm2", "input": "x", **extra}
    resp = httpx.post(local_server.base_url + NATIVE, json=body, headers=local_server.headers)
    assert resp.status_code == 400, resp.text
    assert is_ulid(resp.headers["x-generation-id"])
    err = resp.json()["error"]
    assert err["code"] == "invalid_request" and mentions in err["message"]


def test_failure_after_commit_is_an_error_event(tmp_path: Path) -> None:
    # Keep-alives commit the stream before the cold model loads; the upstream idle timeout then fires.
    server = start_server(tmp_path, local_config(tmp_path, "keepalive_s = 0.002\nupstream_idle_timeout_s = 0.05"))
    try:
        r = stream_sse(server.base_url + NATIVE, {"model": "local/smollm2", "input": "Hello"}, server.headers)
        assert r.status == 200 and r.headers["x-kendr-stream-mode"] == "streamed" and r.comments >= 1
        evs = events_of(r)
        names = [n for n, _ in evs]
        assert names[0] == "start" and names[-1] == "error" and "done" not in names
        assert evs[0][1]["id"] == r.headers["x-generation-id"]
        statuses = [p["status"] for n, p in evs if n == "status"]
        assert statuses == ["connecting", "thinking"]  # silence before any output is thinking
        error = evs[-1][1]
        assert error["error"]["code"] == "upstream_timeout" and error["error"]["message"]
        assert error["partial_output"] == ""
    finally:
        server.stop()
    assert "Traceback" not in server.log()


def test_non_stream_timeout_is_504(tmp_path: Path) -> None:
    server = start_server(tmp_path, local_config(tmp_path, "upstream_idle_timeout_s = 0.001"))
    try:
        resp = httpx.post(
            server.base_url + NATIVE,
            json={"model": "local/smollm2", "input": "Hello", "stream": False},
            headers=server.headers,
        )
        assert resp.status_code == 504 and resp.json()["error"]["code"] == "upstream_timeout"
        assert is_ulid(resp.headers["x-generation-id"])
    finally:
        server.stop()
