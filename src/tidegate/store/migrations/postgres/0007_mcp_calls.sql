-- Each MCP call of a buffered generation (docs/api-operations.md §13): server, tool, arguments size,
-- duration and error, as one JSON list; never the arguments or the output themselves.
-- depends: 0006_keys
ALTER TABLE generations ADD COLUMN mcp_calls JSONB;
