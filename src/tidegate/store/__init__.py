"""Generation stores behind one interface (`GenerationStore`)."""

from .base import ApiKey, BeginResult, GenerationRecord, GenerationStore, open_store

__all__ = ["ApiKey", "BeginResult", "GenerationRecord", "GenerationStore", "open_store"]
