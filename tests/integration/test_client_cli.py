"""tidegate.client and the client CLI: against the real tidegate server (real local model) for the
happy paths, and against a fault-injecting fake gateway (docs/api-operations.md §7 behaviours) for recovery."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from tests.fakes.fake_gateway import FakeGateway, Script, chat_failure_frame, chat_frames, native_result
from tests.support.process import ServerProcess
from tidegate.client import (
    AsyncClient,
    Client,
    Done,
    IncompleteStream,
    KeepAlive,
    NotFoundError,
    StreamFailed,
    TextDelta,
    Usage,
)
from tidegate.client.types import StreamEvent
from tidegate.ids import is_ulid
from tidegate.sse import encode_event

HI = [{"role": "user", "content": "Say hello in five words."}]
WORDS = ["The ", "quick ", "brown ", "fox ", "jumps ", "over ", "the ", "lazy ", "dog."]
FULL_TEXT = "".join(WORDS)


def texts(events: list[StreamEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def cli(
    args: list[str], *, url: str, key: str, stdin: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEGATE_")}
    env.update({"TIDEGATE_URL": url, "TIDEGATE_API_KEY": key})
    return subprocess.run(
        [sys.executable, "-m", "tidegate", *args],
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


@pytest.fixture
def fake() -> Iterator[FakeGateway]:
    with FakeGateway() as gw:
        yield gw


# ---------------------------------------------------------------- real tidegate, real local model


def test_client_chat_stream_real_server(local_server: ServerProcess) -> None:
    with Client(local_server.base_url + "/v1", local_server.key) as client:
        stream = client.chat_stream(model="local/smollm2", messages=HI, max_tokens=12)
        with stream:
            events = list(stream)
        assert is_ulid(stream.generation_id or "")
        assert stream.provider == "local" and stream.served_model == "smollm2-135m-instruct"
        done = events[-1]
        assert isinstance(done, Done)
        assert texts(events).strip() and done.text == texts(events)
        assert done.finish_reason in ("stop", "length") and done.recovered is None
        usage = [e for e in events if isinstance(e, Usage)]
        assert len(usage) == 1 and usage[0].completion_tokens > 0 and done.usage == usage[0]
        record = client.generation(done.generation_id or "")
        assert record["status"] == "completed" and record["output_text"] == done.text
        assert {m["id"] for m in client.models()} == {"local/smollm2", "local/e5-small"}


def test_async_client_real_server(local_server: ServerProcess) -> None:
    async def main() -> Done:
        async with AsyncClient(local_server.base_url, local_server.key) as client:
            return await client.chat_stream(model="local/smollm2", messages=HI, max_tokens=6).until_done()

    done = asyncio.run(main())
    assert done.text and done.usage is not None and is_ulid(done.generation_id or "")


def test_client_unknown_model_is_a_typed_error(local_server: ServerProcess) -> None:
    with Client(local_server.base_url, local_server.key) as client, pytest.raises(NotFoundError) as info:
        list(client.chat_stream(model="nope/missing", messages=HI))
    assert info.value.code == "model_not_found" and info.value.status == 404
    assert is_ulid(info.value.generation_id or "")


def test_cli_chat_real_model(local_server: ServerProcess) -> None:
    r = cli(["chat", "local/smollm2", "hi", "--max-tokens", "8"], url=local_server.base_url, key=local_server.key)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    assert "incomplete" not in r.stderr
    assert "waiting for the model" not in r.stderr  # no spinner when stderr is not a terminal


def test_cli_chat_prompt_from_stdin_and_json(local_server: ServerProcess) -> None:
    r = cli(
        ["chat", "local/smollm2", "--max-tokens", "6", "--json"],
        url=local_server.base_url,
        key=local_server.key,
        stdin="Say hi.",
    )
    assert r.returncode == 0, r.stderr
    record = orjson.loads(r.stdout)
    assert record["status"] == "completed" and record["text"] and is_ulid(record["generation_id"])
    assert record["usage"]["completion_tokens"] > 0
    shown = cli(["generations", "show", record["generation_id"]], url=local_server.base_url, key=local_server.key)
    assert shown.returncode == 0, shown.stderr
    assert orjson.loads(shown.stdout)["output_text"] == record["text"]


def test_cli_unknown_model_exits_1_with_code(local_server: ServerProcess) -> None:
    r = cli(["chat", "nope/missing", "hi"], url=local_server.base_url, key=local_server.key)
    assert r.returncode == 1
    assert "model_not_found" in r.stderr


def test_cli_models_and_usage_errors(local_server: ServerProcess) -> None:
    r = cli(["models"], url=local_server.base_url + "/v1", key=local_server.key)
    assert r.returncode == 0 and r.stdout.split() == ["local/smollm2", "local/e5-small"]
    r = cli(["models"], url=local_server.base_url, key="wrong-key")
    assert r.returncode == 1 and "unauthorized" in r.stderr
    r = cli(["models"], url=local_server.base_url, key="")
    assert r.returncode == 2 and "API key" in r.stderr


def test_cli_embed_real_model(local_server: ServerProcess) -> None:
    """`tidegate embed` through a real gateway's /v1/embeddings with the local embedding model."""
    url, key = local_server.base_url, local_server.key
    r = cli(["embed", "local/e5-small", "hello", "bonjour le monde"], url=url, key=key)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [line.split("\t")[:2] for line in lines] == [["0", "384 dims"], ["1", "384 dims"]]
    assert "local/e5-small" in r.stderr and "tokens" in r.stderr
    r = cli(["embed", "local/e5-small", "--json"], url=url + "/v1", key=key, stdin="read from stdin")
    assert r.returncode == 0, r.stderr
    answer = orjson.loads(r.stdout)
    assert [len(d["embedding"]) for d in answer["data"]] == [384] and answer["usage"]["prompt_tokens"] > 0
    r = cli(["embed", "local/smollm2", "hi"], url=url, key=key)  # a chat model on the embeddings door
    assert r.returncode == 1 and "HTTP 400" in r.stderr
    r = cli(["embed", "local/e5-small", "hi"], url=url, key="")
    assert r.returncode == 2 and "API key" in r.stderr


