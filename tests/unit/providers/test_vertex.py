"""Vertex: URLs per region, body, bearer token (static or google-auth ADC), Google error envelope."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.emulators.anthropic_upstream import AnthropicFamilyEmulator
from tidegate.config.model import ProviderConfig
from tidegate.errors import ProviderFailure
from tidegate.providers.google.vertex import VertexAdapter, vertex_base_url, vertex_failure
from tidegate.request import GenerationRequest

REQ = GenerationRequest(model="pub", messages=[{"role": "user", "content": "hi"}], stream=False)


@pytest.mark.parametrize(
    ("region", "base"),
    [
        ("global", "https://aiplatform.googleapis.com/v1"),
        ("us", "https://aiplatform.us.rep.googleapis.com/v1"),
        ("eu", "https://aiplatform.eu.rep.googleapis.com/v1"),
        ("us-east5", "https://us-east5-aiplatform.googleapis.com/v1"),
    ],
)
def test_base_url_by_region(region: str, base: str) -> None:
    assert vertex_base_url(region) == base


async def test_static_token_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VTOKEN", "ya29.static")
    adapter = VertexAdapter(
        ProviderConfig(name="v", kind="vertex", region="us-east5", project="p1", access_token_env="VTOKEN")
    )
    req = await adapter.build_request(REQ, "claude-x@20250101")
    assert req.url == (
        "https://us-east5-aiplatform.googleapis.com/v1/projects/p1/locations/us-east5"
        "/publishers/anthropic/models/claude-x@20250101:streamRawPredict"
    )
    assert req.headers["authorization"] == "Bearer ya29.static"
    body = orjson.loads(req.body)
    assert "model" not in body
    assert body["anthropic_version"] == "vertex-2023-10-16" and body["stream"] is True  # stream stays
    monkeypatch.delenv("VTOKEN")
    with pytest.raises(ProviderFailure, match="VTOKEN"):
        await adapter.build_request(REQ, "m")


async def test_base_url_override_and_missing_project(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VTOKEN", "t")
    cfg = ProviderConfig(
        name="v", kind="vertex", region="europe-west1", base_url="http://127.0.0.1:5/v1", access_token_env="VTOKEN"
    )
    with pytest.raises(ProviderFailure, match="project"):
        await VertexAdapter(cfg).build_request(REQ, "m")
    cfg = ProviderConfig(
        name="v",
        kind="vertex",
        region="europe-west1",
        project="p",
        base_url="http://127.0.0.1:5/v1",
        access_token_env="VTOKEN",
    )
    req = await VertexAdapter(cfg).build_request(REQ, "m")
    assert req.url.startswith("http://127.0.0.1:5/v1/projects/p/locations/europe-west1/")


def test_google_error_envelope() -> None:
    wrapped = b'[{"error":{"code":429,"message":"Quota exceeded for aiplatform","status":"RESOURCE_EXHAUSTED"}}]'
    f = vertex_failure(429, {}, wrapped, "v")
    assert f.retriable and f.status == 429
    assert f.message == "v answered HTTP 429 (RESOURCE_EXHAUSTED: Quota exceeded for aiplatform)"
    bare = b'{"error":{"code":400,"message":"model: extra inputs","status":"INVALID_ARGUMENT"}}'
    f = vertex_failure(400, {}, bare, "v")
    assert not f.retriable and f.code == "invalid_request" and "INVALID_ARGUMENT" in f.message
    anthropic_body = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    f = vertex_failure(529, {"retry-after": "4"}, anthropic_body, "v")
    assert f.retriable and f.retry_after == 4.0 and "overloaded_error: Overloaded" in f.message
    assert vertex_failure(503, {}, b"not json", "v").message == "v answered HTTP 503"


@pytest.fixture
def emulator() -> Iterator[AnthropicFamilyEmulator]:
    emu = AnthropicFamilyEmulator().start()
    yield emu
    emu.stop()


async def test_adc_token_refreshed_off_loop_and_cached(
    emulator: AnthropicFamilyEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real google-auth ADC: a service-account file whose token endpoint is the emulator."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    sa = {
        "type": "service_account",
        "project_id": "adc-project",
        "private_key_id": "k1",
        "private_key": pem,
        "client_email": "emu@adc-project.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": emulator.base_url + "/token",
    }
    path = tmp_path / "sa.json"
    path.write_bytes(orjson.dumps(sa))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    adapter = VertexAdapter(ProviderConfig(name="v", kind="vertex", region="global"))
    req = await adapter.build_request(REQ, "claude-x")
    assert req.headers["authorization"] == "Bearer ya29.adc-1"
    assert "/projects/adc-project/locations/global/" in req.url  # the project ADC reported
    await adapter.build_request(REQ, "claude-x")
    assert emulator.token_refreshes == 1  # cached while valid
    assert adapter._adc is not None
    adapter._adc._credentials.expiry = adapter._adc._credentials.expiry.replace(year=2000)
    req = await adapter.build_request(REQ, "claude-x")
    assert req.headers["authorization"] == "Bearer ya29.adc-2" and emulator.token_refreshes == 2
