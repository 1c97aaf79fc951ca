"""Several `tidegate serve` processes on one store (docs/api-operations.md §10): leases, sweeps, the shared live
tail, one upstream call per Idempotency-Key, and the SIGTERM drain.

Every store the gateway supports: SQLite (several processes on one file), Redis and PostgreSQL
(the loopback servers; a backend that does not answer is skipped). Leases are short here
(`lease_ttl_s = 1.5`: renewed and swept every 0.5 s) so a dead gateway's generations end within
about two seconds.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.process import ServerProcess, start_server
from tests.support.records import fetch_record, wait_record
from tests.support.store_backends import shared_store_url
from tests.support.streams import RawStream, stream_sse

NATIVE = "/api/v1/llm/responses"
REPLAY = "/api/v1/llm/responses/replay"
LEASE_TTL_S = 1.5
SWEPT_WITHIN_S = LEASE_TTL_S + LEASE_TTL_S / 3 + 2.5  # the TTL, one sweep, and a loaded machine's slack


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with shared_store_url(request.param, tmp_path, "inst") as url:
        yield url


def _config(store_url: str, emu: OpenAIUpstream, drain_s: float = 30.0) -> str:
    return tidegate_toml(
        store_url,
        {"emu": {"kind": "openai", "base_url": emu.base_url}},
        {
            "slow": [("emu", "slow:0.05")],
            "pause": [("emu", "silence:3")],
            "brief": [("emu", "silence:1")],
            "text": [("emu", "text")],
        },
        server={"lease_ttl_s": LEASE_TTL_S, "drain_s": drain_s, "keepalive_s": 10},
    )


def _start(tmp_path: Path, name: str, config: str) -> ServerProcess:
    return start_server(tmp_path / name, config)


def _native(model: str) -> dict[str, Any]:
    return {"model": model, "input": "Count slowly.", "stream": True}


def _wait_status(server: ServerProcess, gid: str, within_s: float) -> tuple[str, float]:
    """Polls the record until it is no longer in_progress: (its status, seconds waited)."""
    t0 = time.monotonic()
    status = str(wait_record(server, gid, within_s=within_s, poll_s=0.1)["status"])
    return status, time.monotonic() - t0


def _keyed_stream(server: ServerProcess, model: str, idem: str, events: int = 8) -> tuple[RawStream, str]:
    """A keyed native stream read for `events` events and a moment more (so its output is flushed)."""
    stream = RawStream(server.base_url, NATIVE, _native(model), {**server.headers, "Idempotency-Key": idem})
    assert stream.status == 200
    stream.read_events(events)
    time.sleep(0.6)  # flushed at least every 250 ms (docs/api-operations.md §7)
    return stream, stream.headers["x-generation-id"]


def _replay(server: ServerProcess, idem: str) -> httpx.Response:
    return httpx.post(server.base_url + REPLAY, headers={**server.headers, "Idempotency-Key": idem}, timeout=10)


def test_a_killed_gateways_generation_is_interrupted_by_another_without_a_restart(
    store_url: str, tmp_path: Path
) -> None:
    with OpenAIUpstream() as emu:
        config = _config(store_url, emu)
        a, b = _start(tmp_path, "a", config), _start(tmp_path, "b", config)
        try:
            idem = "kill-" + uuid.uuid4().hex
            stream, gid = _keyed_stream(a, "slow", idem)
            assert fetch_record(b, gid)["status"] == "in_progress"  # B sees A's live record
            assert _replay(b, idem).status_code == 409
            a.kill()  # SIGKILL: no shutdown, no release
            stream.close()
            status, waited = _wait_status(b, gid, SWEPT_WITHIN_S)
            assert status == "interrupted", f"still {status} after {waited:.1f} s"
            replay = _replay(b, idem)
            assert replay.status_code == 502, replay.text
            body = replay.json()
            assert body["status"] == "interrupted" and body["error"]["code"] == "interrupted"
            assert body["partial_output"].startswith("tick0 tick1 ")  # what was flushed before the kill
        finally:
            a.kill()
            b.stop()


# each door's keyed stream, and how its failure ending reads (docs/api.md §4)
_DOORS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Count slowly."}]}),
    "responses": ("/v1/responses", {"input": "Count slowly."}),
    "native": (NATIVE, {"input": "Count slowly."}),
}


def _failure_ending(door: str, result: Any) -> dict[str, Any]:
    """The last event of a resumed stream, which must be the door's failure ending (no `[DONE]`)."""
    assert result.status == 200 and result.events, result.raw
    last = result.events[-1]
    assert not result.done, result.raw[-300:]
    data = orjson.loads(last.data)
    if door == "chat":
        assert data["choices"][0]["finish_reason"] == "error" and data["error"]["code"] == "interrupted"
        return dict(data)
    if door == "responses":
        assert last.event == "response.failed" and data["response"]["status"] == "failed"
        assert data["response"]["error"]["code"] == "interrupted"
        return dict(data)
    assert last.event == "error" and data["error"]["code"] == "interrupted"
    return dict(data)


