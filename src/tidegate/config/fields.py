"""What every table of the configuration declares its keys with: `doc` (a key's description and
bounds) and the bounded types of keys that may be left unset."""

# no `from __future__ import annotations`: msgspec reads these annotations at class creation
from typing import Annotated

from msgspec import Meta

MiB = 1024 * 1024

# bounds for keys that may also be left unset (`X | None`): msgspec bounds the value inside the union
PositiveFloat = Annotated[float, Meta(gt=0)]
PositiveInt = Annotated[int, Meta(gt=0)]
Count = Annotated[int, Meta(ge=0)]
NonNegativeFloat = Annotated[float, Meta(ge=0)]


def doc(text: str, **bounds: float) -> Meta:
    """A key's description (docs, schema) and its bounds (gt, ge, le: validation)."""
    return Meta(description=text, **bounds)  # type: ignore[call-overload,no-any-return]
