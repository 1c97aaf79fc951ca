"""Canonical events ↔ JSON, for the store's event log (replay re-renders from it)."""

from __future__ import annotations

import base64
from dataclasses import fields
from typing import Any

import orjson

from ..events import (
    Event,
    Failed,
    Finished,
    Image,
    PartialImage,
    Progress,
    RawFrame,
    ReasoningDelta,
    Started,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)

_TYPES: dict[str, type[Any]] = {
    "started": Started,
    "raw": RawFrame,
    "text": TextDelta,
    "reasoning": ReasoningDelta,
    "tool_call": ToolCallDelta,
    "finished": Finished,
    "usage": UsageReport,
    "failed": Failed,
    "progress": Progress,
    "partial_image": PartialImage,
    "image": Image,
}
_NAMES = {cls: name for name, cls in _TYPES.items()}
_FIELDS: dict[type, tuple[str, ...]] = {cls: tuple(f.name for f in fields(cls)) for cls in _TYPES.values()}


def encode_event(event: Event) -> bytes:
    if isinstance(event, RawFrame):
        return orjson.dumps({"t": "raw", "data": base64.b64encode(event.data).decode()})
    # a flat dict of the fields (no `asdict` deep copy on the hot path)
    payload = {name: getattr(event, name) for name in _FIELDS[type(event)]}
    payload["t"] = _NAMES[type(event)]
    return orjson.dumps(payload)


def decode_event(data: bytes) -> Event:
    payload = orjson.loads(data)
    name = payload.pop("t")
    if name == "raw":
        return RawFrame(base64.b64decode(payload["data"]))
    cls = _TYPES[name]
    known = {f.name for f in fields(cls)}
    event: Event = cls(**{k: v for k, v in payload.items() if k in known})
    return event