def test_a_killed_gateways_streams_resume_with_their_failure_on_every_door(store_url: str, tmp_path: Path) -> None:
    """SIGKILL the owner mid-stream: a resume on another gateway that follows it live, and one after
    the sweep, get the flushed frames and then the door's own failure ending; the record keeps who
    served and the partial output (docs/api-operations.md §7, §10)."""
    with OpenAIUpstream() as emu:
        config = _config(store_url, emu)
        a, b = _start(tmp_path, "a", config), _start(tmp_path, "b", config)
        try:
            streams: dict[str, tuple[RawStream, str, dict[str, Any]]] = {}
            for door, (path, body) in _DOORS.items():
                idem = f"kill-{door}-" + uuid.uuid4().hex
                full = {"model": "slow", "stream": True, **body}
                stream = RawStream(a.base_url, path, full, {**a.headers, "Idempotency-Key": idem})
                assert stream.status == 200
                stream.read_events(8)
                streams[door] = (stream, idem, full)
            time.sleep(0.6)  # flushed at least every 250 ms
            followers: dict[str, list[Any]] = {door: [] for door in _DOORS}

            def follow(door: str) -> None:
                _, idem, body = streams[door]
                headers = {**b.headers, "Idempotency-Key": idem, "Accept": "text/event-stream", "Last-Event-ID": "2"}
                followers[door].append(stream_sse(b.base_url + _DOORS[door][0], body, headers, timeout=30))

            threads = [threading.Thread(target=follow, args=(door,)) for door in _DOORS]
            for t in threads:
                t.start()
            time.sleep(0.3)
            a.kill()  # SIGKILL: no shutdown, no ending written
            for t in threads:
                t.join(30)
            for door, (stream, idem, body) in streams.items():
                stream.close()
                (live,) = followers[door]
                _failure_ending(door, live)
                assert live.headers["x-provider"] == "emu" and live.headers["x-provider-attempts"] == "1", door
                assert live.headers["x-served-model"] == "slow:0.05"
                assert live.events[0].id == "3", door  # from just after the Last-Event-ID
                gid = live.headers["x-generation-id"]
                record = fetch_record(b, gid)
                assert record["status"] == "interrupted", record
                assert record["output_text"].startswith("tick0 tick1 "), (door, record)
                assert record["provider"] == "emu" and record["attempts"] == 1, (door, record)
                # a later resume, after the sweep: the same frames and the same ending
                headers = {**b.headers, "Idempotency-Key": idem, "Accept": "text/event-stream", "Last-Event-ID": "2"}
                later = stream_sse(b.base_url + _DOORS[door][0], body, headers, timeout=30)
                assert later.raw == live.raw, door
            native_idem = streams["native"][1]
            assert _replay(b, native_idem).json()["partial_output"] == fetch_record(b, gid)["output_text"]
        finally:
            a.kill()
            b.stop()


def test_a_gateway_restarted_on_another_port_leaves_nothing_in_progress(store_url: str, tmp_path: Path) -> None:
    with OpenAIUpstream() as emu:
        config = _config(store_url, emu)
        a = _start(tmp_path, "a", config)
        try:
            idem = "restart-" + uuid.uuid4().hex
            stream, gid = _keyed_stream(a, "slow", idem)
            a.kill()
            stream.close()
        finally:
            a.kill()
        killed_at = time.monotonic()
        again = _start(tmp_path, "again", config)  # another port, the same store
        try:
            assert again.base_url != a.base_url
            status, _ = _wait_status(again, gid, SWEPT_WITHIN_S)
            assert status == "interrupted", f"still {status} {time.monotonic() - killed_at:.1f} s after the kill"
            replay = _replay(again, idem)
            assert replay.status_code == 502 and replay.json()["error"]["code"] == "interrupted"
            assert replay.json()["partial_output"].startswith("tick0 ")
        finally:
            again.stop()


