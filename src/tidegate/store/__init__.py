"""Generation stores behind one interface (`GenerationStore`)."""

from .base import ApiKey, GenerationRecord, GenerationStore, open_store

__all__ = ["ApiKey", "GenerationRecord", "GenerationStore", "open_store"]
