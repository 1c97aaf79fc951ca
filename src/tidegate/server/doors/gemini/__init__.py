"""The Gemini door: `POST /v1beta/models/{model}:generateContent` and friends (docs/api-edges.md §17)."""

from ...route import Route
from .handler import get_model, list_models, model_action

# one route per generating method: each is its own metrics label, and a draining gateway refuses them
ROUTES = (
    Route("POST", "/{version}/models/{model:path}:generateContent", model_action, generates=True),
    Route("POST", "/{version}/models/{model:path}:streamGenerateContent", model_action, generates=True),
    Route("POST", "/{version}/models/{model:path}:{method}", model_action),
    Route("GET", "/v1beta/models", list_models),
    Route("GET", "/{version}/models/{model}", get_model),
)
