"""The Anthropic Messages door: `POST /v1/messages` and `/v1/messages/count_tokens` (docs/api-edges.md §17)."""
