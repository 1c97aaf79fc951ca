"""The Responses door `POST /v1/responses` (docs/api.md §5) and the native door
`POST /api/v1/llm/responses` (docs/api.md §6): one request parser, two shapes."""
