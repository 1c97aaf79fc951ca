"""Every upstream error text shown to a client goes through one sanitiser (transport.sanitize)."""

from __future__ import annotations

import orjson

from tidegate.providers.embeddings import upstream_message
from tidegate.providers.http.transport import retry_after_seconds


def test_embedding_error_text_is_sanitised() -> None:
    body = orjson.dumps({"error": {"message": "bad key sk-live-abcdef123456 \x1b[31m" + "x" * 1000}})
    text = upstream_message(body)
    assert "sk-live-abcdef123456" not in text and "\x1b" not in text
    assert len(text) <= 300
    google = orjson.dumps([{"error": {"code": 429, "message": "Quota exceeded", "status": "RESOURCE_EXHAUSTED"}}])
    assert upstream_message(google) == "Quota exceeded"


def test_retry_after_forms() -> None:
    assert retry_after_seconds({"retry-after": "3"}) == 3.0
    assert retry_after_seconds({"retry-after-ms": "1500"}) == 1.5
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None
