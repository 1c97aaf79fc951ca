"""The embeddings door: `POST /v1/embeddings` (docs/api-operations.md §8)."""

from ...route import Route
from .handler import embeddings

ROUTES = (Route("POST", "/v1/embeddings", embeddings, generates=True),)