def test_a_console_session_outlives_its_gateway_without_a_master_key(store_url: str, tmp_path: Path) -> None:
    """No TIDEGATE_MASTER_KEY: the console's session secret is the store's (made by the first gateway,
    read by the rest), so a session made on one gateway works on a second one and after a restart,
    CSRF token included; and it never shows in a log."""
    with OpenAIUpstream() as emu:
        config = _config(store_url, emu)
        a = start_server(tmp_path / "a", config, master_key=None)  # the first start prints an admin key
        b = start_server(tmp_path / "b", config, master_key=None)
        again: ServerProcess | None = None
        try:
            admin = next(line for line in a.log().splitlines() if line.startswith("tg-"))
            login = httpx.post(a.base_url + "/ui/login", json={"key": admin})
            assert login.status_code == 200, login.text
            jar = {"tidegate_session": login.headers["set-cookie"].split(";")[0].split("=", 1)[1]}
            csrf = {"x-csrf-token": login.json()["csrf"]}
            for server in (a, b):
                assert httpx.get(server.base_url + "/ui/session", cookies=jar).json()["csrf"] == csrf["x-csrf-token"]
            made = httpx.post(b.base_url + "/api/v1/keys", json={"name": "from-b"}, cookies=jar, headers=csrf)
            assert made.status_code == 201, made.text  # a change on the other gateway, with a's token
            a.stop()
            again = start_server(tmp_path / "again", config, master_key=None)  # a restart: a new process
            assert httpx.get(again.base_url + "/ui/session", cookies=jar).status_code == 200
            assert httpx.get(again.base_url + "/api/v1/keys", cookies=jar).status_code == 200
            forged = jar["tidegate_session"][:-4] + ("0000" if not jar["tidegate_session"].endswith("0000") else "1111")
            assert httpx.get(again.base_url + "/ui/session", cookies={"tidegate_session": forged}).status_code == 401
        finally:
            for server in (a, b, again):
                if server is not None:
                    server.stop()
        for server in (a, b, again):
            if server is not None:
                assert jar["tidegate_session"] not in server.log() and csrf["x-csrf-token"] not in server.log()


def test_a_paused_gateway_that_lost_its_lease_does_not_overwrite_interrupted(store_url: str, tmp_path: Path) -> None:
    with OpenAIUpstream() as emu:
        config = _config(store_url, emu)
        a, b = _start(tmp_path, "a", config), _start(tmp_path, "b", config)
        try:
            idem = "pause-" + uuid.uuid4().hex
            # two chunks, then 3 s of nothing, then the rest: A is stopped meanwhile
            stream = RawStream(a.base_url, NATIVE, _native("pause"), {**a.headers, "Idempotency-Key": idem})
            stream.read_events(3)
            gid = stream.headers["x-generation-id"]
            # stopped in the silence, once its flusher has written those events: a process stopped inside
            # a SQLite write transaction holds the file's write lock, and no gateway could sweep then
            time.sleep(0.4)
            os.kill(a.proc.pid, signal.SIGSTOP)
            try:
                status, waited = _wait_status(b, gid, SWEPT_WITHIN_S)
                assert status == "interrupted", f"still {status} after {waited:.1f} s"
            finally:
                os.kill(a.proc.pid, signal.SIGCONT)
            stream.read_to_end(timeout=30)  # A wakes and finishes the upstream's answer
            stream.close()
            # the client is not told it is complete: the stored outcome is `interrupted`
            assert stream.events[-1].event == "error", stream.body[-300:]
            assert orjson.loads(stream.events[-1].data)["error"]["code"] == "interrupted"
            time.sleep(0.5)
            rec = fetch_record(b, gid)
            assert rec["status"] == "interrupted", rec
            assert "lease" in a.log() and "interrupted" in a.log()
            # A took a new lease and serves on: what it runs now completes
            fresh = stream_sse(a.base_url + NATIVE, _native("text"), a.headers)
            assert fresh.status == 200 and fresh.events[-1].event == "done"
            assert fetch_record(b, fresh.headers["x-generation-id"])["status"] == "completed"
        finally:
            a.stop()
            b.stop()


def test_one_idempotency_key_on_three_gateways_reaches_the_upstream_once(store_url: str, tmp_path: Path) -> None:
    with OpenAIUpstream() as emu:
        config = _config(store_url, emu)
        servers = [_start(tmp_path, name, config) for name in ("a", "b", "c")]
        try:
            idem = "once-" + uuid.uuid4().hex
            body = {"model": "text", "input": "Hello", "stream": False}
            barrier = threading.Barrier(20)
            answers: list[httpx.Response] = []
            lock = threading.Lock()

            def send(server: ServerProcess) -> None:
                with httpx.Client(timeout=60) as client:
                    barrier.wait()
                    resp = client.post(
                        server.base_url + NATIVE, json=body, headers={**server.headers, "Idempotency-Key": idem}
                    )
                with lock:
                    answers.append(resp)

            threads = [threading.Thread(target=send, args=(servers[i % 3],)) for i in range(20)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=90)
            assert len(answers) == 20
            assert {r.status_code for r in answers} <= {200, 409}, [r.text for r in answers]
            assert len({r.headers["x-generation-id"] for r in answers}) == 1
            assert emu.counts().get("text", 0) == 1
        finally:
            for s in servers:
                s.stop()


