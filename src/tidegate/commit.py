"""What the relay tells a door when the response starts (`Committed`), and the routes that failed
before it (`RouteFailure`): foundation types, so renderers and doors need not import the relay."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RouteFailure:
    """A route that failed before the response started (gateway/fallback.py)."""

    provider: str
    code: str
    message: str
    status: int = 0
    retry_after: float | None = None


@dataclass(frozen=True, slots=True)
class Committed:
    """The response starts now: the route that serves and how many were tried."""

    provider: str
    served_model: str
    attempts: int
    failed_routes: tuple[RouteFailure, ...] = ()
    region: str | None = None  # the provider's configured region (X-Served-Region)
    dropped: tuple[str, ...] = ()  # hosted tools this route left out (`drop_hosted_tools`: X-Tidegate-Dropped)
