"""The access log: one line per request, written when the request ends (`[server] access_log`).

A line is built from what the request already holds once it is over — its method, path (never the
query string), status and duration, and for a generation its record (model, provider, outcome, time
to first token, cost) — so a stream costs nothing per chunk, and nothing is read from the store. No
body, header or key secret is ever in it: the key is named by its name. Values that are not plain
tokens (a path or a key name with spaces or control characters) are JSON-quoted, so one request is
always one line.
"""

from __future__ import annotations

import logging
import re

import orjson

from ..errors import TidegateError
from ..records import GenerationRecord
from .http import ERROR, Request

log = logging.getLogger("tidegate.access")

# ASGI scope entries the app and the doors leave for this line (the scope is the request's own dict)
KEY_NAME = "tidegate.key_name"
RECORD = "tidegate.record"

_TOKEN = re.compile(r"[\w./:@+~-]{1,256}")
_PATH_LIMIT = 256


def _value(text: str) -> str:
    if _TOKEN.fullmatch(text):
        return text
    return orjson.dumps(text[:_PATH_LIMIT]).decode()


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _cost(usd: float) -> str:
    """USD to the 1e-8 (a token of a cheap model costs ~1e-7), without trailing zeros."""
    return f"{usd:.8f}".rstrip("0").rstrip(".") or "0"


def line(req: Request, seconds: float) -> str:
    """`METHOD PATH STATUS [generation= key= model= provider= outcome= ttft_ms= cost=] [error=]
    duration_ms=`; a refused request's outcome is `rejected` (server/rejections.py)."""
    parts = [req.method, _value(req.path), str(req.status or "-")]
    if req.generation_id is not None:
        parts.append(f"generation={req.generation_id}")
    key_name = req.scope.get(KEY_NAME)
    if isinstance(key_name, str):
        parts.append(f"key={_value(key_name)}")
    record = req.scope.get(RECORD)
    if isinstance(record, GenerationRecord) and record.status == "rejected":  # refused: nothing ran
        parts += [f"model={_value(record.model or '-')}", "outcome=rejected"]
    elif isinstance(record, GenerationRecord):
        parts += [
            f"model={_value(record.model)}",
            f"provider={_value(record.provider or '-')}",
            f"outcome={record.status}",
            f"ttft_ms={_ms(record.ttft_ms)}",
            f"cost={_cost(record.cost)}",
        ]
    error = req.scope.get(ERROR)
    if isinstance(error, TidegateError):
        parts.append(f"error={_value(error.error_code)}")
    parts.append(f"duration_ms={seconds * 1000:.1f}")
    return " ".join(parts)


def write(req: Request, seconds: float) -> None:
    if log.isEnabledFor(logging.INFO):
        log.info("%s", line(req, seconds))
