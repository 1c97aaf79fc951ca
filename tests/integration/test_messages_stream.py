"""A `/v1/messages` stream served by a translated route (an OpenAI-compatible chat upstream, the
anthropic SDK's stream helpers reading it): `message_start` says the prompt's tokens before any
upstream did, a stop sequence's ending is what docs/translation.md says, and a client that drops
mid-stream resumes with `Idempotency-Key` + `Last-Event-ID` (docs/api-operations.md §7)."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator

import anthropic
import httpx2
import pytest

from tests.emulators.openai_upstream import TEXT_PIECES, OpenAIUpstream
from tests.support.keyed_streams import open_stream
from tests.support.process import ServerProcess, running_server, sqlite_url
from tests.support.streams import stream_sse

MESSAGES = "/v1/messages"
PROMPT = "Hello there, gateway. " * 20  # 440 characters: ~90 tokens


@pytest.fixture(scope="module")
def chat() -> Iterator[OpenAIUpstream]:
    with OpenAIUpstream() as upstream:
        yield upstream


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, chat: OpenAIUpstream) -> Iterator[ServerProcess]:
    workdir = tmp_path_factory.mktemp("messages-stream")
    config = f"""
[server]
host = "127.0.0.1"
keepalive_s = 0.2
[store]
url = "{sqlite_url(workdir)}"
[providers.chat]
kind = "openai"
base_url = "{chat.base_url}"
[models."gpt"]
routes = [{{ provider = "chat", model = "text" }}]
[models."gpt-pause"]
routes = [{{ provider = "chat", model = "silence:1.2" }}]
"""
    with running_server(workdir, config) as proc:
        yield proc


def sdk(server: ServerProcess, **headers: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, api_key=server.key, max_retries=0, default_headers=headers)


def test_message_start_carries_the_prompt_estimate(server: ServerProcess) -> None:
    with sdk(server).messages.stream(
        model="gpt", max_tokens=32, messages=[{"role": "user", "content": PROMPT}]
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    start = events[0]
    assert start.type == "message_start"
    assert 60 <= start.message.usage.input_tokens <= 130  # estimated: o200k's ~90, or ~4 characters a token
    assert start.message.usage.output_tokens == 0
    # the route's own count arrives with message_delta: 11 prompt tokens, 3 of them cached
    assert (final.usage.input_tokens, final.usage.cache_read_input_tokens, final.usage.output_tokens) == (8, 3, 7)


def test_a_stop_sequence_ending_is_end_turn(server: ServerProcess, chat: OpenAIUpstream) -> None:
    """A chat upstream leaves the sequence out of the text and says only `finish_reason: stop` (so do
    Gemini and llama.cpp): nothing tells a stop sequence from the model's own end (translation.md)."""
    message = sdk(server).messages.create(
        model="gpt", max_tokens=32, stop_sequences=["END"], messages=[{"role": "user", "content": "Hi"}]
    )
    assert chat.last("text").body["stop"] == ["END"]
    assert (message.stop_reason, message.stop_sequence) == ("end_turn", None)


def _frames_until(sock: socket.socket, count: int) -> list[bytes]:
    """The first `count` whole SSE frames of the chunked response (the head and chunk sizes dropped)."""
    got = b""
    while got.count(b"\n\n") < count + 1:  # (+1: the blank line after the HTTP head)
        chunk = sock.recv(65536)
        assert chunk, "the stream ended early"
        got += chunk
    body = got.split(b"\r\n\r\n", 1)[1]
    text = b"".join(line + b"\n" for line in body.split(b"\r\n") if line and not _is_size(line))
    frames = [f + b"\n\n" for f in text.replace(b"\n\n\n", b"\n\n").split(b"\n\n") if f.startswith(b"id: ")]
    return frames[:count]


def _is_size(line: bytes) -> bool:
    try:
        int(line, 16)
    except ValueError:
        return False
    return True


def test_a_dropped_stream_resumes_with_last_event_id(server: ServerProcess) -> None:
    key = f"msg-resume-{uuid.uuid4()}"
    body = {"model": "gpt-pause", "max_tokens": 32, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
    headers = {"anthropic-version": "2023-06-01", "x-api-key": server.key, "Idempotency-Key": key}
    sock = open_stream(server, body, headers, MESSAGES)
    try:
        before = _frames_until(sock, 3)  # message_start, the text block's start, its first delta
    finally:
        sock.close()  # dropped in the upstream's pause: the keyed generation goes on
    last_id = before[-1].split(b"\n", 1)[0].removeprefix(b"id: ").decode()
    resume = {**headers, "Accept": "text/event-stream", "Last-Event-ID": last_id}
    rest = stream_sse(server.base_url + MESSAGES, body, resume)
    assert rest.status == 200 and rest.events[0].id == str(int(last_id) + 1)
    assert rest.events[-1].event == "message_stop"
    whole = b"".join(before) + rest.raw
    # byte-valid for the SDK: the dropped part and the resumed rest read as one stream by its helpers
    answer = httpx2.Response(200, content=whole, headers={"content-type": "text/event-stream"})
    replayed = httpx2.Client(transport=httpx2.MockTransport(lambda _: answer))
    client = anthropic.Anthropic(base_url="http://resumed", api_key="-", max_retries=0, http_client=replayed)
    with client.messages.stream(model="gpt-pause", max_tokens=32, messages=[{"role": "user", "content": "Hi"}]) as s:
        final = s.get_final_message()
    assert final.content[0].type == "text" and final.content[0].text == "".join(TEXT_PIECES)
    assert final.stop_reason == "end_turn"
    # and the whole stream again, from the store, is those same bytes
    again = stream_sse(server.base_url + MESSAGES, body, headers)
    assert again.headers["idempotent-replayed"] == "true" and again.raw == whole
    # past its last event: the ending again (`message_stop`), so the client can tell it ended
    last = int(rest.events[-1].id or -1)
    past = stream_sse(server.base_url + MESSAGES, body, {**resume, "Last-Event-ID": str(last + 5)})
    assert [(e.id, e.event) for e in past.events] == [(str(last), "message_stop")]
