"""AWS credentials and SigV4, one way for every `bedrock` call (chat streams, embeddings) and for
`tidegate check-config`'s probe.

Credentials come from botocore's standard chain (environment, profile, SSO, instance metadata...),
which may touch the network, so it is resolved in a worker thread, once per provider; freezing them
may refresh temporary credentials, so that runs in a worker thread too, on every request.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ...errors import ProviderFailure

SIGNING_NAME = "bedrock"


def standard_chain() -> Any:
    """botocore's credentials, or None when the chain finds none (blocking)."""
    import botocore.session

    return botocore.session.get_session().get_credentials()


class AwsCredentials:
    def __init__(self, provider: str) -> None:
        self._provider = provider
        self._credentials: Any = None
        self._lock = asyncio.Lock()

    async def frozen(self) -> Any:
        """The credentials to sign one request with."""
        async with self._lock:
            if self._credentials is None:
                self._credentials = await asyncio.to_thread(standard_chain)
        if self._credentials is None:
            raise ProviderFailure(
                "upstream_error", f"provider {self._provider!r}: no AWS credentials found in the standard chain"
            )
        return await asyncio.to_thread(self._credentials.get_frozen_credentials)


def sigv4_headers(
    credentials: Any, region: str, method: str, url: str, body: bytes, headers: dict[str, str]
) -> dict[str, str]:
    """`headers` plus SigV4's (`authorization`, `x-amz-date`, the session token if any)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    aws = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
    SigV4Auth(credentials, SIGNING_NAME, region).add_auth(aws)
    return dict(aws.headers.items())
