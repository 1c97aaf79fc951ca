"""The native door (`/api/v1/llm/responses`) on every HTTP provider kind, against the emulators.

A clean answer (text, reasoning, tool calls) reads `start … done`, and the `done` payload is exactly
what `POST /api/v1/llm/responses/replay` returns for the same Idempotency-Key (a streaming replay
re-sends the same frames). Each fault of the fault table after the commit point reads `start … error`:
the right code, the partial output the deltas carried, no fallback to the twin route once committed,
and the replay of the key answers 502 with the same error and partial output.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
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

NATIVE = "/api/v1/llm/responses"
REPLAY = NATIVE + "/replay"
IDLE = 1.0
REASONING = {"openai": "reasoning", "default": "thinking"}
SUCCESS = [(kind, case) for kind in REMOTE_KINDS for case in ("text", "reasoning", "tools")]


def scenario_for(kind: str, case: str) -> str:
    return REASONING.get(kind, REASONING["default"]) if case == "reasoning" else case


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    models = {f"{k}/{c}": [route(k, scenario_for(k, c))] for k, c in SUCCESS}
    for fault, kind in FAULT_CASES:  # a twin behind each fault: never used once the stream committed
        models[f"{kind}/{fault}"] = [route(kind, fault_scenario(fault, kind)), route(kind, "text", twin=True)]
    settings = {"keepalive_s": 30, "upstream_idle_timeout_s": IDLE}
    with running_stack(tmp_path_factory.mktemp("native-faults"), models, server=settings) as st:
        yield st


def events_of(r: SSEResult) -> list[tuple[str, dict[str, Any]]]:
    assert [e.id for e in r.events] == [str(i) for i in range(len(r.events))], "event ids are not 0, 1, 2, …"
    return [(e.event, orjson.loads(e.data)) for e in r.events]


def native(stack: Stack, model: str, key: str, mark: str) -> SSEResult:
    body = {"model": model, "input": f"hi {mark}", "stream": True}
    headers = {**stack.server.headers, "Idempotency-Key": key}
    return stream_sse(stack.server.base_url + NATIVE, body, headers, timeout=30)


def replay(stack: Stack, key: str, *, sse: bool = False) -> httpx.Response:
    headers = {**stack.server.headers, "Idempotency-Key": key}
    if sse:
        headers["Accept"] = "text/event-stream"
    return httpx.post(stack.server.base_url + REPLAY, headers=headers, timeout=10)


def upstream_requests(stack: Stack, kind: str) -> list[Any]:
    """Every request the emulator of `kind` received so far (the tests of a module run one at a time)."""
    if kind == "openai":
        return list(stack.oai.requests)
    return [q for q in list(stack.anthropic.requests) if q.dialect == kind]


def deltas(evs: list[tuple[str, dict[str, Any]]], kind: str) -> str:
    return "".join(p.get("text") or "" for n, p in evs if n == "delta" and p["type"] == kind)


@pytest.mark.parametrize(("kind", "case"), SUCCESS, ids=[f"{k}-{c}" for k, c in SUCCESS])
def test_success_is_start_then_done_equal_to_replay(stack: Stack, kind: str, case: str) -> None:
    key = f"native-ok-{uuid.uuid4()}"
    mark = marker()
    before = len(upstream_requests(stack, kind))
    r = native(stack, f"{kind}/{case}", key, mark)
    assert r.status == 200, r.raw[:300]
    assert r.headers["x-kendr-stream-mode"] == "streamed" and r.headers["x-provider"] == PROVIDER[kind]
    gid = r.headers["x-generation-id"]
    evs = events_of(r)
    names = [n for n, _ in evs]
    assert names[0] == "start" and names[-1] == "done", names
    assert names.count("start") == names.count("done") == 1 and "error" not in names
    start, done = evs[0][1], evs[-1][1]
    assert start["id"] == gid == done["id"] and start["model"] == f"{kind}/{case}"
    statuses = [p["status"] for n, p in evs if n == "status"]
    assert statuses[0] == "connecting" and "fallback" not in statuses
    assert done["status"] == "completed" and done["provider"] == PROVIDER[kind]
    assert done["output_text"] == deltas(evs, "text")
    if case == "reasoning":
        assert "thinking" in statuses and done["reasoning"] and done["reasoning"] == deltas(evs, "reasoning")
    if case == "tools":
        assert "tool_call" in statuses and done["finish_reason"] == "tool_calls"
        calls = [item for item in done["output"] if item["type"] == "function_call"]
        assert [c["name"] for c in calls][:1] == ["lookup"] and orjson.loads(calls[0]["arguments"]) == {"q": "paris"}
    else:
        assert done["finish_reason"] == "stop"
    assert [q.scenario for q in upstream_requests(stack, kind)[before:]] == [scenario_for(kind, case)]
    # the replay of the same key: the very same result object, and no new upstream call
    again = replay(stack, key)
    assert again.status_code == 200, again.text
    assert again.headers["x-generation-id"] == gid
    assert again.json() == done
    streamed = replay(stack, key, sse=True)
    assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    resent = SSEDecoder().feed(streamed.content)
    assert [(e.id, e.event, e.data) for e in resent] == [(e.id, e.event, e.data) for e in r.events]
    assert [q.scenario for q in upstream_requests(stack, kind)[before:]] == [scenario_for(kind, case)]


@pytest.mark.parametrize(("fault", "kind"), FAULT_CASES, ids=[f"{f}-{k}" for f, k in FAULT_CASES])
def test_fault_is_start_then_error(stack: Stack, fault: str, kind: str) -> None:
    key = f"native-fault-{uuid.uuid4()}"
    mark = marker()
    code = FAULTS[fault][1]
    before = len(upstream_requests(stack, kind))
    t0 = time.monotonic()
    r = native(stack, f"{kind}/{fault}", key, mark)
    elapsed = time.monotonic() - t0
    assert r.status == 200, r.raw[:300]
    assert r.headers["x-provider"] == PROVIDER[kind] and r.headers["x-provider-attempts"] == "1"
    gid = r.headers["x-generation-id"]
    evs = events_of(r)
    names = [n for n, _ in evs]
    assert names[0] == "start" and names[-1] == "error", names
    assert "done" not in names and names.count("error") == 1
    assert evs[0][1]["id"] == gid
    statuses = [p["status"] for n, p in evs if n == "status"]
    assert statuses[0] == "connecting" and "generating" in statuses and "fallback" not in statuses
    error = evs[-1][1]
    assert set(error) == {"error", "partial_output"}
    assert error["error"]["code"] == code and isinstance(error["error"]["message"], str) and error["error"]["message"]
    partial = deltas(evs, "text")
    assert partial.startswith("Hello" if kind == "openai" else "Partial")
    assert error["partial_output"] == partial
    # committed: the twin route was never tried
    seen = [q.scenario for q in upstream_requests(stack, kind)[before:]]
    assert seen == [fault_scenario(fault, kind).split(":")[0]]
    if code == "upstream_timeout":
        assert elapsed < IDLE + 2.5, elapsed  # the upstream would have resumed after 4-5 s
    rec = stack.record(gid)
    assert rec["status"] == "failed" and rec["error"]["code"] == code
    failed = replay(stack, key)
    assert failed.status_code == 502, failed.text
    assert failed.headers["x-generation-id"] == gid
    body = failed.json()
    assert body["status"] == "failed" and body["error"]["code"] == code
    assert body["partial_output"] == partial


@pytest.mark.parametrize(
    "kind",
    [
        "openai",
        "anthropic",
        "bedrock",
        "vertex",
    ],
)
def test_the_input_reaches_the_upstream(stack: Stack, kind: str) -> None:
    """The native request's `input` and `max_output_tokens` are what the upstream is asked about."""
    mark = marker()
    before = len(upstream_requests(stack, kind))
    body = {"model": f"{kind}/text", "input": f"hi {mark}", "max_output_tokens": 77, "stream": True}
    r = stream_sse(stack.server.base_url + NATIVE, body, stack.server.headers, timeout=30)
    assert r.status == 200 and r.events[-1].event == "done", r.raw[-300:]
    sent = upstream_requests(stack, kind)[before:]
    assert len(sent) == 1
    upstream_body = sent[0].body
    assert mark in repr(upstream_body.get("messages")), upstream_body
    limit = upstream_body.get("max_tokens", upstream_body.get("max_completion_tokens"))
    assert limit == 77, upstream_body
