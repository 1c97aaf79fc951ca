"""Streams that never lie, on the `openai` kind with injected faults and a real server.

After the commit point every failure ends the stream with exactly one failure chunk and no `[DONE]`,
and never falls back; keep-alives are written during upstream silence without resetting the idle
timeout (server-wide and per provider); the commit point is the first event or the first keep-alive;
a client that goes away closes the upstream within a second and leaves a `cancelled` record.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from tests.emulators.openai_upstream import OpenAIUpstream, tidegate_toml
from tests.support.process import ServerProcess, running_server, sqlite_url
from tests.support.records import wait_record
from tests.support.streams import SSEResult, stream_sse
from tests.support.waits import poll_until
from tidegate.sse import SSEDecoder

CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]
IDLE = 1.0


@pytest.fixture(scope="module")
def server(emu: OpenAIUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """No keep-alive within a test's time (30 s); idle timeout 1 s."""
    workdir = tmp_path_factory.mktemp("stream-faults")
    providers = {
        "emu": {"kind": "openai", "base_url": emu.base_url},
        "emu2": {"kind": "openai", "base_url": emu.base_url},
    }
    models = {f"f/{fault}": [("emu", fault), ("emu2", "text")] for fault in FAULT_SCENARIOS}
    models["f/slow"] = [("emu", "slow:0.05")]
    config = tidegate_toml(
        sqlite_url(workdir), providers, models, server={"keepalive_s": 30, "upstream_idle_timeout_s": IDLE}
    )
    with running_server(workdir, config) as srv:
        yield srv


