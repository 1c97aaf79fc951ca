"""One suite every provider kind must pass: openai (passthrough), anthropic, bedrock, vertex, gemini and local.

Each case is parametrized over the five kinds behind one real tidegate server (the emulators for the
four HTTP kinds, the real SmolLM2 model for `local`). What `local` cannot do is said here, explicitly:
tools are asserted to be the documented 400, reasoning and an injected mid-stream error are strict
xfails (they start passing, and so fail the suite, the day `local` gains them).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from tests.conformance.stack import ALL_KINDS, LOCAL_MODEL, PROVIDER, Stack, marker, route, running_stack
from tests.support.streams import SSEResult, stream_sse

# ---- what each kind's upstream answers (the emulators' scripts; `None`: the real model decides) --------


@dataclass(frozen=True)
class Expect:
    text: str | None  # the `text` scenario's answer
    usage: tuple[int, int, int, int] | None  # prompt, completion, total, cached
    reasoning: str  # the reasoning scenario's thinking text
    answer: str  # the reasoning scenario's answer
    passthrough: bool = False


_CLAUDE = Expect("Hello from the emulator.", (57, 12, 69, 10), "Let me think about 2+2.", "The answer is 4.")
EXPECT = {
    "openai": Expect("Hello, world \u00e9\u2713!", (11, 7, 18, 3), "Thinking.", "Done.", passthrough=True),
    "anthropic": _CLAUDE,
    "bedrock": _CLAUDE,
    "vertex": _CLAUDE,
    "gemini": Expect("Hello from Gemini.", (20, 5, 25, 8), "Let me think about it.", "The answer is 4."),
    "local": Expect(None, None, "", ""),
}

# emulator scenario per case and kind
SCENARIO = {
    "text": {"openai": "text"},
    "reasoning": {"openai": "reasoning_details", "default": "thinking"},
    "tools": {"openai": "parallel-tools", "default": "tools"},
    "error": {"openai": "error-mid", "bedrock": "exception", "default": "error"},
}
TOOLS: Any = [
    {
        "type": "function",
        "function": {"name": "lookup", "description": "Look a thing up", "parameters": {"type": "object"}},
    },
    {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}},
]
# every kind must accumulate to exactly these calls (index, name, arguments)
EXPECTED_CALLS = [(0, "lookup", '{"q": "paris"}'), (1, "weather", '{"city": "Paris", "days": 2}')]
LOCAL_PROMPT = "Hi"  # greedy SmolLM2 answers it in ~15 tokens and stops by itself


def _scenario(case: str, kind: str) -> str:
    table = SCENARIO.get(case, {})
    return table.get(kind, table.get("default", "text"))


def _models() -> dict[str, list[tuple[str, str]]]:
    models: dict[str, list[tuple[str, str]]] = {}
    for kind in [k for k in ALL_KINDS if k != "local"]:
        for case in ("text", "reasoning", "tools", "error"):
            models[f"{kind}/{case}"] = [route(kind, _scenario(case, kind))]
        too_many = "http-429" if kind == "openai" else "429"
        models[f"{kind}/fallback"] = [route(kind, too_many), route(kind, "text", twin=True)]
    for case in ("text", "reasoning", "tools", "error"):
        models[f"local/{case}"] = [route("local", case)]
    # local cannot answer 429; it is the route a 429 falls back to
    models["local/fallback"] = [route("openai", "http-429"), route("local", "text")]
    return models


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("conformance"), _models(), server={"keepalive_s": 30}) as st:
        yield st


def kinds(**xfail: str) -> list[Any]:
    """All kinds (the real model's case marked `local_model`); those named are strict xfails."""
    params = []
    for k in ALL_KINDS:
        marks: list[Any] = [pytest.mark.local_model] if k == "local" else []
        if k in xfail:
            marks.append(pytest.mark.xfail(strict=True, reason=xfail[k]))
        params.append(pytest.param(k, marks=marks, id=k))
    return params


def request_body(kind: str, case: str, mark: str, *, local_tokens: int = 96, **extra: Any) -> dict[str, Any]:
    """`local_tokens` caps the real model where the case does not need it to stop by itself."""
    if kind == "local":
        extra = {"temperature": 0, "max_tokens": local_tokens, **extra}
        content = LOCAL_PROMPT
    else:
        content = f"hello {mark}"
    return {"model": f"{kind}/{case}", "messages": [{"role": "user", "content": content}], **extra}


def stream(stack: Stack, kind: str, case: str, mark: str, *, local_tokens: int = 96, **extra: Any) -> SSEResult:
    body = {**request_body(kind, case, mark, local_tokens=local_tokens, **extra), "stream": True}
    return stream_sse(stack.chat_url, body, stack.server.headers)


def client(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.server.base_url + "/v1", api_key=stack.server.key, max_retries=0)


def deltas(r: SSEResult) -> list[dict[str, Any]]:
    return [c["choices"][0]["delta"] for c in r.json_events() if c.get("choices")]


def joined(ds: list[dict[str, Any]], key: str) -> str:
    return "".join(d.get(key) or "" for d in ds)


def upstream_chunk_id(stack: Stack, mark: str) -> str:
    found = [r for r in list(stack.oai.requests) if mark in repr(r.body)]
    assert len(found) == 1
    return f"chatcmpl-emu{found[0].n}"


def usage_tuple(u: dict[str, Any]) -> tuple[int, int, int, int]:
    cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return u["prompt_tokens"], u["completion_tokens"], u["total_tokens"], cached


# ---- cases ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", kinds())
def test_text_stream(stack: Stack, kind: str) -> None:
    mark = marker()
    r = stream(stack, kind, "text", mark)
    expect = EXPECT[kind]
    assert r.status == 200, r.raw[:500]
    assert r.headers["content-type"].startswith("text/event-stream")
    # the stream ends with [DONE], once, as the last event; every event carries id n from 0
    assert r.done and r.raw.endswith(b"data: [DONE]\n\n") and r.raw.count(b"data: [DONE]") == 1
    assert [e.id for e in r.events] == [str(i) for i in range(len(r.events))]
    gid = r.headers["x-generation-id"]
    assert r.headers["x-provider"] == PROVIDER[kind]
    assert r.headers["x-served-model"] == route(kind, _scenario("text", kind))[1]
    assert r.headers["x-provider-attempts"] == "1"
    chunks = r.json_events()
    assert not [c for c in chunks if "error" in c]
    # ids: the upstream's own on passthrough, chatcmpl-<generation id> on every path tidegate builds
    want_id = upstream_chunk_id(stack, mark) if expect.passthrough else f"chatcmpl-{gid}"
    assert {c["id"] for c in chunks} == {want_id}
    assert {c["model"] for c in chunks} == {"text" if expect.passthrough else f"{kind}/text"}
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    ds = deltas(r)
    roles = [d.get("role") for d in ds]
    assert roles[0] == "assistant" and roles.count("assistant") == 1
    text = joined(ds, "content")
    assert text == expect.text if expect.text is not None else text.strip()
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert finishes == ["stop"]
    # exactly one usage chunk, `choices: []`, the last one before [DONE]
    usage_chunks = [c for c in chunks if c.get("usage")]
    assert usage_chunks == [chunks[-1]] and chunks[-1]["choices"] == []
    rec = stack.record(gid)
    assert rec["status"] == "completed" and rec["finish_reason"] == "stop"
    assert rec["output_text"] == text and rec["provider"] == PROVIDER[kind]


@pytest.mark.parametrize("kind", kinds())
def test_non_stream_completion(stack: Stack, kind: str) -> None:
    mark = marker()
    body = request_body(kind, "text", mark)
    raw = client(stack).chat.completions.with_raw_response.create(**body)
    completion = raw.parse()
    gid = raw.headers["x-generation-id"]
    assert raw.headers["x-provider"] == PROVIDER[kind]
    assert completion.id == f"chatcmpl-{gid}" and completion.object == "chat.completion"
    assert completion.model == f"{kind}/text"
    choice = completion.choices[0]
    assert choice.message.role == "assistant" and choice.finish_reason == "stop"
    assert not choice.message.tool_calls
    expect = EXPECT[kind]
    assert choice.message.content == expect.text if expect.text is not None else (choice.message.content or "").strip()
    assert completion.usage is not None
    usage = completion.usage.model_dump()
    if expect.usage is not None:
        assert usage_tuple(usage) == expect.usage
    rec = stack.record(gid)
    assert rec["status"] == "completed" and rec["output_text"] == choice.message.content
    assert rec["usage"]["completion_tokens"] == completion.usage.completion_tokens


@pytest.mark.parametrize("kind", kinds(local="SmolLM2 has no reasoning channel: tidegate streams no reasoning for it"))
def test_reasoning_before_content(stack: Stack, kind: str) -> None:
    mark = marker()
    r = stream(stack, kind, "reasoning", mark, local_tokens=2, reasoning_effort="low")
    assert r.status == 200 and r.done
    ds = deltas(r)
    reasoning, content = joined(ds, "reasoning"), joined(ds, "content")
    details = [x for d in ds for x in d.get("reasoning_details") or []]
    assert reasoning, "no delta.reasoning was streamed"
    assert details, "no delta.reasoning_details were streamed"
    expect = EXPECT[kind]
    assert reasoning == expect.reasoning and content == expect.answer
    assert reasoning not in content and expect.reasoning not in content
    for detail in details:
        assert detail["type"] in ("reasoning.text", "reasoning.encrypted", "reasoning.summary")
        assert isinstance(detail["index"], int)
    assert "".join(x.get("text", "") for x in details if x["type"] == "reasoning.text") == reasoning
    # every reasoning delta comes before the first content delta
    thinking_at = [i for i, d in enumerate(ds) if d.get("reasoning") or d.get("reasoning_details")]
    content_at = [i for i, d in enumerate(ds) if d.get("content")]
    assert thinking_at and content_at and max(thinking_at) < min(content_at)
    # the non-stream door assembles the same reasoning, still outside `content`
    completion = client(stack).chat.completions.create(**request_body(kind, "reasoning", marker()))
    message = completion.choices[0].message
    extra = message.model_extra or {}
    assert message.content == expect.answer
    assert extra.get("reasoning") == expect.reasoning and extra.get("reasoning_details")


@pytest.mark.parametrize("kind", kinds())
def test_parallel_tool_calls_accumulate_identically(stack: Stack, kind: str) -> None:
    body = request_body(kind, "tools", marker())
    if kind == "local":  # a real model: one grammar-bound call a turn (docs/local-agents.md), its arguments its own
        _local_tool_call(stack, body)
        return
    argument_deltas: dict[int, str] = {}
    with client(stack).chat.completions.stream(**body, tools=TOOLS) as s:
        for event in s:
            if event.type == "tool_calls.function.arguments.delta":
                argument_deltas[event.index] = argument_deltas.get(event.index, "") + event.arguments_delta
        final = s.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me check."
    calls = choice.message.tool_calls or []
    got = [(i, c.function.name, c.function.arguments) for i, c in enumerate(calls)]
    assert got == EXPECTED_CALLS
    assert argument_deltas == {i: args for i, _, args in EXPECTED_CALLS}  # the SDK's delta events agree
    ids = [c.id for c in calls]
    assert all(ids) and len(set(ids)) == len(ids)
    assert [json.loads(args) for _, _, args in got] == [{"q": "paris"}, {"city": "Paris", "days": 2}]


def _local_tool_call(stack: Stack, body: dict[str, Any]) -> None:
    """The function the client names is called, with JSON arguments, and the SDK's delta events
    accumulate to the final call."""
    choice_of = {"type": "function", "function": {"name": "weather"}}
    deltas: dict[int, str] = {}
    with client(stack).chat.completions.stream(**body, tools=TOOLS, tool_choice=choice_of) as s:
        for event in s:
            if event.type == "tool_calls.function.arguments.delta":
                deltas[event.index] = deltas.get(event.index, "") + event.arguments_delta
        final = s.get_final_completion()
    choice = final.choices[0]
    calls = choice.message.tool_calls or []
    assert choice.finish_reason == "tool_calls" and [c.function.name for c in calls] == ["weather"]
    assert isinstance(json.loads(calls[0].function.arguments), dict) and calls[0].id
    assert deltas == {0: calls[0].function.arguments}


@pytest.mark.parametrize("kind", kinds())
def test_usage_numbers(stack: Stack, kind: str) -> None:
    r = stream(stack, kind, "text", marker(), local_tokens=4)
    usage = r.json_events()[-1]["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    expect = EXPECT[kind]
    if expect.usage is not None:
        assert usage_tuple(usage) == expect.usage
    rec = stack.record(r.headers["x-generation-id"])
    assert rec["usage_estimated"] is False
    assert (rec["usage"]["prompt_tokens"], rec["usage"]["completion_tokens"], rec["usage"]["total_tokens"]) == (
        usage["prompt_tokens"],
        usage["completion_tokens"],
        usage["total_tokens"],
    )
    if expect.usage is not None:
        assert rec["usage"]["cached_tokens"] == expect.usage[3]
    # include_usage false: no usage chunk, still accounted (billing happens either way)
    r = stream(stack, kind, "text", marker(), local_tokens=2, stream_options={"include_usage": False})
    assert r.done and not [c for c in r.json_events() if c.get("usage")]
    rec = stack.record(r.headers["x-generation-id"])
    assert rec["usage"]["total_tokens"] > 0


@pytest.mark.parametrize("kind", kinds(local="no fault can be injected into the in-process model"))
def test_in_band_error_mid_stream(stack: Stack, kind: str) -> None:
    r = stream(stack, kind, "error", marker(), local_tokens=2)
    assert r.status == 200
    assert b"data: [DONE]" not in r.raw and not r.done
    chunks = r.json_events()
    failures = [c for c in chunks if "error" in c]
    assert failures, "the stream carried no failure chunk"
    assert failures == [chunks[-1]]
    last = chunks[-1]
    assert last["error"]["code"] == "upstream_error" and last["error"]["message"]
    assert last["provider"] == PROVIDER[kind] and last["model"] == f"{kind}/error"
    assert last["choices"] == [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]
    assert joined(deltas(r), "content")  # a partial answer came before the failure
    rec = stack.record(r.headers["x-generation-id"])
    assert rec["status"] == "failed" and rec["error"]["code"] == "upstream_error"


@pytest.mark.parametrize("kind", kinds())
def test_429_before_stream_falls_back(stack: Stack, kind: str) -> None:
    mark = marker()
    before = stack.oai.counts().get("http-429", 0)
    r = stream(stack, kind, "fallback", mark, local_tokens=4)
    assert r.status == 200 and r.done, r.raw[:300]
    served = "local" if kind == "local" else PROVIDER[kind] + "-b"
    assert r.headers["x-provider"] == served
    assert r.headers["x-served-model"] == (LOCAL_MODEL if kind == "local" else route(kind, "text")[1])
    assert r.headers["x-provider-attempts"] == "2"
    assert not [c for c in r.json_events() if "error" in c]
    text = joined(deltas(r), "content")
    expect = EXPECT[kind]
    assert text == expect.text if expect.text is not None else text.strip()
    if kind == "local":
        assert stack.oai.counts().get("http-429", 0) == before + 1
    else:
        first = "http-429" if kind == "openai" else "429"
        assert stack.scenarios_seen(kind, mark) == [first, "text"]
    rec = stack.record(r.headers["x-generation-id"])
    assert rec["status"] == "completed" and rec["provider"] == served and rec["attempts"] == 2


# ---- what each upstream received for each translated field (docs/api-edges.md §15) ----------------------------

SENT: dict[str, Any] = {"max_tokens": 64, "temperature": 0.5, "top_p": 0.9, "stop": ["END"], "tool_choice": "required"}


def _claude_received(b: dict[str, Any]) -> tuple[Any, ...]:
    return (b["max_tokens"], b["temperature"], b["top_p"], b["stop_sequences"], b["tool_choice"], b["tools"][0]["name"])


def _gemini_received(b: dict[str, Any]) -> tuple[Any, ...]:
    g = b["generationConfig"]
    declared = b["tools"][0]["functionDeclarations"][0]["name"]
    mode = b["toolConfig"]["functionCallingConfig"]
    return (g["maxOutputTokens"], g["temperature"], g["topP"], g["stopSequences"], mode, declared)


RECEIVED = {
    "openai": lambda b: (b["max_tokens"], b["temperature"], b["top_p"], b["stop"], b["tool_choice"], b["tools"]),
    "anthropic": _claude_received,
    "bedrock": _claude_received,
    "vertex": _claude_received,
    "gemini": _gemini_received,
}
WANTED = {
    "openai": (64, 0.5, 0.9, ["END"], "required", TOOLS),  # passthrough: the client's body as sent
    "anthropic": (64, 0.5, 0.9, ["END"], {"type": "any"}, "lookup"),
    "bedrock": (64, 0.5, 0.9, ["END"], {"type": "any"}, "lookup"),
    "vertex": (64, 0.5, 0.9, ["END"], {"type": "any"}, "lookup"),
    "gemini": (64, 0.5, 0.9, ["END"], {"mode": "ANY"}, "lookup"),
}


@pytest.mark.parametrize("kind", sorted(WANTED))
def test_translated_fields_reach_the_upstream(stack: Stack, kind: str) -> None:
    """Each translated field arrives at the emulator in the provider's own form; the answer is unchanged."""
    mark = marker()
    r = stream(stack, kind, "text", mark, tools=TOOLS, **SENT)
    assert r.status == 200 and r.done, r.raw[:300]
    assert RECEIVED[kind](stack.received(kind, mark)) == WANTED[kind]
