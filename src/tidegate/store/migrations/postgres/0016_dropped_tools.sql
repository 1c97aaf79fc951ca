-- What the serving route left out of a generation's request (hosted tools: `drop_hosted_tools`,
-- docs/agents.md; Gemini's topK), as X-Tidegate-Dropped named them: a JSON list, NULL when none was.
-- depends: 0015_console_secret
ALTER TABLE generations ADD COLUMN dropped TEXT;
