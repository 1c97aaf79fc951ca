-- The console's generation page (docs/console.md): the reasoning apart from the answer, and the stream's
-- pace, [[ms since the request, answer characters, reasoning characters], ...] sampled by the
-- flusher's rounds (JSON text).
-- depends: 0007_mcp_calls
ALTER TABLE generations ADD COLUMN reasoning_text TEXT;
ALTER TABLE generations ADD COLUMN pace TEXT;