# ---------------------------------------------------------------- fake gateway: faults and recovery


def _script(**kw: Any) -> Script:
    return Script(frames=chat_frames(WORDS), result=native_result("", FULL_TEXT), **kw)


@pytest.mark.parametrize("cut_mode", ["abort", "eof"])
def test_cut_stream_is_resumed_without_duplicates(fake: FakeGateway, cut_mode: str) -> None:
    """Kill test: the connection dies mid-stream; the text equals the uncut answer, one generation."""
    fake.scripts.append(_script(cut_after=4, cut_mode=cut_mode, frame_interval=0.02))  # type: ignore[arg-type]
    with Client(fake.base_url, fake.api_key) as client:
        stream = client.chat_stream(model="fake/model", messages=HI, idempotency_key="kill-1")
        events = list(stream)
    assert texts(events) == FULL_TEXT
    done = events[-1]
    assert isinstance(done, Done) and done.text == FULL_TEXT and done.recovered == "resume"
    assert fake.created == 1
    creates = [r for r in fake.requests if r["path"] == "/v1/chat/completions"]
    assert [(r["key"], r["last_event_id"]) for r in creates] == [("kill-1", None), ("kill-1", "3")]
    assert creates[0]["body"] == creates[1]["body"]


def test_resume_refused_falls_back_to_replay(fake: FakeGateway) -> None:
    # the gateway answers the resume with 409; replay says running (409) once, then completed
    fake.scripts.append(_script(cut_after=3, resume="conflict", frame_interval=0.15))
    with Client(fake.base_url, fake.api_key) as client:
        events = list(client.chat_stream(model="fake/model", messages=HI))
    assert texts(events) == FULL_TEXT
    done = events[-1]
    assert isinstance(done, Done) and done.recovered == "replay" and done.text == FULL_TEXT
    assert fake.created == 1
    paths = [r["path"] for r in fake.requests]
    assert paths[:2] == ["/v1/chat/completions", "/v1/chat/completions"]
    assert paths.count("/api/v1/llm/responses/replay") >= 2
    assert all(r["body"] == b"" for r in fake.requests if r["path"].endswith("/replay"))


def test_async_client_recovers_too(fake: FakeGateway) -> None:
    fake.scripts.append(_script(cut_after=2, frame_interval=0.01))

    async def main() -> list[StreamEvent]:
        async with AsyncClient(fake.base_url, fake.api_key) as client:
            return [e async for e in client.chat_stream(model="fake/model", messages=HI)]

    events = asyncio.run(main())
    assert texts(events) == FULL_TEXT and isinstance(events[-1], Done) and fake.created == 1


def _failing_script() -> Script:
    frames = chat_frames(WORDS)[:3]
    frames.append(chat_failure_frame(3))
    return Script(frames=frames, result={}, failed=True, partial_output="The quick brown ", cut_after=2)


def test_failed_generation_after_cut_is_incomplete(fake: FakeGateway) -> None:
    fake.scripts.append(_failing_script())
    with Client(fake.base_url, fake.api_key) as client, pytest.raises(StreamFailed) as info:
        list(client.chat_stream(model="fake/model", messages=HI))
    assert info.value.code == "upstream_error" and info.value.partial_text == "The quick brown "
    assert info.value.generation_id == "01JFAKEGEN0000000000000001"
    assert fake.created == 1


def test_no_recovery_means_incomplete(fake: FakeGateway) -> None:
    fake.scripts.append(_script(cut_after=3))
    with Client(fake.base_url, fake.api_key) as client, pytest.raises(IncompleteStream) as info:
        list(client.chat_stream(model="fake/model", messages=HI, recover=False))
    assert info.value.partial_text == "The quick brown " and "incomplete" in str(info.value)


def test_keepalives_are_events(fake: FakeGateway) -> None:
    fake.scripts.append(_script(keepalives_first=3))
    with Client(fake.base_url, fake.api_key) as client:
        events = list(client.chat_stream(model="fake/model", messages=HI))
    assert sum(isinstance(e, KeepAlive) for e in events) == 3 and isinstance(events[-1], Done)


