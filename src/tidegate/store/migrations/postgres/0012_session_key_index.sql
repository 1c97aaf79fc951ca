-- A key's agent sessions (GET /api/v1/sessions for a non-admin key, docs/sessions.md) read from an
-- index of that key's session records by time, not from all of that key's records (a partial
-- index: a record without a session adds no entry).
-- depends: 0010_agent_sessions 0011_console
CREATE INDEX IF NOT EXISTS generations_key_session_created ON generations(key_id, created_at)
    WHERE agent_session IS NOT NULL;
