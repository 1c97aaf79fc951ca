"""The checks every config section's values go through: each error names the key (`ConfigError`)."""

from __future__ import annotations

from typing import Any

from .errors import ConfigError


def check_keys(where: str, table: dict[str, Any], allowed: set[str]) -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(f"{where}.{key}: unknown key (allowed: {', '.join(sorted(allowed))})")


def typed(where: str, value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    if isinstance(value, bool) and kind is not bool and bool not in (kind if isinstance(kind, tuple) else ()):
        raise ConfigError(f"{where}: expected {what}, got a boolean")
    if not isinstance(value, kind):
        raise ConfigError(f"{where}: expected {what}, got {type(value).__name__}")
    return value


def positive(where: str, value: Any) -> float:
    num = float(typed(where, value, (int, float), "a number"))
    if not num > 0:  # nan too
        raise ConfigError(f"{where}: must be > 0, got {value}")
    return num


def not_negative(where: str, value: Any) -> float:
    num = float(typed(where, value, (int, float), "a number"))
    if not num >= 0:  # nan too
        raise ConfigError(f"{where}: must be >= 0, got {value}")
    return num


def table(where: str, value: Any) -> dict[str, Any]:
    return dict(typed(where, value, dict, "a table"))
