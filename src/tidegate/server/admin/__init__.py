"""Operator pages and admin APIs: the console, keys, routes and the generations API."""

from ..route import ANY, Route
from . import audit, cache, generations, keys, routes, sessions, stats

ROUTES = (
    Route("GET", "/api/v1/generations", generations.list_generations),
    Route("GET", "/api/v1/generations/{id}", generations.get_generation),
    Route("POST", "/api/v1/generations/{id}/cancel", generations.cancel_generation),
    Route("GET", "/api/v1/routes", routes.list_routes),
    Route("GET", "/api/v1/sessions", sessions.list_sessions),
    Route("GET", "/api/v1/stats/series", stats.stats_series),
    Route("GET", "/api/v1/audit", audit.list_audit),
    Route(ANY, "/api/v1/cache", cache.purge),
    Route("GET", "/api/v1/cache/stats", cache.stats),
    # the keys admin API: one handler per path, which answers its methods (docs/api-operations.md §11)
    Route(ANY, "/api/v1/keys", keys.keys_collection),
    Route(ANY, "/api/v1/keys/{id}", keys.key_item),
    Route("POST", "/api/v1/keys/{id}/credits", keys.key_credits),
    Route("GET", "/api/v1/usage", keys.usage_report),
)
