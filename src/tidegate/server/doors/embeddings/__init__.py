"""The embeddings door: `POST /v1/embeddings` (docs/api-operations.md §8)."""
