"""The Gemini door: `POST /v1beta/models/{model}:generateContent` and friends (docs/api-edges.md §17)."""
