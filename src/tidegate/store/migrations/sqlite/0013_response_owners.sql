-- Conversation owners (docs/security.md): the upstream response and output item ids a key was
-- handed through a Responses API route, bound to that key until `expires_at`, so that another
-- key's `previous_response_id`, `conversation` or `item_reference` is refused before the upstream.
-- depends: 0012_session_key_index
CREATE TABLE IF NOT EXISTS response_owners (
    id TEXT PRIMARY KEY,
    key_id TEXT NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS response_owners_expires ON response_owners (expires_at);
