-- Agent sessions (docs/sessions.md): the record's agent session and its hints, both written once
-- at insert, indexed by session and time for the console's per-session view (a partial index: a
-- record without a session adds no entry); and prompt-cache affinity's routes
-- (gateway/affinity.py), one row per affinity key, expiring with the provider's cache.
-- depends: 0008_reasoning_pace
ALTER TABLE generations ADD COLUMN IF NOT EXISTS agent_session TEXT;
ALTER TABLE generations ADD COLUMN IF NOT EXISTS hints JSONB;
CREATE INDEX IF NOT EXISTS generations_session_created ON generations(agent_session, created_at)
    WHERE agent_session IS NOT NULL;
CREATE TABLE IF NOT EXISTS route_affinity (
    affinity_key TEXT PRIMARY KEY,
    route TEXT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
);
