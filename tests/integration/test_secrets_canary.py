"""No secret is ever logged, stored in clear or echoed: a canary API key and a canary
provider key through a gateway at DEBUG logging — successes, upstreams that echo the request head they
received (the provider key among it) in an error body before the stream starts, in an in-band error
after it and inside a normal delta (split between two reads), a wrong key that contains the canary,
a replay — then every log line, the store's files, every answer and every generation record are
searched: 0 hits.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from pathlib import Path

import httpx

from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.process import start_server
from tests.support.streams import stream_sse

API_CANARY = "tg-canary-api-" + uuid.uuid4().hex
PROVIDER_CANARY = "sk-canary-provider-" + uuid.uuid4().hex
FIRST_CHUNK = b'{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}'
SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"


def _echoing_upstream(mid_stream: bool) -> tuple[socket.socket, int]:
    """A raw upstream that echoes the request head it received as an error message: a 500 answer, or
    (`mid_stream`) an in-band error event after a first chunk."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):  # a connection closed early (serve's start probe)
                head = b""
                while b"\r\n\r\n" not in head:
                    data = conn.recv(65536)
                    if not data:
                        break
                    head += data
                said = head.split(b"\r\n\r\n")[0].decode("latin-1").replace('"', "'").replace("\r\n", " | ")
                error = ('{"error": {"message": "you sent: ' + said + '", "type": "server_error"}}').encode()
                if mid_stream:
                    conn.sendall(SSE_HEAD + b"data: " + FIRST_CHUNK + b"\n\n")
                    time.sleep(0.3)  # the gateway has written the first chunk: no fallback now
                    conn.sendall(b"data: " + error + b"\n\n")
                else:
                    conn.sendall(
                        b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n"
                        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(error), error)
                    )

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def _provider(kind: str, base_url: str) -> dict[str, str]:
    return {"kind": kind, "base_url": base_url, "api_key_env": "CANARY_PROVIDER_KEY"}


def test_canaries_appear_in_no_log_no_store_file_and_no_answer(tmp_path: Path, emu: OpenAIUpstream) -> None:
    before, before_port = _echoing_upstream(mid_stream=False)
    after, after_port = _echoing_upstream(mid_stream=True)
    config = tidegate_toml(
        f"sqlite:///{tmp_path / 'canary.db'}",
        {
            "good": _provider("openai", emu.base_url),
            "echo": _provider("openai", f"http://127.0.0.1:{before_port}/v1"),
            "anth": _provider("anthropic", f"http://127.0.0.1:{before_port}"),
            "mid": _provider("openai", f"http://127.0.0.1:{after_port}/v1"),
        },
        {
            "ok": [("good", "text")],
            "headecho": [("good", "echo-head")],
            "echoed": [("echo", "m")],
            "anthropic": [("anth", "m")],
            "mid": [("mid", "m")],
        },
    )
    server = start_server(
        tmp_path / "gw",
        config,
        master_key=API_CANARY,
        extra_env={"TIDEGATE_LOG_LEVEL": "DEBUG", "CANARY_PROVIDER_KEY": PROVIDER_CANARY},
    )
    answers: list[bytes] = []
    idem = {"Idempotency-Key": "canary-" + uuid.uuid4().hex}
    try:
        chat = server.base_url + "/v1/chat/completions"
        body = {"model": "ok", "messages": [{"role": "user", "content": "hi"}]}
        for model in ("ok", "headecho", "echoed", "anthropic", "mid"):
            r = httpx.post(chat, json={**body, "model": model}, headers=server.headers, timeout=30)
            answers += [r.content, str(r.headers).encode()]
            headers = {**server.headers, **idem} if model == "ok" else server.headers
            s = stream_sse(chat, {**body, "model": model, "stream": True}, headers)
            answers += [s.raw, str(s.headers).encode()]
        assert emu.last("text").headers.get("authorization") == f"Bearer {PROVIDER_CANARY}"  # it was used
        assert any(b"you sent" in a for a in answers)  # an upstream's echo of its request reached a client
        echoed = [r for r in emu.requests if r.scenario == "echo-head"]
        assert len(echoed) == 2 and all(PROVIDER_CANARY.encode() in b"".join(r.sent) for r in echoed)
        assert sum(a.count(b"Bearer ***") for a in answers) == 2  # in a delta, masked, streamed and not
        generations = httpx.get(server.base_url + "/api/v1/generations?limit=50", headers=server.headers)
        answers.append(generations.content)
        for gen in generations.json()["data"]:
            answers.append(
                httpx.get(f"{server.base_url}/api/v1/generations/{gen['id']}", headers=server.headers).content
            )
        wrong = httpx.post(chat, json=body, headers={"Authorization": f"Bearer {API_CANARY}x"})
        assert wrong.status_code == 401
        answers.append(wrong.content)
        replay = httpx.post(server.base_url + "/api/v1/llm/responses/replay", headers={**server.headers, **idem})
        assert replay.status_code == 200
        answers += [replay.content, httpx.get(server.base_url + "/metrics").content]
    finally:
        server.stop()
        before.close()
        after.close()
    log = server.log()
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("canary.db*"))
    assert log and stored
    for canary in (API_CANARY, PROVIDER_CANARY):
        assert canary not in log
        assert canary.encode() not in stored
        for answer in answers:
            assert canary.encode() not in answer
