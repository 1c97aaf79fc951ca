"""The chat completions door: `POST /v1/chat/completions` (docs/api.md §3)."""
