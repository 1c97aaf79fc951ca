"""`Door`: the name of each way in, as every layer writes it (a record's `door`, the cache's key, the
hints a door reads). A foundation: the doors themselves are the packages under `server/doors/`."""

from __future__ import annotations

from enum import StrEnum


class Door(StrEnum):
    CHAT = "chat"  # POST /v1/chat/completions
    RESPONSES = "responses"  # POST /v1/responses
    NATIVE = "native"  # POST /api/v1/llm/responses
    MESSAGES = "messages"  # POST /v1/messages
    GEMINI = "gemini"  # POST /v1beta/models/{model}:generateContent
    EMBEDDINGS = "embeddings"  # POST /v1/embeddings
    IMAGES = "images"  # POST /v1/images/generations
    NATIVE_IMAGES = "native_images"  # POST /api/v1/images/generations
