"""Google credentials, obtained one way for every kind that calls Google Cloud (`vertex` chat and
embeddings, `gemini` on Vertex AI).

A static bearer token from the environment variable a provider names (`access_token_env`), or
google-auth Application Default Credentials. ADC's refresh is blocking HTTP, so it runs in a worker
thread, through google-auth's urllib3 transport: urllib3 comes with botocore in the `[cloud]` extra,
where `google.auth.transport.requests` would need `requests`, which no extra installs.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from ...errors import ProviderFailure

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


class GoogleToken:
    """ADC credentials, refreshed off the event loop when missing or expired; `project` is the one
    ADC reported (a service account's, or the environment's)."""

    def __init__(self) -> None:
        self._credentials: Any = None
        self.project: str | None = None
        self._lock = asyncio.Lock()

    def _load_and_refresh(self) -> None:
        import google.auth
        import google.auth.transport.urllib3
        import urllib3

        if self._credentials is None:
            self._credentials, self.project = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
        self._credentials.refresh(google.auth.transport.urllib3.Request(urllib3.PoolManager()))  # type: ignore[no-untyped-call]

    async def token(self) -> str:
        async with self._lock:
            creds = self._credentials
            if creds is None or not creds.token or creds.expired:
                try:
                    await asyncio.to_thread(self._load_and_refresh)
                except Exception as exc:  # google.auth raises several unrelated types
                    raise ProviderFailure(
                        "upstream_error", f"google-auth could not get an access token ({type(exc).__name__})"
                    ) from None
            return str(self._credentials.token)


def adc_unless_static(access_token_env: str | None) -> GoogleToken | None:
    """The provider's ADC source, or None when it names a static token variable."""
    return None if access_token_env else GoogleToken()


async def bearer_token(provider: str, access_token_env: str | None, adc: GoogleToken | None) -> str:
    """The token to send: ADC's when the provider has it, else the named variable's value."""
    if adc is not None:
        return await adc.token()
    var = access_token_env or ""
    token = os.environ.get(var)
    if not token:
        raise ProviderFailure("upstream_error", f"provider {provider!r}: environment variable {var} is not set")
    return token
