"""Shared field validators for door request bodies: each error names the field and what to send."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidRequest


def require_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise InvalidRequest(f"the request body must be a JSON object, got {type(body).__name__}")
    return body


def opt_bool(body: dict[str, Any], name: str, default: bool = False) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidRequest(f"'{name}' must be a boolean (true or false)")
    return value


def opt_int(body: dict[str, Any], name: str, lo: int | None = None, hi: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"'{name}' must be an integer")
    if lo is not None and value < lo:
        raise InvalidRequest(f"'{name}' must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise InvalidRequest(f"'{name}' must be <= {hi}, got {value}")
    return value


def opt_number(body: dict[str, Any], name: str, lo: float, hi: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRequest(f"'{name}' must be a number")
    if not lo <= value <= hi:
        raise InvalidRequest(f"'{name}' must be between {lo:g} and {hi:g}, got {value}")
    return float(value)


def opt_str(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidRequest(f"'{name}' must be a string")
    return value


def require_str(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if value is None:
        raise InvalidRequest(f"'{name}' is required")
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"'{name}' must be a non-empty string")
    return value


def opt_dict(body: dict[str, Any], name: str) -> dict[str, Any] | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidRequest(f"'{name}' must be an object")
    return value


def opt_list(body: dict[str, Any], name: str) -> list[Any] | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, list):
        raise InvalidRequest(f"'{name}' must be an array")
    return value