def test_native_and_buffered_over_http(fake: FakeGateway) -> None:
    result = native_result("01JFAKEGEN0000000000000001", "Hello world")
    frames = [
        encode_event(orjson.dumps({"id": "01JFAKEGEN0000000000000001", "model": "fake/model", "created_at": 1}),
                     event="start", id=0),
        encode_event(orjson.dumps({"type": "text", "text": "Hello "}), event="delta", id=1),
        encode_event(orjson.dumps({"type": "text", "text": "world"}), event="delta", id=2),
        encode_event(orjson.dumps(result), event="done", id=3),
    ]  # fmt: skip
    fake.scripts.append(Script(frames=frames, result=result))
    fake.scripts.append(
        Script(
            frames=[],
            result=result,
            body=orjson.dumps(result),
            extra_headers={"X-Kendr-Stream-Mode": "buffered", "X-Kendr-Buffered-Reason": "custom_mcp"},
        )
    )
    with Client(fake.base_url, fake.api_key) as client:
        events = list(client.native_stream(model="fake/model", input="hi"))
        assert texts(events) == "Hello world" and isinstance(events[-1], Done) and events[-1].text == "Hello world"
        buffered = list(client.native_stream(model="fake/model", input="hi"))
    assert len(buffered) == 1 and isinstance(buffered[0], Done)
    assert buffered[0].buffered_reason == "custom_mcp" and buffered[0].text == "Hello world"
    assert fake.requests[0]["path"] == "/api/v1/llm/responses"


def test_cli_cut_stream_exits_1_incomplete(fake: FakeGateway) -> None:
    fake.scripts.append(_failing_script())
    r = cli(["chat", "fake/model", "hi"], url=fake.base_url, key=fake.api_key)
    assert r.returncode == 1
    assert "incomplete" in r.stderr and "01JFAKEGEN0000000000000001" in r.stderr
    assert r.stdout.startswith("The quick ")  # what arrived is shown, never as a complete answer


def test_cli_cut_stream_recovered_exits_0(fake: FakeGateway) -> None:
    fake.scripts.append(_script(cut_after=5, frame_interval=0.01))
    r = cli(["chat", "fake/model", "hi"], url=fake.base_url, key=fake.api_key)
    assert r.returncode == 0, r.stderr
    assert r.stdout == FULL_TEXT + "\n"


def test_cli_replay(fake: FakeGateway) -> None:
    fake.scripts.append(_script())
    with Client(fake.base_url, fake.api_key) as client:
        client.chat_stream(model="fake/model", messages=HI, idempotency_key="k-replay").until_done()
    r = cli(["replay", "k-replay"], url=fake.base_url, key=fake.api_key)
    assert r.returncode == 0, r.stderr
    assert orjson.loads(r.stdout)["output_text"] == FULL_TEXT
    r = cli(["replay", "k-replay", "--text"], url=fake.base_url, key=fake.api_key)
    assert r.stdout == FULL_TEXT + "\n"
    r = cli(["replay", "unknown-key"], url=fake.base_url, key=fake.api_key)
    assert r.returncode == 1 and "generation_not_found" in r.stderr
    assert fake.created == 1


def _read_until(fd: int, needle: bytes, buf: bytearray, timeout: float = 30.0) -> None:
    import select
    import time

    deadline = time.monotonic() + timeout
    while needle not in buf:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"{needle!r} not seen in {bytes(buf)!r}"
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                chunk = b""
            assert chunk, f"pty closed before {needle!r}: {bytes(buf)!r}"
            buf += chunk


def test_cli_interactive_in_a_terminal(fake: FakeGateway) -> None:
    """In a real pseudo-terminal: a spinner while waiting (keep-alives tick it), then two turns of one
    conversation; only complete answers join the history."""
    fake.scripts.append(_script(keepalives_first=2, frame_interval=0.05))
    fake.scripts.append(_script())
    master, slave = os.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEGATE_")}
    env.update({"TIDEGATE_URL": fake.base_url, "TIDEGATE_API_KEY": fake.api_key, "TERM": "xterm"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidegate", "chat", "fake/model"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        close_fds=True,
    )
    os.close(slave)
    buf = bytearray()
    try:
        _read_until(master, b"you>", buf)
        os.write(master, b"first question\n")
        _read_until(master, FULL_TEXT.encode(), buf)
        assert b"waiting for the model" in buf  # the keep-alive spinner, on the terminal only
        _read_until(master, b"you>", buf)
        os.write(master, b"second question\n")
        del buf[:]
        _read_until(master, FULL_TEXT.encode(), buf)
        _read_until(master, b"you>", buf)
        os.write(master, b"\n")
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    bodies = [orjson.loads(r["body"]) for r in fake.requests]
    assert [m["content"] for m in bodies[1]["messages"]] == ["first question", FULL_TEXT, "second question"]
    assert bodies[0]["messages"] == [{"role": "user", "content": "first question"}]
