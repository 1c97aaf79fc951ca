"""Stopping a real `tidegate serve` (docs/api-operations.md §10; docs/operations.md, "Stopping: the drain").

- The first SIGINT/SIGTERM says what it waits for (how many generations, up to how long, and that a
  second Ctrl-C forces); the listener stays open: `/readyz` answers 503 JSON, a new generation
  request gets a 503 in the error shape, streams already running go on.
- A second Ctrl-C ends every stream at once with its door's failure ending (`interrupted`, never
  `[DONE]`), writes `interrupted` records, and exits 0 with no traceback.
- A clean stop exits 0 (a process killed by its own re-raised SIGTERM made `make serve` print
  `*** [Makefile:…: serve] Terminated`).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.process import ServerProcess, free_port, start_server, stop_and_time
from tests.support.records import fetch_record
from tests.support.streams import RawStream
from tests.support.waits import wait_ready, wait_until

REPO = Path(__file__).resolve().parents[2]
NATIVE = "/api/v1/llm/responses"
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream() as emu:
        yield emu


def _config(tmp_path: Path, emu: OpenAIUpstream, drain_s: float) -> str:
    return tidegate_toml(
        f"sqlite:///{tmp_path / 'shared.db'}",
        {"emu": {"kind": "openai", "base_url": emu.base_url}},
        {"slow": [("emu", "slow:0.05")], "brief": [("emu", "silence:1")], "text": [("emu", "text")]},
        server={"drain_s": drain_s, "keepalive_s": 10, "lease_ttl_s": 3},
    )


def _chat(model: str) -> dict[str, Any]:
    return {"model": model, "stream": True, "messages": [{"role": "user", "content": "Count slowly."}]}


def _responses(model: str) -> dict[str, Any]:
    return {"model": model, "stream": True, "input": "Count slowly."}


def _native(model: str) -> dict[str, Any]:
    return {"model": model, "input": "Count slowly.", "stream": True}


def _last_data(stream: RawStream) -> dict[str, Any]:
    return dict(orjson.loads(stream.events[-1].data))


def test_a_second_ctrl_c_ends_every_stream_interrupted_with_its_doors_ending(
    upstream: OpenAIUpstream, tmp_path: Path
) -> None:
    config = _config(tmp_path, upstream, drain_s=30)
    a, b = start_server(tmp_path / "a", config), start_server(tmp_path / "b", config)
    try:
        chat = RawStream(a.base_url, CHAT, _chat("slow"), a.headers)  # keyless: no frame log
        resp = RawStream(a.base_url, "/v1/responses", _responses("slow"), a.headers)
        native = RawStream(a.base_url, NATIVE, _native("slow"), {**a.headers, "Idempotency-Key": uuid.uuid4().hex})
        for stream in (chat, resp, native):
            assert stream.status == 200
            stream.read_events(3)
        t0 = time.monotonic()
        a.proc.send_signal(signal.SIGINT)
        said = re.compile(r"waiting up to 30 s for 3 generations in flight.*Ctrl-C again")
        wait_until(lambda: said.search(a.log()) is not None, 5, "the drain's message", log=a.log)
        seen = len(chat.read_events(len(chat.events) + 5))
        assert not chat.ended and seen > 3  # still streaming in the drain
        a.proc.send_signal(signal.SIGINT)  # the second Ctrl-C: force
        for stream in (chat, resp, native):
            stream.read_to_end(timeout=10)
            assert stream.ended, stream.body[-300:]
        assert a.proc.wait(timeout=15) == 0
        assert time.monotonic() - t0 < 12  # far less than drain_s: forced
        # each door's failure ending, never a finished answer
        assert b"[DONE]" not in chat.body
        ending = _last_data(chat)
        assert ending["choices"][0]["finish_reason"] == "error" and ending["error"]["code"] == "interrupted"
        assert resp.events[-1].event == "response.failed"
        assert _last_data(resp)["response"]["error"]["code"] == "interrupted"
        assert native.events[-1].event == "error" and _last_data(native)["error"]["code"] == "interrupted"
        for stream in (chat, resp, native):
            record = fetch_record(b, stream.headers["x-generation-id"])
            assert record["status"] == "interrupted", record
            assert record["error"]["code"] == "interrupted", record
        log = a.log()
        assert "Traceback" not in log and "CancelledError" not in log, log
        assert "the gateway ended the request" not in log
    finally:
        a.stop()
        b.stop()


def test_the_drain_answers_readyz_503_refuses_new_generations_and_lets_streams_finish(
    upstream: OpenAIUpstream, tmp_path: Path
) -> None:
    a = start_server(tmp_path / "a", _config(tmp_path, upstream, drain_s=3))
    try:
        endless = RawStream(a.base_url, CHAT, _chat("slow"), a.headers)
        brief = RawStream(a.base_url, NATIVE, _native("brief"), a.headers)  # ends ~1 s from now
        endless.read_events(3)
        brief.read_events(2)
        t0 = time.monotonic()
        a.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: "in flight" in a.log(), 5, "the drain's message", log=a.log)
        with httpx.Client(timeout=5) as fresh:  # new connections: the listener is still open
            ready = fresh.get(a.base_url + "/readyz")
            assert ready.status_code == 503 and ready.json() == {"status": "draining"}
            assert fresh.get(a.base_url + "/healthz").status_code == 200  # alive all the same
            refused = fresh.post(a.base_url + CHAT, headers=a.headers, json=_chat("text"))
            assert refused.status_code == 503, refused.text
            error = refused.json()["error"]
            assert error["code"] == "shutting_down" and error["type"] == "server_error"
            assert refused.headers["x-generation-id"] and refused.headers["retry-after"]
        brief_body = brief.read_to_end(timeout=10)
        assert b"event: done" in brief_body and b"event: error" not in brief_body  # finished in the drain
        endless.read_to_end(timeout=10)
        assert b"[DONE]" not in endless.body and _last_data(endless)["error"]["code"] == "interrupted"
        assert a.proc.wait(timeout=15) == 0
        assert 3.0 <= time.monotonic() - t0 < 12
    finally:
        a.stop()


def test_a_stop_with_nothing_running_exits_zero_at_once(upstream: OpenAIUpstream, tmp_path: Path) -> None:
    for signum in (signal.SIGTERM, signal.SIGINT):
        server = start_server(tmp_path / signum.name, _config(tmp_path, upstream, drain_s=30))
        t0 = time.monotonic()
        server.proc.send_signal(signum)
        try:
            assert server.proc.wait(timeout=10) == 0, server.log()
        finally:
            server.stop()
        assert time.monotonic() - t0 < 5
        assert "Traceback" not in server.log()


def test_make_serve_stops_without_a_make_error(upstream: OpenAIUpstream, tmp_path: Path) -> None:
    """`make serve` stopped by SIGTERM (to make: it passes it on) or by Ctrl-C (the terminal signals
    make and the gateway together): make reports no failed recipe."""
    config = tmp_path / "tidegate.toml"
    config.write_text(_config(tmp_path, upstream, drain_s=30))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIDEGATE_", "MAKE"))}
    env["TIDEGATE_MASTER_KEY"] = "tg-make-serve-master-key"
    for signum in (signal.SIGTERM, signal.SIGINT):
        port = free_port()
        make = subprocess.Popen(
            ["make", "--no-print-directory", "serve", f"ARGS=--config {config} --port {port}"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the group signal is what a terminal sends
        )
        try:
            wait_ready(f"http://127.0.0.1:{port}", proc=make, name="make serve")
            if signum == signal.SIGINT:
                os.killpg(make.pid, signal.SIGINT)  # Ctrl-C: every process of the foreground group
            else:
                make.send_signal(signal.SIGTERM)
            out, _ = make.communicate(timeout=20)
        finally:
            if make.poll() is None:
                os.killpg(make.pid, signal.SIGKILL)
                make.wait()
        text = out.decode(errors="replace")
        assert "***" not in text and "Traceback" not in text, text


def _serving_workers(server: ServerProcess, count: int) -> None:
    wait_until(lambda: server.log().count(" serving (") >= count, 60, f"{count} workers serving", log=server.log)


def test_under_workers_a_second_ctrl_c_to_the_parent_ends_the_streams_at_once(
    upstream: OpenAIUpstream, tmp_path: Path
) -> None:
    server = start_server(tmp_path / "w", _config(tmp_path, upstream, drain_s=30), args=["--workers", "2"])
    try:
        _serving_workers(server, 2)
        streams = [RawStream(server.base_url, CHAT, _chat("slow"), server.headers) for _ in range(4)]
        for stream in streams:
            stream.read_events(3)
        t0 = time.monotonic()
        server.proc.send_signal(signal.SIGINT)  # to the parent only (no terminal signals the workers)
        wait_until(lambda: "in flight" in server.log(), 10, "the drain's message", log=server.log)
        # every worker with a stream drains, listening. A worker the kernel gave no stream has nothing
        # to wait for and stops at once: a connection queued on its socket as it closes is reset, so
        # the probe asks again until a listening worker answers
        answers: list[int | str] = []

        def probed() -> bool:
            try:
                answers.append(httpx.get(server.base_url + "/readyz", timeout=5).status_code)
            except httpx.TransportError as exc:
                answers.append(repr(exc))
            return isinstance(answers[-1], int)

        wait_until(probed, 10, "an answer to /readyz", log=server.log)
        assert answers[-1] == 503, answers
        server.proc.send_signal(signal.SIGINT)
        for stream in streams:
            stream.read_to_end(timeout=15)
            assert b"[DONE]" not in stream.body and _last_data(stream)["error"]["code"] == "interrupted"
        assert server.proc.wait(timeout=20) == 0
        assert time.monotonic() - t0 < 15
        assert "Traceback" not in server.log()
    finally:
        server.stop()


def test_a_reload_hands_off_new_connections_while_the_old_workers_streams_finish(
    upstream: OpenAIUpstream, tmp_path: Path
) -> None:
    server = start_server(tmp_path / "w", _config(tmp_path, upstream, drain_s=3), args=["--workers", "2"])
    try:
        _serving_workers(server, 2)
        streams = [RawStream(server.base_url, CHAT, _chat("slow"), server.headers) for _ in range(4)]
        for stream in streams:
            stream.read_events(3)
        server.proc.send_signal(signal.SIGHUP)
        answers: list[int | str] = []
        deadline = time.monotonic() + 90
        body = {**_chat("text"), "stream": False}
        while "reloaded" not in server.log():  # new generations on new connections all through the reload
            assert time.monotonic() < deadline, server.log()
            try:
                answers.append(httpx.post(server.base_url + CHAT, headers=server.headers, json=body).status_code)
            except httpx.HTTPError as exc:
                answers.append(repr(exc))
            time.sleep(0.05)
        # an old worker hands off: it stops listening at once and serves what reached it, so no new
        # generation is refused (a connection queued on a closing socket is reset by the kernel:
        # test_workers.py's reload)
        assert len(answers) > 20 and 503 not in answers, answers
        assert sum(a != 200 for a in answers) <= 2, answers
        for stream in streams:
            stream.read_to_end(timeout=15)
            assert b"[DONE]" not in stream.body and _last_data(stream)["error"]["code"] == "interrupted"
    finally:
        server.stop()


def _stalled_stream(server: ServerProcess, body: dict[str, Any]) -> socket.socket:
    """A streaming request whose client never reads: with a small receive buffer the gateway's
    writes soon wait on it, and its ending can never be written."""
    host, port = server.base_url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    raw = orjson.dumps(body)
    sock.sendall(
        f"POST {NATIVE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {server.key}\r\nContent-Length: {len(raw)}\r\n\r\n".encode()
        + raw
    )
    return sock


def test_a_stop_exits_within_drain_s_plus_2_s_whatever_its_clients_do(upstream: OpenAIUpstream, tmp_path: Path) -> None:
    """A client that stopped reading mid-stream, an idle keep-alive connection and one that never
    sent its request hold nothing up: the process exits within `drain_s` + 2 s of SIGTERM, and the
    reading client's stream ends `interrupted` with its record."""
    drain_s = 1.0
    config = _config(tmp_path, upstream, drain_s=drain_s).replace('"slow:0.05"', '"slow:0.001"')
    server = start_server(tmp_path / "a", config)
    host, port = server.base_url.removeprefix("http://").split(":")
    stalled = [_stalled_stream(server, _native("slow")) for _ in range(3)]
    idle = socket.create_connection((host, int(port)))
    idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert idle.recv(4096).startswith(b"HTTP/1.1 200")
    silent = socket.create_connection((host, int(port)))
    reading = RawStream(server.base_url, NATIVE, _native("slow"), server.headers)
    try:
        reading.read_events(20)
        time.sleep(1.0)  # the stalled streams fill their buffers meanwhile
        elapsed = stop_and_time(server, drain_s + 2)
        assert elapsed <= drain_s + 2, server.log()[-4000:]
        assert server.proc.returncode == 0
        reading.read_to_end(timeout=5)
        assert reading.events[-1].event == "error" and _last_data(reading)["error"]["code"] == "interrupted"
        gid = reading.headers["x-generation-id"]
    finally:
        for sock in (*stalled, idle, silent):
            sock.close()
        reading.close()
        server.stop()
    after = start_server(tmp_path / "b", config)  # the same store: the record the stop wrote
    try:
        assert fetch_record(after, gid)["status"] == "interrupted"
    finally:
        after.stop()
