"""Walking skeleton: a real tidegate server streaming the real local model (SmolLM2 via llama.cpp)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import orjson
import pytest

from tests.support.process import ServerProcess, local_config, start_server
from tests.support.records import wait_record
from tests.support.streams import stream_sse
from tidegate.ids import is_ulid

CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "Say hello in five words."}]


def test_openai_sdk_streams_real_tokens(local_server: ServerProcess) -> None:
    client = openai.OpenAI(base_url=local_server.base_url + "/v1", api_key=local_server.key)
    text = []
    finish = None
    usage = None
    with client.chat.completions.create(model="local/smollm2", messages=HELLO, stream=True, max_tokens=16) as stream:
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            if not chunk.choices:
                continue
            text.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
    assert "".join(text).strip()
    assert finish in ("stop", "length")
    assert usage is not None and usage.completion_tokens > 0 and usage.prompt_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_raw_stream_shape(local_server: ServerProcess) -> None:
    r = stream_sse(
        local_server.base_url + CHAT,
        {"model": "local/smollm2", "stream": True, "max_tokens": 8, "messages": HELLO},
        local_server.headers,
    )
    assert r.status == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    gid = r.headers["x-generation-id"]
    assert is_ulid(gid)
    assert r.headers["x-provider"] == "local"
    assert r.headers["x-served-model"] == "smollm2-135m-instruct"
    assert r.headers["x-provider-attempts"] == "1"
    assert r.done
    # every event carries id: n, from 0, [DONE] included
    assert [e.id for e in r.events] == [str(i) for i in range(len(r.events))]
    chunks = r.json_events()
    assert all(c["id"] == f"chatcmpl-{gid}" and c["model"] == "local/smollm2" for c in chunks)
    roles = [c["choices"][0]["delta"].get("role") for c in chunks if c["choices"]]
    assert roles[0] == "assistant" and roles.count("assistant") == 1
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert finishes in (["stop"], ["length"])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
    # each frame is exactly: id line, one data line, blank line
    for block in r.raw.split(b"\n\n")[:-1]:
        lines = block.split(b"\n")
        assert len(lines) == 2 and lines[0].startswith(b"id: ") and lines[1].startswith(b"data: ")


def test_include_usage_false_omits_usage_chunk(local_server: ServerProcess) -> None:
    r = stream_sse(
        local_server.base_url + CHAT,
        {
            "model": "local/smollm2",
            "stream": True,
            "max_tokens": 4,
            "stream_options": {"include_usage": False},
            "messages": HELLO,
        },
        local_server.headers,
    )
    assert r.done
    assert all(c["choices"] for c in r.json_events())


def test_non_stream_completion(local_server: ServerProcess) -> None:
    client = openai.OpenAI(base_url=local_server.base_url + "/v1", api_key=local_server.key)
    raw = client.chat.completions.with_raw_response.create(model="local/smollm2", messages=HELLO, max_tokens=8)
    completion = raw.parse()
    gid = raw.headers["x-generation-id"]
    assert completion.id == f"chatcmpl-{gid}"
    assert completion.object == "chat.completion"
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content
    assert completion.choices[0].finish_reason in ("stop", "length")
    assert completion.usage is not None and completion.usage.completion_tokens > 0
    record = httpx.get(f"{local_server.base_url}/api/v1/generations/{gid}", headers=local_server.headers).json()
    assert record["status"] == "completed"
    assert record["provider"] == "local" and record["served_model"] == "smollm2-135m-instruct"
    assert record["usage"]["completion_tokens"] == completion.usage.completion_tokens
    assert record["usage_estimated"] is False
    assert record["output_text"] == completion.choices[0].message.content
    expected_cost = (completion.usage.prompt_tokens * 1.0 + completion.usage.completion_tokens * 2.0) / 1e6
    assert record["cost"] == pytest.approx(expected_cost)
    assert record["ttft_ms"] is not None and record["duration_ms"] >= record["ttft_ms"]


def test_models_catalog(local_server: ServerProcess) -> None:
    client = openai.OpenAI(base_url=local_server.base_url + "/v1", api_key=local_server.key)
    ids = {m.id: m for m in client.models.list()}
    assert set(ids) == {"local/smollm2", "local/e5-small"}
    data = httpx.get(local_server.base_url + "/v1/models", headers=local_server.headers).json()["data"]
    by_id = {m["id"]: m for m in data}
    assert by_id["local/e5-small"]["type"] == "embedding"
    assert by_id["local/smollm2"]["pricing"]["prompt"] == 1.0


def test_health_and_ready(local_server: ServerProcess) -> None:
    assert httpx.get(local_server.base_url + "/healthz").json() == {"status": "ok"}
    assert httpx.get(local_server.base_url + "/readyz").status_code == 200


def _err(resp: httpx.Response, status: int, code: str) -> dict[str, str]:
    assert resp.status_code == status, resp.text
    assert is_ulid(resp.headers["x-generation-id"])
    body = resp.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert body["error"]["message"] and body["error"]["type"]
    return dict(body["error"])


@pytest.mark.parametrize(
    ("body", "status", "code", "mentions"),
    [
        (b"{not json", 400, "invalid_request", "JSON"),
        (b"", 400, "invalid_request", "empty"),
        (b"[]", 400, "invalid_request", "object"),
        (b'{"model": "local/smollm2"}', 400, "invalid_request", "messages"),
        (b'{"messages": [{"role": "user", "content": "x"}]}', 400, "invalid_request", "model"),
        (b'{"model": "local/smollm2", "messages": "hi"}', 400, "invalid_request", "messages"),
        (
            b'{"model": "local/smollm2", "messages": [{"role": "robot", "content": "x"}]}',
            400,
            "invalid_request",
            "messages[0].role",
        ),
        (
            b'{"model": "local/smollm2", "messages": [{"role": "user", "content": 5}]}',
            400,
            "invalid_request",
            "messages[0].content",
        ),
        (
            b'{"model": "local/smollm2", "stream": "yes", "messages": [{"role": "user", "content": "x"}]}',
            400,
            "invalid_request",
            "stream",
        ),
        (
            b'{"model": "local/smollm2", "max_tokens": -3, "messages": [{"role": "user", "content": "x"}]}',
            400,
            "invalid_request",
            "max_tokens",
        ),
        (
            b'{"model": "local/smollm2", "temperature": 9, "messages": [{"role": "user", "content": "x"}]}',
            400,
            "invalid_request",
            "temperature",
        ),
        (
            b'{"model": "nope/none", "messages": [{"role": "user", "content": "x"}]}',
            404,
            "model_not_found",
            "nope/none",
        ),
        (
            b'{"model": "local/e5-small", "messages": [{"role": "user", "content": "x"}]}',
            400,
            "invalid_request",
            "embedding",
        ),
    ],
)
def test_bad_input(local_server: ServerProcess, body: bytes, status: int, code: str, mentions: str) -> None:
    resp = httpx.post(local_server.base_url + CHAT, content=body, headers=local_server.headers)
    err = _err(resp, status, code)
    assert mentions in err["message"]


def test_auth_errors_carry_generation_id(local_server: ServerProcess) -> None:
    body = {"model": "local/smollm2", "messages": HELLO}
    _err(httpx.post(local_server.base_url + CHAT, json=body), 401, "unauthorized")
    wrong = httpx.post(local_server.base_url + CHAT, json=body, headers={"Authorization": "Bearer tg-wrong-secret"})
    err = _err(wrong, 401, "unauthorized")
    assert "tg-wrong-secret" not in err["message"]
    _err(httpx.get(local_server.base_url + "/v1/models"), 401, "unauthorized")
    _err(httpx.get(local_server.base_url + "/v1/nothing-here", headers=local_server.headers), 404, "not_found")


def test_body_over_limit_is_413_declared_and_chunked(tmp_path: Path) -> None:
    server = start_server(tmp_path, local_config(tmp_path, "max_body_bytes = 2048"))
    try:
        big = b'{"model": "local/smollm2", "messages": [{"role": "user", "content": "' + b"x" * 10_000 + b'"}]}'
        _err(httpx.post(server.base_url + CHAT, content=big, headers=server.headers), 413, "payload_too_large")

        def chunks() -> object:
            for i in range(0, len(big), 500):
                yield big[i : i + 500]

        resp = httpx.post(server.base_url + CHAT, content=chunks(), headers=server.headers)  # type: ignore[arg-type]
        assert resp.request.headers.get("transfer-encoding") == "chunked"
        _err(resp, 413, "payload_too_large")
        # the server is still fine
        assert httpx.get(server.base_url + "/healthz").status_code == 200
    finally:
        server.stop()
    assert "Traceback" not in server.log()


def test_keepalive_before_first_token_and_idle_timeout(tmp_path: Path) -> None:
    # A cold local model takes far longer than 20 ms to load and answer: keep-alives must flow first,
    # and they commit the response.
    server = start_server(tmp_path, local_config(tmp_path, 'keepalive_s = 0.02\nkeepalive_text = "TG WAIT"'))
    try:
        r = stream_sse(
            server.base_url + CHAT,
            {"model": "local/smollm2", "stream": True, "max_tokens": 4, "messages": HELLO},
            server.headers,
        )
        assert r.status == 200 and r.done
        assert r.raw.startswith(b": TG WAIT\nid: ") or r.raw.startswith(b": TG WAIT\n: TG WAIT\n")
        assert r.comments >= 1
    finally:
        server.stop()
    # An upstream idle timeout shorter than the cold model load: before any byte, 504 upstream_timeout.
    tmp2 = tmp_path / "idle"
    server = start_server(tmp2, local_config(tmp2, "upstream_idle_timeout_s = 0.001"))
    try:
        resp = httpx.post(
            server.base_url + CHAT,
            headers=server.headers,
            json={"model": "local/smollm2", "stream": True, "max_tokens": 4, "messages": HELLO},
        )
        _err(resp, 504, "upstream_timeout")
    finally:
        server.stop()


def test_disconnect_stops_generation(local_server: ServerProcess) -> None:
    body = orjson.dumps(
        {
            "model": "local/smollm2",
            "stream": True,
            "max_tokens": 1500,
            "messages": [{"role": "user", "content": "Write a very long story about the sea."}],
        }
    )
    host, port = local_server.base_url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {local_server.key}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    got = b""
    while got.count(b"data: ") < 3:
        got += sock.recv(65536)
    gid = got.split(b"x-generation-id: ")[1].split(b"\r\n")[0].decode()
    sock.close()
    record = wait_record(local_server, gid, poll_s=0.1)
    assert record["status"] == "cancelled"
    assert record["output_text"]
    assert 0 < record["usage"]["completion_tokens"] < 1500
    assert record["usage_estimated"] is True
    assert record["error"]["code"] == "cancelled"


def test_keys_cli_and_auto_created_key(tmp_path: Path) -> None:
    cfg = tmp_path / "tidegate.toml"
    cfg.write_text(local_config(tmp_path))
    env_cmd = [sys.executable, "-m", "tidegate"]
    out = subprocess.run(
        [*env_cmd, "keys", "create", "--name", "ci", "--config", str(cfg)], capture_output=True, text=True, check=True
    ).stdout
    secret = out.strip().splitlines()[-1]
    assert secret.startswith("tg-") and len(secret) > 30
    listed = subprocess.run(
        [*env_cmd, "keys", "list", "--config", str(cfg)], capture_output=True, text=True, check=True
    ).stdout
    assert "ci" in listed and secret not in listed
    assert secret.encode() not in (tmp_path / "tidegate.db").read_bytes()
    server = start_server(tmp_path, local_config(tmp_path), master_key=None)
    try:
        ok = httpx.get(server.base_url + "/v1/models", headers={"Authorization": f"Bearer {secret}"})
        assert ok.status_code == 200
        subprocess.run([*env_cmd, "keys", "revoke", "ci", "--config", str(cfg)], check=True, capture_output=True)
        revoked = httpx.get(server.base_url + "/v1/models", headers={"Authorization": f"Bearer {secret}"})
        assert revoked.status_code == 401
    finally:
        server.stop()
    assert secret not in server.log()
    # A fresh gateway with no key at all creates one on first start and prints it once.
    fresh = tmp_path / "fresh"
    server = start_server(fresh, local_config(fresh), master_key=None)
    try:
        printed = server.log().strip().splitlines()
        auto = next(line for line in printed if line.startswith("tg-"))
        assert httpx.get(server.base_url + "/v1/models", headers={"Authorization": f"Bearer {auto}"}).status_code == 200
    finally:
        server.stop()
    again = start_server(fresh, local_config(fresh), master_key=None)
    again.stop()
    assert "tg-" not in again.log()
