"""Body logging (docs/security.md, "Body logging"): off unless the model's `log_bodies` or the key's
`log_bodies` is on. The request as the door received it and the final answer are stored apart from
the record (store/console.py, `Bodies`) once the answer has been sent, and kept for
`[logging] body_retention_s`. Request headers are never stored; the answer's text comes from the
record, whose upstream bytes were masked of the provider's credentials before anything parsed them
(providers/http/redact.py), and the same masking is applied to the request body, so a provider
credential a client pasted into a prompt is not kept either."""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson

from ..providers.http.redact import MASK
from ..records import ApiKey, GenerationRecord
from ..store.console import Bodies
from .state import AppState

log = logging.getLogger("tidegate.body_log")


def wanted(state: AppState, key: ApiKey, model: str) -> bool:
    m = state.config.models.get(model)
    return key.log_bodies or (m is not None and m.log_bodies)


def _masked(value: Any, secrets: list[bytes]) -> Any:
    if not secrets:
        return value
    text = orjson.dumps(value)
    for secret in secrets:
        text = text.replace(orjson.dumps(secret.decode())[1:-1], MASK)
    return orjson.loads(text)


def provider_secrets(state: AppState) -> list[bytes]:
    """The credentials the configured providers send (their `*_env` variables' values)."""
    import os

    found: set[bytes] = set()
    for p in state.config.providers.values():
        for name in ("api_key_env", "access_token_env"):
            env = getattr(p, name, None)
            value = os.environ.get(env) if env else None
            if value and len(value) >= 8:
                found.add(value.encode())
    return sorted(found, key=len, reverse=True)


async def keep(state: AppState, key: ApiKey, record: GenerationRecord, body: Any) -> None:
    """After the answer: store the generation's request body and final answer when logging is on."""
    if not wanted(state, key, record.model):
        return
    secrets = provider_secrets(state)
    bodies = Bodies(_masked(body, secrets), _masked(record.output_text, secrets))
    try:
        retention = state.config.logging.body_retention_s
        await state.console.save_bodies(record.id, time.time(), bodies, retention)
    except Exception:  # the answer was sent and the record is final: a lost body is only logged
        log.warning("storing generation %s's bodies failed", record.id, exc_info=True)


async def shown(state: AppState, record: GenerationRecord) -> dict[str, Any]:
    """`request_body` / `response_body` for `GET /api/v1/generations/{id}`: null when none was kept
    or past the retention (before the hourly prune removes it)."""
    found = await state.console.bodies(record.id)
    if found is None or record.created_at < time.time() - state.config.logging.body_retention_s:
        return {"request_body": None, "response_body": None}
    return {"request_body": found.request, "response_body": found.response}
