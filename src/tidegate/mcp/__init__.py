"""MCP tools the gateway runs itself (docs/api-operations.md §13): the request's `mcp` tools, the SSRF guard, the
connection to each server through the official `mcp` SDK, and the model ↔ tool loop that answers
buffered. Doors hand over a parsed request; nothing here knows a door's wire format but the buffered
answer's items."""