@pytest.fixture(scope="module")
def ka_server(emu: OpenAIUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Keep-alive every 0.3 s with a custom text; idle 1.5 s, overridden to 3 s for `emu-patient`."""
    workdir = tmp_path_factory.mktemp("stream-keepalive")
    providers = {
        "emu": {"kind": "openai", "base_url": emu.base_url},
        "emu2": {"kind": "openai", "base_url": emu.base_url},
        "emu-patient": {"kind": "openai", "base_url": emu.base_url, "upstream_idle_timeout_s": 3.0},
    }
    models = {
        "ka/silence-short": [("emu", "silence:1.0")],
        "ka/silence-long": [("emu", "silence:10")],
        "ka/patient-completes": [("emu-patient", "silence:2.2")],
        "ka/patient-times-out": [("emu-patient", "silence:10")],
        "ka/late-first-byte": [("emu", "slow-first-byte:10"), ("emu2", "text")],
        "ka/late-answer": [("emu", "headers-then-silence:0.6"), ("emu2", "text")],
        "ka/late-error": [("emu", "error-late:0.6"), ("emu2", "text")],
        "ka/steady": [("emu", "slow:0.1")],
    }
    config = tidegate_toml(
        sqlite_url(workdir),
        providers,
        models,
        server={"keepalive_s": 0.3, "keepalive_text": "still working", "upstream_idle_timeout_s": 1.5},
    )
    with running_server(workdir, config) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _fresh(emu: OpenAIUpstream) -> None:
    emu.reset()


def chat(server: ServerProcess, model: str, **extra: Any) -> SSEResult:
    body = {"model": model, "messages": HI, "stream": True, **extra}
    return stream_sse(server.base_url + CHAT, body, server.headers, timeout=30)


def assert_failure_ending(
    r: SSEResult, code: str, model: str, upstream_id: str | None, provider: str = "emu"
) -> dict[str, Any]:
    """Byte level: no [DONE] anywhere, exactly one failure chunk and it is the last event."""
    assert r.status == 200
    assert b"data: [DONE]" not in r.raw
    assert not r.done
    chunks = r.json_events()
    failures = [c for c in chunks if "error" in c]
    assert len(failures) == 1 and failures[0] is chunks[-1]
    last = chunks[-1]
    assert last["error"]["code"] == code and last["error"]["message"]
    assert last["provider"] == provider
    assert last["model"] == model
    assert last["object"] == "chat.completion.chunk"
    delta = {"content": ""} if len(chunks) > 1 else {"role": "assistant", "content": ""}
    assert last["choices"] == [{"index": 0, "delta": delta, "finish_reason": "error"}]
    if upstream_id is not None:
        assert last["id"] == upstream_id
    # the raw bytes end with that chunk's frame
    assert r.raw.endswith(b"data: " + r.events[-1].data.encode() + b"\n\n")
    return last


FAULTS = [
    ("error-mid", "upstream_error"),
    ("drop", "upstream_error"),
    ("no-done", "upstream_error"),
    ("silence:5", "upstream_timeout"),
    ("invalid-json", "upstream_protocol_error"),
    ("oversize", "upstream_protocol_error"),
]
FAULT_SCENARIOS = [f for f, _ in FAULTS]


@pytest.mark.parametrize(("fault", "code"), FAULTS, ids=FAULT_SCENARIOS)
def test_failure_after_commit_is_one_chunk_without_done(
    server: ServerProcess, emu: OpenAIUpstream, fault: str, code: str
) -> None:
    model = f"f/{fault}"
    t0 = time.monotonic()
    r = chat(server, model)
    elapsed = time.monotonic() - t0
    scenario = fault.split(":")[0]
    upstream = emu.last(scenario)
    assert_failure_ending(r, code, model, f"chatcmpl-emu{upstream.n}")
    assert r.headers["x-provider"] == "emu" and r.headers["x-provider-attempts"] == "1"
    assert emu.counts() == {scenario: 1}  # no fallback after the commit point
    # what came before the failure is the upstream's payloads, untouched
    forwarded = [e.data.encode() for e in r.events[:-1]]
    assert forwarded == upstream.sent[: len(forwarded)] and len(forwarded) >= 2
    if code == "upstream_timeout":
        assert IDLE * 0.9 <= elapsed < IDLE + 3
    rec = wait_record(server, r.headers["x-generation-id"])
    assert rec["status"] == "failed" and rec["error"]["code"] == code
    assert rec["output_text"].startswith("Hello") and rec["finish_reason"] == "error"


@pytest.mark.parametrize(("fault", "code"), FAULTS, ids=FAULT_SCENARIOS)
def test_openai_sdk_sees_every_fault(server: ServerProcess, fault: str, code: str) -> None:
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.key, max_retries=0)
    text: list[str] = []
    with pytest.raises(openai.APIError):
        for chunk in client.chat.completions.create(model=f"f/{fault}", messages=HI, stream=True):  # type: ignore[arg-type]
            if chunk.choices:
                text.append(chunk.choices[0].delta.content or "")
    assert "".join(text).startswith("Hello")


@pytest.mark.parametrize(("fault", "status"), [("silence:5", 504), ("error-mid", 502), ("drop", 502)])
def test_non_stream_mid_stream_failure_is_an_error_status(
    server: ServerProcess, emu: OpenAIUpstream, fault: str, status: int
) -> None:
    resp = httpx.post(server.base_url + CHAT, json={"model": f"f/{fault}", "messages": HI}, headers=server.headers)
    assert resp.status_code == status, resp.text
    assert resp.json()["error"]["code"] == ("upstream_timeout" if status == 504 else "upstream_error")
    assert emu.counts() == {fault.split(":")[0]: 1}  # the first event was the commit point: no fallback
    assert resp.headers["x-provider"] == "emu" and resp.headers["x-provider-attempts"] == "1"


# ---- client disconnect ----------------------------------------------------------------------------
def test_client_disconnect_closes_upstream_within_a_second(server: ServerProcess, emu: OpenAIUpstream) -> None:
    decoder = SSEDecoder()
    got = 0
    with httpx.stream(
        "POST",
        server.base_url + CHAT,
        json={"model": "f/slow", "messages": HI, "stream": True},
        headers=server.headers,
        timeout=30,
    ) as resp:
        assert resp.status_code == 200
        gid = resp.headers["x-generation-id"]
        for raw in resp.iter_raw():
            got += len(decoder.feed(raw))
            if got >= 5:
                break
        closed_at = time.monotonic()
    # httpx closed the connection (the body was not read to the end)
    deadline = closed_at + 3
    upstream = emu.last("slow")
    while upstream.closed_at is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert upstream.closed_at is not None, "the upstream connection was never closed"
    assert upstream.closed_at - closed_at < 1.0
    assert not upstream.done_sent
    rec = wait_record(server, gid, until="cancelled")
    assert rec["status"] == "cancelled"
    assert rec["output_text"].startswith("tick0 tick1 ")
    assert rec["usage_estimated"] is True
    assert rec["usage"]["completion_tokens"] > 0 and rec["usage"]["prompt_tokens"] > 0


def test_cancel_endpoint_ends_a_read_stream_with_cancelled(server: ServerProcess, emu: OpenAIUpstream) -> None:
    decoder = SSEDecoder()
    events = []
    raw = bytearray()
    cancelled_at = 0.0
    with httpx.stream(
        "POST",
        server.base_url + CHAT,
        json={"model": "f/slow", "messages": HI, "stream": True},
        headers=server.headers,
        timeout=30,
    ) as resp:
        gid = resp.headers["x-generation-id"]
        for chunk in resp.iter_raw():
            raw += chunk
            events.extend(decoder.feed(chunk))
            if len(events) >= 4 and not cancelled_at:
                cancelled_at = time.monotonic()
                c = httpx.post(f"{server.base_url}/api/v1/generations/{gid}/cancel", headers=server.headers)
                assert c.status_code == 202
    r = SSEResult(resp.status_code, resp.headers, events, decoder.comments_seen, bytes(raw))
    upstream = emu.last("slow")
    last = assert_failure_ending(r, "cancelled", "f/slow", f"chatcmpl-emu{upstream.n}")
    assert last["error"]["code"] == "cancelled"
    poll_until(lambda: upstream.closed_at is not None, 3, poll_s=0.02)
    assert upstream.closed_at is not None and upstream.closed_at - cancelled_at < 1.0
    assert wait_record(server, gid, until="cancelled")["status"] == "cancelled"


# ---- keep-alive, idle timeout, commit point --------------------------------------------------------
def comment_gaps(raw: bytes) -> tuple[int, int]:
    """(keep-alive comments, data events) in the raw bytes."""
    return raw.count(b": still working\n"), raw.count(b"data: ")


def test_keepalives_during_silence_then_complete(ka_server: ServerProcess, emu: OpenAIUpstream) -> None:
    r = chat(ka_server, "ka/silence-short")
    assert r.done
    comments, _ = comment_gaps(r.raw)
    assert 2 <= comments <= 4  # ~1.0 s of silence / 0.3 s
    assert r.comments == comments
    # the comments sit between the second and third upstream chunk (on a loaded machine one may also
    # come before the first chunk: those are not the silence's)
    head, _, _rest = r.raw[r.raw.find(b"data: ") :].partition(b": still working\n")
    assert head.count(b"data: ") == 2
    assert [e.data.encode() for e in r.events if e.data != "[DONE]"] == emu.last("silence").sent


def test_chunks_delivered_directly_move_the_keepalive_and_idle_deadlines_on(ka_server: ServerProcess) -> None:
    """After the first chunk the relay hands plain chunks to the door inside the upstream's protocol
    callback (`Relay.attach`), with no task woken. Those chunks still count as upstream data: a chunk
    every 0.1 s for 2.4 s (keep-alive 0.3 s, idle timeout 1.5 s) gets no keep-alive comment and no
    timeout, as when every chunk went through the relay's loop."""
    raw = bytearray()
    started = time.monotonic()
    with httpx.stream(
        "POST",
        ka_server.base_url + CHAT,
        json={"model": "ka/steady", "messages": HI, "stream": True},
        headers=ka_server.headers,
        timeout=30,
    ) as resp:
        assert resp.status_code == 200
        for chunk in resp.iter_raw():
            raw += chunk
            if time.monotonic() - started > 2.4:
                break
    comments, events = comment_gaps(bytes(raw))
    assert comments == 0
    assert b'"error"' not in raw
    assert events >= 15  # ~24 chunks; the bound leaves room for a loaded machine
    ticks = [int(t) for t in re.findall(rb"tick(\d+) ", bytes(raw))]
    assert ticks == list(range(len(ticks)))  # every chunk, in order


def test_keepalives_do_not_reset_the_idle_timeout(ka_server: ServerProcess) -> None:
    decoder = SSEDecoder()
    last_data_at = 0.0
    failed_at = 0.0
    events = []
    raw = bytearray()
    with httpx.stream(
        "POST",
        ka_server.base_url + CHAT,
        json={"model": "ka/silence-long", "messages": HI, "stream": True},
        headers=ka_server.headers,
        timeout=30,
    ) as resp:
        for chunk in resp.iter_raw():
            raw += chunk
            new = decoder.feed(chunk)
            now = time.monotonic()
            for ev in new:
                events.append(ev)
                if "error" in orjson.loads(ev.data):
                    failed_at = now
                else:
                    last_data_at = now
    comments = bytes(raw).count(b": still working\n")
    assert comments >= 3
    gap = failed_at - last_data_at
    # 1.5 s after the last upstream byte, keep-alives notwithstanding (had they reset it, the upstream
    # would have answered after its 10 s of silence); the upper bound leaves room for a loaded machine
    assert 1.3 <= gap < 3.5, gap
    r = SSEResult(resp.status_code, resp.headers, events, decoder.comments_seen, bytes(raw))
    assert_failure_ending(r, "upstream_timeout", "ka/silence-long", None)


def test_per_provider_idle_override(ka_server: ServerProcess) -> None:
    r = chat(ka_server, "ka/patient-completes")  # 2.2 s of silence < 3 s override (server: 1.5 s)
    assert r.done
    assert comment_gaps(r.raw)[0] >= 5
    t0 = time.monotonic()
    r = chat(ka_server, "ka/patient-times-out")
    elapsed = time.monotonic() - t0
    assert_failure_ending(r, "upstream_timeout", "ka/patient-times-out", None, "emu-patient")
    assert 2.9 <= elapsed < 4.5, elapsed


def test_first_keepalive_is_the_commit_point(ka_server: ServerProcess, emu: OpenAIUpstream) -> None:
    """The upstream is silent before its first byte: the keep-alive commits the 200 at 0.3 s, so the
    later idle timeout is a failure chunk, not a fallback to emu2."""
    t0 = time.monotonic()
    with httpx.stream(
        "POST",
        ka_server.base_url + CHAT,
        json={"model": "ka/late-first-byte", "messages": HI, "stream": True},
        headers=ka_server.headers,
        timeout=30,
    ) as resp:
        headers_at = time.monotonic() - t0
        raw = resp.read()
    assert resp.status_code == 200
    assert headers_at < 1.0
    assert resp.headers["x-provider"] == "emu" and resp.headers["x-provider-attempts"] == "1"
    assert raw.startswith(b": still working\n")
    decoder = SSEDecoder()
    events = decoder.feed(raw)
    r = SSEResult(resp.status_code, resp.headers, events, decoder.comments_seen, raw)
    last = assert_failure_ending(r, "upstream_timeout", "ka/late-first-byte", None)
    assert last["choices"][0]["delta"] == {"role": "assistant", "content": ""}  # built path: role first
    assert len(events) == 1
    assert emu.counts() == {"slow-first-byte": 1}


def test_in_band_error_after_keepalive_commit_does_not_fall_back(ka_server: ServerProcess, emu: OpenAIUpstream) -> None:
    # headers, 0.6 s of silence (a keep-alive committed the 200 at 0.3 s), then an in-band error
    r = chat(ka_server, "ka/late-error")
    assert r.comments >= 1 and r.raw.startswith(b": still working\n")
    last = assert_failure_ending(r, "upstream_error", "ka/late-error", None)
    assert "overloaded" in last["error"]["message"]
    assert r.headers["x-provider"] == "emu"
    assert emu.counts() == {"error-late": 1}


def test_keepalive_committed_stream_is_answered_by_the_same_route(
    ka_server: ServerProcess, emu: OpenAIUpstream
) -> None:
    r = chat(ka_server, "ka/late-answer")
    assert r.done and r.comments >= 1
    assert r.headers["x-provider"] == "emu" and r.headers["x-provider-attempts"] == "1"
    assert [e.data.encode() for e in r.events if e.data != "[DONE]"] == emu.last("headers-then-silence").sent
    assert emu.counts() == {"headers-then-silence": 1}


def test_official_sdk_parses_keepalives_between_events(ka_server: ServerProcess) -> None:
    """openai-python dispatches an empty event on every blank line once an `id:` was seen; keep-alives
    between events must therefore be lone comment lines or the SDK fails to decode JSON."""
    client = openai.OpenAI(base_url=ka_server.base_url + "/v1", api_key=ka_server.key, max_retries=0)
    text = []
    with client.chat.completions.create(model="ka/silence-short", messages=HI, stream=True) as stream:
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                text.append(chunk.choices[0].delta.content)
    assert "".join(text) == "Hello, world \u00e9\u2713!"
    raw = stream_sse(
        ka_server.base_url + CHAT, {"model": "ka/silence-short", "messages": HI, "stream": True}, ka_server.headers
    ).raw
    # keep-alives came after an id'd event (one may also come before the first, on a loaded machine)
    assert 0 <= raw.find(b"data: ") < raw.rfind(b": still working\n"), raw
