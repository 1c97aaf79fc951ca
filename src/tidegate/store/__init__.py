"""Generation stores behind one interface (`GenerationStore`)."""

from ..records import ApiKey, BeginResult, GenerationRecord
from .base import GenerationStore
from .open import open_store

__all__ = ["ApiKey", "BeginResult", "GenerationRecord", "GenerationStore", "open_store"]
