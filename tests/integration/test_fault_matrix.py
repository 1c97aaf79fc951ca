"""Fault × provider kind on the chat door: every failure after the commit point ends the same way.

For openai (passthrough), anthropic, bedrock and vertex, each injected fault — an in-band error, a
dropped connection, an idle stall, a stream without its terminal event, undecodable data (invalid JSON,
or a bad eventstream CRC for Bedrock) — must end the stream with exactly one docs/api.md §4 failure chunk
as its last bytes (no `data: [DONE]` anywhere), the right `error.code`, `finish_reason: "error"`, the
provider's name, no fallback, and a `failed` record. A client that goes away (no Idempotency-Key) makes
tidegate close the upstream socket within a second, as the emulator records, and leaves `cancelled`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conformance.stack import (
    FAULT_CASES,
    FAULTS,
    PROVIDER,
    REMOTE_KINDS,
    Stack,
    fault_scenario,
    marker,
    route,
    running_stack,
)
from tests.support.streams import SSEResult, stream_sse
from tidegate.sse import SSEDecoder

IDLE = 1.0
FAILURE_KEYS = {"id", "object", "created", "model", "provider", "error", "choices"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # each fault route has a twin behind it that must never be used once the stream committed
    models = {f"{k}/{f}": [route(k, fault_scenario(f, k)), route(k, "text", twin=True)] for f, k in FAULT_CASES}
    for kind in REMOTE_KINDS:
        models[f"{kind}/slow"] = [route(kind, "slow:0.05" if kind == "openai" else "slow")]
    settings = {"keepalive_s": 30, "upstream_idle_timeout_s": IDLE}
    with running_stack(tmp_path_factory.mktemp("fault-matrix"), models, server=settings) as st:
        yield st


def content_of(r: SSEResult) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in r.json_events()[:-1] if c.get("choices"))


@pytest.mark.parametrize(("fault", "kind"), FAULT_CASES, ids=[f"{f}-{k}" for f, k in FAULT_CASES])
def test_failure_ends_stream_without_done(stack: Stack, fault: str, kind: str) -> None:
    mark = marker()
    model = f"{kind}/{fault}"
    code = FAULTS[fault][1]
    t0 = time.monotonic()
    r = stream_sse(
        stack.chat_url,
        {"model": model, "stream": True, "messages": [{"role": "user", "content": f"hi {mark}"}]},
        stack.server.headers,
        timeout=30,
    )
    elapsed = time.monotonic() - t0
    assert r.status == 200, r.raw[:300]
    assert r.headers["x-provider"] == PROVIDER[kind] and r.headers["x-provider-attempts"] == "1"
    # byte level: the failure chunk's frame is the very end of the body and no [DONE] exists anywhere
    assert b"data: [DONE]" not in r.raw and not r.done
    last_event = r.events[-1]
    assert r.raw.endswith(b"data: " + last_event.data.encode() + b"\n\n")
    assert r.raw.count(b'"finish_reason":"error"') == 1
    chunks = r.json_events()
    last = chunks[-1]
    assert [c for c in chunks if "error" in c] == [last]
    # docs/api.md §4 shape
    assert set(last) == FAILURE_KEYS, sorted(last)
    assert last["object"] == "chat.completion.chunk" and isinstance(last["created"], int)
    assert last["model"] == model and last["provider"] == PROVIDER[kind]
    assert set(last["error"]) == {"code", "message"} and last["error"]["code"] == code
    assert isinstance(last["error"]["message"], str) and last["error"]["message"]
    assert last["choices"] == [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]
    gid = r.headers["x-generation-id"]
    if kind == "openai":  # passthrough keeps the upstream's id, the failure chunk too
        upstream = [q for q in list(stack.oai.requests) if mark in repr(q.body)]
        assert last["id"] == f"chatcmpl-emu{upstream[0].n}"
        forwarded = [e.data.encode() for e in r.events[:-1]]
        assert forwarded and forwarded == upstream[0].sent[: len(forwarded)]  # untouched before the failure
    else:
        assert {c["id"] for c in chunks} == {f"chatcmpl-{gid}"}
    # a truncated answer is never reported as finished
    finishes = [c["choices"][0]["finish_reason"] for c in chunks[:-1] if c.get("choices")]
    assert set(finishes) <= {None}
    partial = content_of(r)
    assert partial.startswith("Hello" if kind == "openai" else "Partial")
    # committed: no fallback to the twin route
    assert stack.scenarios_seen(kind, mark) == [fault_scenario(fault, kind).split(":")[0]]
    if code == "upstream_timeout":
        assert elapsed < IDLE + 2.5, elapsed  # the upstream would have resumed after 4-5 s
    rec = stack.record(gid)
    assert rec["status"] == "failed" and rec["finish_reason"] == "error"
    assert rec["error"]["code"] == code and rec["provider"] == PROVIDER[kind]
    assert rec["output_text"] == partial


@pytest.mark.parametrize("kind", REMOTE_KINDS)
def test_client_disconnect_closes_upstream_within_a_second(stack: Stack, kind: str) -> None:
    mark = marker()
    decoder = SSEDecoder()
    events = 0
    with httpx.stream(
        "POST",
        stack.chat_url,
        json={"model": f"{kind}/slow", "stream": True, "messages": [{"role": "user", "content": f"hi {mark}"}]},
        headers=stack.server.headers,  # no Idempotency-Key: a disconnect cancels
        timeout=30,
    ) as resp:
        assert resp.status_code == 200
        gid = resp.headers["x-generation-id"]
        for raw in resp.iter_raw():
            events += len(decoder.feed(raw))
            if events >= 4:
                break
        disconnected_at = time.monotonic()
    # leaving the block without reading to the end closes the client connection

    def upstream_closed_at() -> float | None:
        if kind == "openai":
            found: list[Any] = [q for q in list(stack.oai.requests) if mark in repr(q.body)]
        else:
            found = [q for q in list(stack.anthropic.requests) if q.dialect == kind and mark in repr(q.body)]
        assert len(found) == 1
        closed: float | None = found[0].closed_at
        return closed

    deadline = disconnected_at + 3
    while upstream_closed_at() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    closed_at = upstream_closed_at()
    assert closed_at is not None, "the emulator never saw the upstream connection close"
    assert closed_at - disconnected_at < 1.0, closed_at - disconnected_at
    rec = stack.record(gid, until="cancelled")
    assert rec["status"] == "cancelled"
    assert rec["output_text"].startswith("tick0 tick1 ")
    assert rec["usage"]["prompt_tokens"] > 0 and rec["usage"]["completion_tokens"] > 0