def test_a_resume_on_another_gateway_follows_the_stream_live_to_its_end(store_url: str, tmp_path: Path) -> None:
    with OpenAIUpstream() as emu:
        config = _config(store_url, emu)
        a, b = _start(tmp_path, "a", config), _start(tmp_path, "b", config)
        try:
            idem = "follow-" + uuid.uuid4().hex
            # two chunks, 3 s of silence, then the rest and `done`: B's follower must wait for it live
            body = _native("pause")
            original = RawStream(a.base_url, NATIVE, body, {**a.headers, "Idempotency-Key": idem})
            first = original.read_events(3)
            last_id = first[2].id
            time.sleep(0.6)
            # beside it, a streaming replay on B follows the same generation from its start
            replayed: list[Any] = []
            replay_headers = {**b.headers, "Idempotency-Key": idem, "Accept": "text/event-stream"}
            follower = threading.Thread(
                target=lambda: replayed.append(stream_sse(b.base_url + REPLAY, b"", replay_headers, timeout=30))
            )
            follower.start()
            headers = {**b.headers, "Idempotency-Key": idem, "Accept": "text/event-stream", "Last-Event-ID": last_id}
            resumed = stream_sse(b.base_url + NATIVE, body, headers, timeout=30)
            whole = original.read_to_end(timeout=30)
            original.close()
            follower.join(30)
            assert resumed.status == 200
            assert resumed.events[-1].event == "done"
            (replay,) = replayed
            assert replay.status == 200 and replay.events[-1].event == "done"
            original_done = orjson.loads(next(e for e in original.events if e.event == "done").data)
            assert orjson.loads(replay.events[-1].data)["output_text"] == original_done["output_text"]
            # byte for byte what the original stream sent after that event
            cut = whole.index(f"id: {last_id}\n".encode())
            tail = whole[cut:].split(b"\n\n", 1)[1]
            assert resumed.raw == tail
        finally:
            a.stop()
            b.stop()


def test_sigterm_drains_then_interrupts_what_still_runs(store_url: str, tmp_path: Path) -> None:
    with OpenAIUpstream() as emu:
        config = _config(store_url, emu, drain_s=2.0)
        a, b = _start(tmp_path, "a", config), _start(tmp_path, "b", config)
        try:
            endless = RawStream(a.base_url, NATIVE, _native("slow"), {**a.headers, "Idempotency-Key": uuid.uuid4().hex})
            endless.read_events(3)
            short = RawStream(a.base_url, NATIVE, _native("brief"), a.headers)  # ends ~1 s from now
            short.read_events(2)
            keep = httpx.Client(timeout=5)
            assert keep.get(a.base_url + "/readyz").status_code == 200  # a kept-alive connection
            t0 = time.monotonic()
            a.proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            try:
                ready = keep.get(a.base_url + "/readyz").status_code
            except httpx.HTTPError:
                ready = 0  # the server closed the idle connection: equally not ready
            assert ready in (0, 503)
            endless_body = endless.read_to_end(timeout=15)
            short_body = short.read_to_end(timeout=15)
            a.proc.wait(timeout=15)
            took = time.monotonic() - t0
            # the short one finished in the drain; the endless one ended interrupted after it
            assert b"event: done" in short_body and b"event: error" not in short_body
            assert b"event: done" not in endless_body
            error = [e for e in endless.events if e.event == "error"]
            assert error and orjson.loads(error[0].data)["error"]["code"] == "interrupted"
            assert 2.0 <= took < 12, took
            for stream in (endless, short):
                gid = stream.headers["x-generation-id"]
                assert fetch_record(b, gid)["status"] == ("completed" if stream is short else "interrupted")
            keep.close()
        finally:
            a.stop()
            b.stop()


def _workers_of(server: ServerProcess) -> list[int]:
    """The worker processes of a `--workers N` gateway (not multiprocessing's resource tracker)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == server.proc.pid and b"resource_tracker" not in cmdline:
            pids.append(int(entry.name))
    return pids


def test_workers_on_one_sqlite_file_sweep_a_killed_workers_generation(tmp_path: Path) -> None:
    with OpenAIUpstream() as emu:
        server = start_server(
            tmp_path / "w", _config(f"sqlite:///{tmp_path / 'shared.db'}", emu), args=["--workers", "2"]
        )
        try:
            idem = "workers-" + uuid.uuid4().hex
            stream, gid = _keyed_stream(server, "slow", idem)
            workers = _workers_of(server)
            assert len(workers) == 2, workers
            for pid in workers:  # both: whichever ran it, its owner is gone
                os.kill(pid, signal.SIGKILL)
            stream.close()
            deadline = time.monotonic() + 30  # the supervisor starts two new workers (new owners)
            while True:
                try:
                    status = fetch_record(server, gid)["status"]
                except (httpx.HTTPError, AssertionError):
                    status = "unreachable"
                if status == "interrupted" or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert status == "interrupted"
            assert _replay(server, idem).json()["error"]["code"] == "interrupted"
        finally:
            server.stop()
