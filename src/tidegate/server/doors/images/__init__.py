"""The images door: `POST /v1/images/generations` (docs/api-operations.md §8)."""

from ...route import Route
from .handler import native_images, openai_images

ROUTES = (
    Route("POST", "/v1/images/generations", openai_images, generates=True),
    Route("POST", "/api/v1/images/generations", native_images, generates=True),
)
