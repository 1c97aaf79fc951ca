-- The exact response cache (docs/api-edges.md §18): one row per entry, keyed by the sha256 of
-- (tenant, door, model, canonical body); `events` is the answer's canonical event stream (JSON
-- lines), served until `expires_at`. `cache_counts` keeps hits, misses, bypasses, bytes served and
-- the cost saved per hour, model and key for GET /api/v1/cache/stats.
-- depends: 0008_reasoning_pace
CREATE TABLE cache_entries (
    entry_key TEXT PRIMARY KEY,
    key_id TEXT NOT NULL,
    model TEXT NOT NULL,
    door TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    generation_id TEXT NOT NULL,
    usage TEXT NOT NULL,
    cost DOUBLE PRECISION NOT NULL,
    events BYTEA NOT NULL
);
CREATE INDEX cache_entries_expires ON cache_entries (expires_at);
CREATE INDEX cache_entries_model ON cache_entries (model);
CREATE INDEX cache_entries_key ON cache_entries (key_id);
CREATE TABLE cache_counts (
    hour DOUBLE PRECISION NOT NULL,
    model TEXT NOT NULL,
    key_id TEXT NOT NULL,
    hits BIGINT NOT NULL DEFAULT 0,
    misses BIGINT NOT NULL DEFAULT 0,
    bypasses BIGINT NOT NULL DEFAULT 0,
    bytes BIGINT NOT NULL DEFAULT 0,
    saved_cost DOUBLE PRECISION NOT NULL DEFAULT 0,
    PRIMARY KEY (hour, model, key_id)
);
