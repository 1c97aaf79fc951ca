"""Image generations end to end: a real tidegate in front of an emulated OpenAI-compatible image API,
through `/v1/images/generations` (official SDK, stream and not) and the native door."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
from openai.types import ImageGenCompletedEvent, ImageGenPartialImageEvent

from tests.emulators.images_embeddings_upstream import OPENAI_KEY, ImagesEmbeddingsUpstream, png_b64
from tests.support.process import ServerProcess, running_server, sqlite_url, started_server
from tests.support.records import fetch_record
from tests.support.streams import SSEResult, stream_sse
from tidegate.config.load import parse_config
from tidegate.errors import ConfigError
from tidegate.ids import is_ulid

V1 = "/v1/images/generations"
NATIVE = "/api/v1/images/generations"
PNG = b"\x89PNG\r\n\x1a\n"


def _image_model(name: str, *routes: str, caps: str = "") -> str:
    table = ", ".join(f'{{ provider = "emu", model = "{r}" }}' for r in routes)
    return f'[models."{name}"]\ntype = "image"\nroutes = [{table}]\n{caps}\n'


def _config(workdir: Path, emu: str) -> str:
    return (
        f"""
[server]
host = "127.0.0.1"
keepalive_s = 0.4
[store]
url = "{sqlite_url(workdir)}"
[providers.local]
kind = "local"
[providers.emu]
kind = "openai"
base_url = "{emu}/v1"
api_key_env = "EMU_OPENAI_KEY"
[models."local/e5-small"]
type = "embedding"
routes = [{{ provider = "local", model = "e5-small" }}]
"""
        + _image_model("emu/gpt-image", "gpt-image-1")
        + _image_model("emu/fallback", "fail-500", "gpt-image-1")
        + _image_model("emu/all-fail", "fail-500")
        + _image_model("emu/drop", "img-drop")
        + _image_model("emu/error-event", "img-error-event")
        + _image_model("emu/error-first", "img-error-first", "gpt-image-1")
        + _image_model("emu/big-partial", "img-big-partial")
        + _image_model("emu/slow", "img-slow", caps='capabilities = ["images"]')
        + _image_model("emu/nousage", "img-nousage", caps='capabilities = ["images"]')
    )


@pytest.fixture(scope="module")
def emu() -> Iterator[ImagesEmbeddingsUpstream]:
    upstream = ImagesEmbeddingsUpstream().start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, emu: ImagesEmbeddingsUpstream) -> Iterator[ServerProcess]:
    env = {"EMU_OPENAI_KEY": OPENAI_KEY}
    with started_server(tmp_path_factory, "images", lambda workdir: _config(workdir, emu.url), extra_env=env) as srv:
        yield srv


@pytest.fixture()
def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=server.key, max_retries=0)


def _is_png(b64: str) -> bool:
    return base64.b64decode(b64).startswith(PNG)


def _sse(server: ServerProcess, path: str, body: dict[str, Any]) -> SSEResult:
    return stream_sse(server.base_url + path, body, server.headers)


def _assert_ids(r: SSEResult) -> None:
    """Every event carries `id: n`, from 0, and every frame names its event."""
    assert [e.id for e in r.events] == [str(i) for i in range(len(r.events))]
    for block in r.raw.split(b"\n\n")[:-1]:
        lines = [ln for ln in block.split(b"\n") if not ln.startswith(b":")]
        if lines:
            assert lines[0].startswith(b"id: ") and lines[1].startswith(b"event: ") and lines[2].startswith(b"data: ")


# --- /v1/images/generations -----------------------------------------------------------------------


def test_sdk_streams_typed_partial_and_completed_events(client: openai.OpenAI, emu: ImagesEmbeddingsUpstream) -> None:
    events = list(
        client.images.generate(
            model="emu/gpt-image", prompt="a lighthouse at dawn", stream=True, partial_images=2, size="1024x1536"
        )
    )
    assert [type(e) for e in events] == [ImageGenPartialImageEvent, ImageGenPartialImageEvent, ImageGenCompletedEvent]
    partials = [e for e in events if isinstance(e, ImageGenPartialImageEvent)]
    assert [p.partial_image_index for p in partials] == [0, 1]
    assert all(_is_png(p.b64_json) and p.size == "1024x1536" and p.output_format == "png" for p in partials)
    done = events[-1]
    assert isinstance(done, ImageGenCompletedEvent)
    assert _is_png(done.b64_json) and done.quality == "medium" and done.background == "opaque"
    assert done.usage.total_tokens == 283 and done.usage.input_tokens_details.text_tokens == 11
    sent = emu.for_path("/images/generations")[-1]
    assert sent.body["stream"] is True and sent.body["partial_images"] == 2
    assert sent.body["model"] == "gpt-image-1" and sent.body["size"] == "1024x1536"
    assert sent.headers["authorization"] == f"Bearer {OPENAI_KEY}"


def test_stream_wire_shape_and_record(server: ServerProcess) -> None:
    r = _sse(server, V1, {"model": "emu/gpt-image", "prompt": "p", "stream": True, "partial_images": 1})
    assert r.status == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["x-provider"] == "emu" and r.headers["x-served-model"] == "gpt-image-1"
    _assert_ids(r)
    names = [e.event for e in r.events]
    assert names == ["image_generation.partial_image", "image_generation.completed"]
    for e in r.events:
        assert orjson.loads(e.data)["type"] == e.event
    rec = fetch_record(server, r.headers["x-generation-id"])
    assert rec["status"] == "completed" and rec["provider"] == "emu"
    assert rec["usage"]["prompt_tokens"] == 11 and rec["usage"]["completion_tokens"] == 272


def test_partial_images_zero_sends_only_completed(server: ServerProcess) -> None:
    r = _sse(server, V1, {"model": "emu/gpt-image", "prompt": "p", "stream": True})
    assert [e.event for e in r.events] == ["image_generation.completed"]


def test_sdk_non_stream_json(client: openai.OpenAI, emu: ImagesEmbeddingsUpstream) -> None:
    raw = client.images.with_raw_response.generate(model="emu/gpt-image", prompt="two cats", n=2, quality="high")
    r = raw.parse()
    assert raw.headers["x-provider"] == "emu"
    assert r.data is not None and len(r.data) == 2 and all(_is_png(d.b64_json or "") for d in r.data)
    assert r.usage is not None and r.usage.total_tokens == 283 and r.created > 0
    sent = emu.for_path("/images/generations")[-1]
    assert "stream" not in sent.body and "partial_images" not in sent.body and sent.body["n"] == 2


def test_fallback_before_the_first_byte(client: openai.OpenAI, server: ServerProcess) -> None:
    raw = client.images.with_raw_response.generate(model="emu/fallback", prompt="p")
    assert raw.headers["x-provider-attempts"] == "2"
    r = _sse(server, V1, {"model": "emu/fallback", "prompt": "p", "stream": True, "partial_images": 1})
    assert r.headers["x-provider-attempts"] == "2"
    assert r.events[-1].event == "image_generation.completed"


def test_early_in_band_error_falls_back(server: ServerProcess) -> None:
    r = _sse(server, V1, {"model": "emu/error-first", "prompt": "p", "stream": True})
    assert r.status == 200 and r.headers["x-provider-attempts"] == "2"
    assert r.events[-1].event == "image_generation.completed"


@pytest.mark.parametrize("model", ["emu/drop", "emu/error-event"])
def test_failure_after_first_byte_is_an_error_event(client: openai.OpenAI, server: ServerProcess, model: str) -> None:
    r = _sse(server, V1, {"model": model, "prompt": "p", "stream": True, "partial_images": 1})
    assert r.status == 200
    _assert_ids(r)
    assert [e.event for e in r.events] == ["image_generation.partial_image", "error"]
    err = orjson.loads(r.events[-1].data)
    assert err["type"] == "error" and err["error"]["code"] == "upstream_error" and err["error"]["message"]
    assert fetch_record(server, r.headers["x-generation-id"])["status"] == "failed"
    with pytest.raises(openai.APIError):
        for _ in client.images.generate(model=model, prompt="p", stream=True, partial_images=1):
            pass


def test_partial_over_the_cap_fails_cleanly(server: ServerProcess) -> None:
    r = _sse(server, V1, {"model": "emu/big-partial", "prompt": "p", "stream": True, "partial_images": 2})
    assert r.status == 200
    assert [e.event for e in r.events] == ["image_generation.partial_image", "error"]
    err = orjson.loads(r.events[-1].data)["error"]
    assert err["code"] == "upstream_protocol_error" and "cap" in err["message"]


def test_non_stream_failure_is_502_json(client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as exc:
        client.images.generate(model="emu/all-fail", prompt="p")
    assert exc.value.status_code == 502
    assert OPENAI_KEY not in exc.value.response.text


# --- validation -----------------------------------------------------------------------------------

BAD: list[tuple[dict[str, Any], str]] = [
    ({"n": 0}, "'n'"),
    ({"n": 11}, "'n'"),
    ({"n": 2, "stream": True}, "'n'"),
    ({"size": "999x999"}, "'size'"),
    ({"quality": "ultra"}, "'quality'"),
    ({"output_format": "gif"}, "'output_format'"),
    ({"partial_images": 4}, "'partial_images'"),
    ({"partial_images": -1}, "'partial_images'"),
    ({"background": "green"}, "'background'"),
    ({"prompt": "x" * 32_001}, "'prompt'"),
    ({"prompt": None}, "'prompt'"),
    ({"response_format": "url"}, "'response_format'"),
    ({"model": "local/e5-small"}, "embedding model"),
]


@pytest.mark.parametrize("path", [V1, NATIVE])
@pytest.mark.parametrize(("override", "needle"), BAD)
def test_validation_400_before_any_upstream_call(
    server: ServerProcess, emu: ImagesEmbeddingsUpstream, path: str, override: dict[str, Any], needle: str
) -> None:
    before = len(emu.requests)
    body = {"model": "emu/gpt-image", "prompt": "p", **override}
    body = {k: v for k, v in body.items() if v is not None}
    r = httpx.post(server.base_url + path, json=body, headers=server.headers)
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]
    assert len(emu.requests) == before


# --- /api/v1/images/generations -------------------------------------------------------------------


def _percents(r: SSEResult) -> list[int]:
    return [orjson.loads(e.data)["percent"] for e in r.events if e.event == "progress"]


def test_native_stream_with_partials(server: ServerProcess) -> None:
    r = _sse(server, NATIVE, {"model": "emu/gpt-image", "prompt": "p", "partial_images": 2})  # stream by default
    assert r.status == 200 and r.headers["content-type"].startswith("text/event-stream")
    _assert_ids(r)
    gid = r.headers["x-generation-id"]
    names = [e.event for e in r.events]
    assert names[0] == "start" and names[-1] == "done" and "error" not in names
    start = orjson.loads(r.events[0].data)
    assert start["id"] == gid and is_ulid(gid) and start["model"] == "emu/gpt-image" and start["created_at"] > 0
    percents = _percents(r)
    assert percents and percents == sorted(percents) and percents[-1] == 100 and all(0 <= p <= 100 for p in percents)
    partials = [orjson.loads(e.data) for e in r.events if e.event == "partial"]
    assert [p["index"] for p in partials] == [0, 1] and all(_is_png(p["b64_json"]) for p in partials)
    assert names.index("partial") < names.index("done")
    done = orjson.loads(r.events[-1].data)
    assert done["id"] == gid and done["model"] == "emu/gpt-image" and done["provider"] == "emu"
    assert len(done["data"]) == 1 and _is_png(done["data"][0]["b64_json"])
    assert done["usage"]["total_tokens"] == 283
    assert fetch_record(server, gid)["status"] == "completed"


def test_native_without_partials_sends_no_partial_frames(server: ServerProcess) -> None:
    r = _sse(server, NATIVE, {"model": "emu/gpt-image", "prompt": "p"})
    names = [e.event for e in r.events]
    assert "partial" not in names and names[0] == "start" and names[-1] == "done" and "progress" in names


def test_native_progress_while_a_non_streaming_upstream_works(
    server: ServerProcess, emu: ImagesEmbeddingsUpstream
) -> None:
    r = _sse(server, NATIVE, {"model": "emu/slow", "prompt": "p", "partial_images": 2})
    names = [e.event for e in r.events]
    assert names[0] == "start" and names[-1] == "done"
    assert names.count("progress") >= 3  # queued + at least one tick while waiting + completed
    percents = _percents(r)
    assert percents == sorted(percents) and percents[-1] == 100
    assert "partial" not in names  # the upstream could not stream
    sent = emu.for_path("/images/generations")[-1]
    assert sent.body["model"] == "img-slow" and "stream" not in sent.body


def test_native_non_stream_returns_the_done_payload(server: ServerProcess) -> None:
    r = httpx.post(
        server.base_url + NATIVE,
        json={"model": "emu/nousage", "prompt": "a b c", "stream": False},
        headers=server.headers,
    )
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    done = r.json()
    gid = r.headers["x-generation-id"]
    assert done["id"] == gid and done["provider"] == "emu" and _is_png(done["data"][0]["b64_json"])
    assert done["usage"]["input_tokens"] > 0 and done["usage"]["output_tokens"] == 0
    rec = fetch_record(server, gid)
    assert rec["status"] == "completed" and rec["usage_estimated"] is True


def test_native_failure_ends_with_error_never_done(server: ServerProcess) -> None:
    r = _sse(server, NATIVE, {"model": "emu/drop", "prompt": "p", "partial_images": 1})
    names = [e.event for e in r.events]
    assert names[0] == "start" and names[-1] == "error" and "done" not in names
    err = orjson.loads(r.events[-1].data)
    assert err["error"]["code"] == "upstream_error" and err["error"]["message"]
    assert fetch_record(server, r.headers["x-generation-id"])["status"] == "failed"


def test_native_every_route_failing_is_502(server: ServerProcess) -> None:
    r = httpx.post(server.base_url + NATIVE, json={"model": "emu/all-fail", "prompt": "p"}, headers=server.headers)
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_error"


def test_idempotent_repeat_is_replayed_without_a_new_upstream_call(
    server: ServerProcess, emu: ImagesEmbeddingsUpstream
) -> None:
    headers = {**server.headers, "Idempotency-Key": "img-idem-1"}
    body = {"model": "emu/gpt-image", "prompt": "only once", "stream": False}
    first = httpx.post(server.base_url + NATIVE, json=body, headers=headers)
    assert first.status_code == 200
    calls = len(emu.for_path("/images/generations"))
    again = httpx.post(server.base_url + NATIVE, json=body, headers=headers)
    assert again.status_code == 200 and again.headers.get("idempotent-replayed") == "true"
    assert again.json() == first.json()
    assert len(emu.for_path("/images/generations")) == calls
    changed = httpx.post(server.base_url + NATIVE, json={**body, "prompt": "other"}, headers=headers)
    assert changed.status_code == 422


# --- replay and resume (docs/api-operations.md §7) --------------------------------------------------------------

REPLAY = "/api/v1/llm/responses/replay"


def _triples(r: SSEResult) -> list[tuple[str | None, str, str]]:
    return [(e.id, e.event, e.data) for e in r.events]


def _replay_json(server: ServerProcess, key: str) -> httpx.Response:
    return httpx.post(server.base_url + REPLAY, headers={**server.headers, "Idempotency-Key": key})


def _replay_sse(server: ServerProcess, key: str, last_event_id: int | None = None) -> SSEResult:
    headers = {**server.headers, "Idempotency-Key": key, "Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    return stream_sse(server.base_url + REPLAY, b"", headers)


def test_native_stream_is_resent_identically_and_replays_its_done(
    server: ServerProcess, emu: ImagesEmbeddingsUpstream
) -> None:
    key = "img-native-replay-1"
    headers = {**server.headers, "Idempotency-Key": key}
    body = {"model": "emu/gpt-image", "prompt": "replay me", "partial_images": 2}
    first = stream_sse(server.base_url + NATIVE, body, headers)
    assert first.status == 200 and first.events[-1].event == "done"
    assert "idempotent-replayed" not in first.headers
    calls = len(emu.for_path("/images/generations"))
    again = stream_sse(server.base_url + NATIVE, body, headers)
    assert again.status == 200 and again.headers["idempotent-replayed"] == "true"
    assert _triples(again) == _triples(first)
    assert again.headers["x-generation-id"] == first.headers["x-generation-id"]
    resumed = stream_sse(server.base_url + NATIVE, body, {**headers, "Last-Event-ID": "2"})
    assert _triples(resumed) == _triples(first)[3:]
    done = orjson.loads(first.events[-1].data)
    replayed = _replay_json(server, key)
    assert replayed.status_code == 200 and replayed.headers["idempotent-replayed"] == "true"
    assert replayed.json() == done
    live = _replay_sse(server, key)
    assert live.status == 200 and _triples(live) == _triples(first)
    tail = _replay_sse(server, key, last_event_id=len(first.events) - 2)
    assert _triples(tail) == _triples(first)[-1:]
    assert len(emu.for_path("/images/generations")) == calls  # nothing above called the upstream


def test_openai_stream_is_resent_identically_and_replays_the_native_done(
    server: ServerProcess, emu: ImagesEmbeddingsUpstream
) -> None:
    key = "img-v1-replay-1"
    headers = {**server.headers, "Idempotency-Key": key}
    body = {"model": "emu/gpt-image", "prompt": "replay me too", "stream": True, "partial_images": 1}
    first = stream_sse(server.base_url + V1, body, headers)
    assert [e.event for e in first.events] == ["image_generation.partial_image", "image_generation.completed"]
    calls = len(emu.for_path("/images/generations"))
    again = stream_sse(server.base_url + V1, body, headers)
    assert again.headers["idempotent-replayed"] == "true" and _triples(again) == _triples(first)
    gid = first.headers["x-generation-id"]
    completed = orjson.loads(first.events[-1].data)
    expected_done = {
        "id": gid,
        "data": [{"b64_json": completed["b64_json"]}],
        "usage": completed["usage"],
        "model": "emu/gpt-image",
        "provider": "emu",
    }
    replayed = _replay_json(server, key)
    assert replayed.status_code == 200 and replayed.json() == expected_done
    native = _replay_sse(server, key)
    names = [e.event for e in native.events]
    assert names[0] == "start" and names[-1] == "done" and names.count("partial") == 1
    assert [e.id for e in native.events] == [str(i) for i in range(len(native.events))]
    assert orjson.loads(native.events[-1].data) == expected_done
    partial = orjson.loads(native.events[names.index("partial")].data)
    assert partial == {"index": 0, "b64_json": orjson.loads(first.events[0].data)["b64_json"]}
    assert len(emu.for_path("/images/generations")) == calls


def test_openai_json_repeat_and_replay(
    client: openai.OpenAI, server: ServerProcess, emu: ImagesEmbeddingsUpstream
) -> None:
    key = "img-v1-json-replay-1"
    headers = {**server.headers, "Idempotency-Key": key}
    body = {"model": "emu/gpt-image", "prompt": "json once", "n": 2}
    first = httpx.post(server.base_url + V1, json=body, headers=headers)
    assert first.status_code == 200
    calls = len(emu.for_path("/images/generations"))
    again = httpx.post(server.base_url + V1, json=body, headers=headers)
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content
    replayed = _replay_json(server, key).json()
    assert replayed["id"] == first.headers["x-generation-id"] and replayed["provider"] == "emu"
    assert [d["b64_json"] for d in replayed["data"]] == [d["b64_json"] for d in first.json()["data"]]
    assert replayed["usage"] == first.json()["usage"]
    assert len(emu.for_path("/images/generations")) == calls


def test_failed_image_generation_replays_502(server: ServerProcess) -> None:
    key = "img-failed-replay-1"
    r = stream_sse(
        server.base_url + NATIVE,
        {"model": "emu/drop", "prompt": "p", "partial_images": 1},
        {**server.headers, "Idempotency-Key": key},
    )
    assert r.events[-1].event == "error"
    replayed = _replay_json(server, key)
    assert replayed.status_code == 502
    assert replayed.json()["status"] == "failed" and replayed.json()["error"]["code"] == "upstream_error"


# --- configured size caps ([server] max_partial_image_bytes, max_image_bytes) ---------------------

# The emulator's first partial image is a few bytes smaller than its second one and its final images:
# a cap of exactly the first partial's size lets it through and stops the next image.
SMALL_CAP = len(base64.b64decode(png_b64(0)))


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory, emu: ImagesEmbeddingsUpstream) -> Iterator[ServerProcess]:
    assert len(base64.b64decode(png_b64(1))) > SMALL_CAP and len(base64.b64decode(png_b64(10))) > SMALL_CAP
    workdir = tmp_path_factory.mktemp("images-capped")
    config = _config(workdir, emu.url).replace(
        "keepalive_s = 0.4\n",
        f"keepalive_s = 0.4\nmax_partial_image_bytes = {SMALL_CAP}\nmax_image_bytes = {SMALL_CAP}\n",
    )
    with running_server(workdir, config, extra_env={"EMU_OPENAI_KEY": OPENAI_KEY}) as srv:
        yield srv


def test_configured_partial_cap_ends_the_openai_stream_with_an_error_event(capped: ServerProcess) -> None:
    r = _sse(capped, V1, {"model": "emu/gpt-image", "prompt": "p", "stream": True, "partial_images": 2})
    assert r.status == 200
    _assert_ids(r)
    assert [e.event for e in r.events] == ["image_generation.partial_image", "error"]
    err = orjson.loads(r.events[-1].data)
    assert err["type"] == "error" and err["error"]["code"] == "upstream_protocol_error"
    assert err["error"]["message"].endswith(f"over the cap of {SMALL_CAP}")
    assert fetch_record(capped, r.headers["x-generation-id"])["status"] == "failed"
    sdk = openai.OpenAI(base_url=capped.base_url + "/v1", api_key=capped.key, max_retries=0)
    with pytest.raises(openai.APIError):
        for _ in sdk.images.generate(model="emu/gpt-image", prompt="p", stream=True, partial_images=2):
            pass


def test_configured_partial_cap_ends_the_native_stream_with_error(capped: ServerProcess) -> None:
    r = _sse(capped, NATIVE, {"model": "emu/gpt-image", "prompt": "p", "partial_images": 2})
    names = [e.event for e in r.events]
    assert names[0] == "start" and names[-1] == "error" and "done" not in names
    assert [orjson.loads(e.data)["index"] for e in r.events if e.event == "partial"] == [0]
    err = orjson.loads(r.events[-1].data)["error"]
    assert err["code"] == "upstream_protocol_error" and f"cap of {SMALL_CAP}" in err["message"]


def test_configured_image_cap_fails_a_final_image(capped: ServerProcess) -> None:
    r = _sse(capped, V1, {"model": "emu/gpt-image", "prompt": "p", "stream": True, "partial_images": 1})
    assert [e.event for e in r.events] == ["image_generation.partial_image", "error"]
    assert "the final image" in orjson.loads(r.events[-1].data)["error"]["message"]
    j = httpx.post(capped.base_url + V1, json={"model": "emu/gpt-image", "prompt": "p"}, headers=capped.headers)
    assert j.status_code == 502 and "upstream_protocol_error" in j.json()["error"]["message"]


@pytest.mark.parametrize("key", ["max_partial_image_bytes", "max_image_bytes"])
def test_image_cap_keys_are_validated(key: str) -> None:
    defaults = parse_config({}).server
    assert (defaults.max_partial_image_bytes, defaults.max_image_bytes) == (8 * 1024 * 1024, 48 * 1024 * 1024)
    assert getattr(parse_config({"server": {key: 1234}}).server, key) == 1234
    for bad in (0, -1, "8MiB", True):
        with pytest.raises(ConfigError, match=f"server.{key}"):
            parse_config({"server": {key: bad}})
