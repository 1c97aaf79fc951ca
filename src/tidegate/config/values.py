"""The one bridge from a TOML table to a declared config struct, and the wording of its errors.

msgspec checks types, bounds, choices and unknown keys from the declarations in `config/model.py`; this
module words its errors like the rest of the loader: the key's dotted path first, then what to fix
(`server.keepalive_s: must be > 0, got -1`). Values are echoed only when they are numbers, booleans
or a choice's short text: a misplaced secret never reaches a message or a log.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, TypeVar

import msgspec
from msgspec import inspect as mi

from ..errors import ConfigError

T = TypeVar("T")

_AT = re.compile(r"^(.*) - at `\$(.*)`$", re.S)
_SEGMENT = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
_WHAT = {
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "bool": "true or false",
    "object": "a table",
    "array": "a list",
}


def convert(where: str, raw: Any, kind: type[T]) -> T:
    """`raw` (a TOML table) as the declared struct `kind`, or a `ConfigError` naming the key."""
    try:
        return msgspec.convert(raw, kind)
    except msgspec.ValidationError as exc:
        raise ConfigError(_message(where, kind, str(exc), raw)) from None


def _message(where: str, kind: type, text: str, raw: Any) -> str:
    found = _AT.match(text)
    body, path = (found.group(1), found.group(2)) if found else (text, "")
    segments: list[str | int] = [
        name if name else (int(index) if index.isdigit() else "...") for name, index in _SEGMENT.findall(path)
    ]
    dotted = where + "".join(f".{s}" if isinstance(s, str) and s != "..." else f"[{s}]" for s in segments)
    value = _value_at(raw, segments)
    if unknown := re.match(r"Object contains unknown field `(.+)`", body):
        return unknown_key(dotted, unknown.group(1), _field_names(_type_at(kind, segments)))
    if missing := re.match(r"Object missing required field `(.+)`", body):
        return f"{dotted}.{missing.group(1)}: required"
    if body.startswith("Invalid enum value"):
        choices = _choices(_type_at(kind, segments))
        return f"{dotted}: must be one of {', '.join(choices)}, got {_shown(value)}"
    if wrong := re.match(r"Expected `([^`]+)`, got `([^`]+)`", body):
        expected = " or ".join(_WHAT.get(t, t) for t in wrong.group(1).split(" | ") if t != "null")
        return f"{dotted}: expected {expected}, got {_WHAT.get(wrong.group(2), wrong.group(2))}"
    if bound := re.match(r"Expected `[^`]+` (.+)$", body):
        limit = re.sub(r"(\d+)\.0\b", r"\1", bound.group(1))  # "> 0.0" reads "> 0"
        return f"{dotted}: must be {limit}, got {_shown(value)}"
    return f"{dotted}: {body}"


def _value_at(raw: Any, segments: list[str | int]) -> Any:
    for segment in segments:
        if isinstance(raw, dict) and isinstance(segment, str) and segment in raw:
            raw = raw[segment]
        elif isinstance(raw, list) and isinstance(segment, int) and segment < len(raw):
            raw = raw[segment]
        else:
            return None
    return raw


def _shown(value: Any) -> str:
    if isinstance(value, bool | int | float):
        return str(value).lower() if isinstance(value, bool) else str(value)
    if isinstance(value, str) and len(value) <= 32 and value.isprintable():
        return repr(value)
    return "another value"


def _unwrapped(info: mi.Type) -> mi.Type:
    """The declared type behind bounds and `| None`: the struct, list or choice a path continues in."""
    while True:
        if isinstance(info, mi.Metadata):
            info = info.type
        elif isinstance(info, mi.UnionType):
            rest = [t for t in info.types if not isinstance(t, mi.NoneType)]
            info = next((t for t in rest if isinstance(t, mi.StructType | mi.LiteralType)), rest[0])
        else:
            return info


def _type_at(kind: type, segments: list[str | int]) -> mi.Type:
    info = _unwrapped(mi.type_info(kind))
    for segment in segments:
        if isinstance(info, mi.StructType) and isinstance(segment, str):
            match = [f.type for f in info.fields if f.encode_name == segment]
            info = _unwrapped(match[0]) if match else info
        elif isinstance(info, mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType):
            info = _unwrapped(info.item_type)
        elif isinstance(info, mi.DictType):
            info = _unwrapped(info.value_type)
    return info


def _field_names(info: mi.Type) -> list[str]:
    return sorted(f.encode_name for f in info.fields) if isinstance(info, mi.StructType) else []


def _choices(info: mi.Type) -> list[str]:
    return [str(v) for v in info.values] if isinstance(info, mi.LiteralType) else []


def unknown_key(where: str, key: str, allowed: list[str]) -> str:
    """`where.key: unknown key (allowed: ...); did you mean `nearest`?` (difflib's closest, if any)."""
    text = f"{where}.{key}: unknown key" + (f" (allowed: {', '.join(allowed)})" if allowed else "")
    nearest = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    return text + (f"; did you mean `{nearest[0]}`?" if nearest else "")


def check_keys(where: str, table: dict[str, Any], allowed: set[str]) -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(unknown_key(where, key, sorted(allowed)))


def table(where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a table, got {type(value).__name__}")
    return dict(value)
