"""Generation stores behind one interface (`GenerationStore`)."""

from .base import ApiKey, BeginResult, GenerationRecord, GenerationStore
from .open import open_store

__all__ = ["ApiKey", "BeginResult", "GenerationRecord", "GenerationStore", "open_store"]
