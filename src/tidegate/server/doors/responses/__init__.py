"""The Responses door `POST /v1/responses` (docs/api.md §5) and the native door
`POST /api/v1/llm/responses` (docs/api.md §6): one request parser, two shapes."""

from ...route import Route
from .handler import responses
from .native import native_responses

ROUTES = (
    Route("POST", "/v1/responses", responses, generates=True),
    Route("POST", "/api/v1/llm/responses", native_responses, generates=True),
)
