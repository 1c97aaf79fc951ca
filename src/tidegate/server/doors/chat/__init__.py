"""The chat completions door: `POST /v1/chat/completions` (docs/api.md §3)."""

from ...route import Route
from .handler import chat_completions

ROUTES = (Route("POST", "/v1/chat/completions", chat_completions, generates=True),)
