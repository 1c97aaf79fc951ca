"""Google and AWS credentials are obtained one way (providers/google/auth.py, providers/aws/auth.py)
by every kind that needs them, and the Google path works on a `[cloud]`-only install: it imports no
`requests`, nor anything else the `[cloud]` extra does not install (google-auth's urllib3 transport
needs `packaging`: its `[urllib3]` extra)."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from packaging.requirements import Requirement

from tests.emulators.anthropic_upstream import AnthropicFamilyEmulator
from tidegate.config.model import ProviderConfig
from tidegate.errors import ProviderFailure
from tidegate.providers.aws.auth import AwsCredentials, sigv4_headers
from tidegate.providers.aws.bedrock import BedrockAdapter
from tidegate.providers.aws.embeddings import BedrockEmbeddingProvider
from tidegate.providers.google.auth import GoogleToken
from tidegate.providers.google.embeddings import VertexEmbeddingProvider
from tidegate.providers.google.gemini import GeminiAdapter
from tidegate.providers.google.vertex import VertexAdapter
from tidegate.request import EmbeddingInputs


@pytest.fixture
def emulator() -> Iterator[AnthropicFamilyEmulator]:
    emu = AnthropicFamilyEmulator().start()
    yield emu
    emu.stop()


def service_account_file(tmp_path: Path, token_uri: str) -> Path:
    """A real service-account key whose token endpoint is the emulator's `/token`."""
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
        "token_uri": token_uri,
    }
    path = tmp_path / "sa.json"
    path.write_bytes(orjson.dumps(sa))
    return path


# Run in a fresh interpreter, so that nothing the test process imported hides what this path imports;
# `requests` is made unimportable, as on an install with the `[cloud]` extra only.
CLOUD_ONLY = textwrap.dedent(
    """
    import asyncio, sys
    before = set(sys.modules)  # what the interpreter's start loaded (site, .pth hooks)

    class NoRequests:
        def find_spec(self, name, path=None, target=None):
            if name == "requests" or name.startswith("requests."):
                raise ImportError("requests is not installed with the [cloud] extra")
            return None

    sys.meta_path.insert(0, NoRequests())
    from tidegate.config.model import ProviderConfig
    from tidegate.providers.google.embeddings import VertexEmbeddingProvider
    from tidegate.providers.google.auth import bearer_token

    provider = VertexEmbeddingProvider(ProviderConfig(name="ve", kind="vertex", region="us-central1"), 5.0)
    token = asyncio.run(bearer_token(provider.name, None, provider._adc))
    print(token, provider._adc.project, "requests" in sys.modules)
    print(" ".join(sorted({m.split(".")[0] for m in set(sys.modules) - before} - set(sys.stdlib_module_names))))
    """
)


def test_vertex_embeddings_token_without_requests(emulator: AnthropicFamilyEmulator, tmp_path: Path) -> None:
    sa = service_account_file(tmp_path, emulator.base_url + "/token")
    env = {"GOOGLE_APPLICATION_CREDENTIALS": str(sa), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", CLOUD_ONLY], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    said, imported = done.stdout.splitlines()
    assert said.split() == ["ya29.adc-1", "adc-project", "False"]
    assert emulator.token_refreshes == 1
    cloud_only = distributions_of_a_cloud_install()
    by_module = importlib.metadata.packages_distributions()
    missing = {m for m in imported.split() if m in by_module and not {canonical(d) for d in by_module[m]} & cloud_only}
    assert not missing, f"imported on the Google path but not installed by tidegate[cloud]: {sorted(missing)}"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def distributions_of_a_cloud_install() -> set[str]:
    """tidegate, its dependencies and its `[cloud]` extra's, with theirs (as pip would resolve them
    from pyproject.toml and each installed dependency's metadata)."""
    project = tomllib.loads((Path(__file__).parents[3] / "pyproject.toml").read_text())["project"]
    todo = [Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["cloud"]]]
    found = {"tidegate"}
    while todo:
        req = todo.pop()
        name = canonical(req.name)
        if name in found:
            continue
        found.add(name)
        for text in importlib.metadata.requires(req.name) or []:
            dep = Requirement(text)
            extras = req.extras or {""}
            if dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in extras):
                todo.append(dep)
    return found


def test_every_google_kind_uses_the_one_token_source() -> None:
    vertex = VertexAdapter(ProviderConfig(name="v", kind="vertex"))
    gemini = GeminiAdapter(ProviderConfig(name="g", kind="gemini", project="p"))
    embeddings = VertexEmbeddingProvider(ProviderConfig(name="e", kind="vertex"), 5.0)
    assert all(isinstance(p._adc, GoogleToken) for p in (vertex, gemini, embeddings))
    static = VertexEmbeddingProvider(ProviderConfig(name="e", kind="vertex", access_token_env="T"), 5.0)
    assert static._adc is None and GeminiAdapter(ProviderConfig(name="g", kind="gemini"))._adc is None


async def test_static_token_variable_unset_is_a_clear_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VTOKEN_UNSET", raising=False)
    provider = VertexEmbeddingProvider(
        ProviderConfig(name="e", kind="vertex", project="p", access_token_env="VTOKEN_UNSET"), 5.0
    )
    with pytest.raises(ProviderFailure, match="environment variable VTOKEN_UNSET is not set"):
        await provider.embed(EmbeddingInputs(texts=["a"]), "text-embedding-005", None)


async def test_aws_credentials_from_the_standard_chain_sign_both_bedrock_kinds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "session-1")
    chat = BedrockAdapter(ProviderConfig(name="b", kind="bedrock"))
    embed = BedrockEmbeddingProvider(ProviderConfig(name="be", kind="bedrock"), 5.0)
    assert isinstance(chat._credentials, AwsCredentials) and isinstance(embed._credentials, AwsCredentials)
    frozen = await embed._credentials.frozen()
    assert frozen.access_key == "AKIDEXAMPLE" and frozen.token == "session-1"
    signed = sigv4_headers(frozen, "us-east-1", "POST", "https://h.example/model/m/invoke", b"{}", {"a": "1"})
    assert signed["a"] == "1" and signed["X-Amz-Security-Token"] == "session-1"
    assert signed["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/us-east-1/bedrock/aws4_request" in signed["Authorization"]


async def test_no_aws_credentials_is_a_clear_failure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(ProviderFailure, match="'be': no AWS credentials found in the standard chain"):
        await AwsCredentials("be").frozen()
