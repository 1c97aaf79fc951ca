"""The Anthropic Messages door: `POST /v1/messages` and `/v1/messages/count_tokens` (docs/api-edges.md §17)."""

from ...route import Route
from .handler import count_message_tokens, messages

ROUTES = (
    Route("POST", "/v1/messages", messages, generates=True),
    Route("POST", "/v1/messages/count_tokens", count_message_tokens),
)
