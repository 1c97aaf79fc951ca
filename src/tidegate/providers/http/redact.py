"""The provider's own credentials never come back out of it (docs/security.md, "Redaction").

An upstream that echoes its request (a debugging proxy, a misconfigured mock, a model asked to
repeat its headers) would hand the gateway's provider key to the client, to the event log and to
the generation record. Every answer body is therefore passed through a `Redactor` made from the
credentials that request carried, before anything parses it: streamed or not, chat, embeddings,
images, errors and passthrough alike, so one place covers every door and every store.

A credential split across two reads is still found: the end of a read that could be the start of
a credential is held back until the next read (or the body's end). A read that ends an SSE event
or a JSON body ends in `\\n` or `}`, a byte no credential contains, so in practice nothing is
held back and nothing is delayed; the check per read is one substring search per credential.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Final

MASK: Final = b"***"
# Header values shorter than this are not credentials worth a search (and would mask common words).
MIN_SECRET_BYTES: Final = 8
# Headers whose value is a credential, whatever the kind: the OpenAI, Anthropic, Azure and Google
# key headers, AWS session tokens, and authorization itself (its scheme word stays).
_CREDENTIAL_HEADERS: Final = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key", "x-amz-security-token"}
)
# Operator-set headers (`providers.NAME.headers`) whose name says they carry a secret.
_SECRET_WORDS: Final = ("key", "token", "secret", "auth", "password")


def credentials(headers: Iterable[tuple[str, str]]) -> list[bytes]:
    """The credential values among a request's headers, longest first (a token that contains
    another is masked whole)."""
    found: set[bytes] = set()
    for name, value in headers:
        lower = name.lower()
        if lower not in _CREDENTIAL_HEADERS and not any(word in lower for word in _SECRET_WORDS):
            continue
        for part in _parts(value):
            if len(part) >= MIN_SECRET_BYTES:
                found.add(part.encode("utf-8"))
    return sorted(found, key=len, reverse=True)


def _parts(value: str) -> list[str]:
    """`Bearer X` and `Basic X` mask X; an AWS SigV4 value masks its signature and its access key
    id; any other value is masked whole."""
    scheme, _, rest = value.strip().partition(" ")
    if not rest:
        return [value.strip()]
    if scheme.upper().startswith("AWS4-"):
        parts = [rest.strip()]
        for field in rest.split(","):
            _, _, item = field.strip().partition("=")
            parts.append(item.split("/", 1)[0])
        return parts
    return [rest.strip()]


@functools.lru_cache(maxsize=256)
def _alphabet(secrets: tuple[bytes, ...]) -> frozenset[int]:
    """The bytes the credentials are made of. Shared by the requests that carry the same ones (an
    API key provider's, every request): a frozenset of ~60 bytes is ~700 bytes, per open stream."""
    return frozenset(b for secret in secrets for b in secret)


class Redactor:
    """Masks the given credentials in a body read by read; `feed` each read, `end` at the end."""

    __slots__ = ("_alphabet", "_held", "_secrets")

    def __init__(self, secrets: list[bytes]) -> None:
        self._secrets = secrets
        self._alphabet = _alphabet(tuple(secrets))
        self._held = b""

    def feed(self, data: bytes) -> bytes:
        """The read with every credential masked, less a tail that may start one (held back)."""
        if self._held:
            data = self._held + data
            self._held = b""
        for secret in self._secrets:
            if secret in data:
                data = data.replace(secret, MASK)
        if not data or data[-1] not in self._alphabet:  # (an event's or a body's end: `\n`, `}`)
            return data
        cut = self._cut(data)
        if cut < len(data):
            self._held = data[cut:]
            return data[:cut]
        return data

    def end(self) -> bytes:
        """What was held back: the body ended, so it cannot become a credential any more."""
        held, self._held = self._held, b""
        return held

    def _cut(self, data: bytes) -> int:
        """Where the longest tail of `data` that is a proper prefix of a credential starts."""
        cut = len(data)
        for secret in self._secrets:
            start = max(0, len(data) - len(secret) + 1)
            first = secret[:1]
            at = data.find(first, start)
            while at != -1 and at < cut:
                if secret.startswith(data[at:]):
                    cut = at
                    break
                at = data.find(first, at + 1)
        return cut
