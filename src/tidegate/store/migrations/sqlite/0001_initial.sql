-- The tables of the versions before migrations (IF NOT EXISTS: a database they made takes this as applied).
-- Dropped from databases made before: `generations_status` and `generations_created` (each cost
-- a third B-tree page in every record's first commit, for an hourly prune that now starts from the log
-- batches it deletes).
CREATE TABLE IF NOT EXISTS api_keys (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    secret_hash TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL,
    credits REAL,
    spent REAL NOT NULL DEFAULT 0,
    revoked INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS generations (
    id TEXT PRIMARY KEY,
    key_id TEXT NOT NULL,
    model TEXT NOT NULL,
    door TEXT NOT NULL,
    created_at REAL NOT NULL,
    status TEXT NOT NULL,
    idempotency_key TEXT,
    request_hash TEXT,
    provider TEXT,
    served_model TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    finish_reason TEXT,
    usage TEXT NOT NULL DEFAULT '{}',
    usage_estimated INTEGER NOT NULL DEFAULT 0,
    cost REAL NOT NULL DEFAULT 0,
    output_text TEXT NOT NULL DEFAULT '',
    error TEXT,
    ttft_ms REAL,
    duration_ms REAL,
    owner TEXT NOT NULL DEFAULT ''
);
DROP INDEX IF EXISTS generations_status;
DROP INDEX IF EXISTS generations_created;
CREATE TABLE IF NOT EXISTS instance_starts (
    owner TEXT PRIMARY KEY,
    last_rowid INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS idempotency (
    key_id TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    generation_id TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (key_id, idem_key)
);
CREATE TABLE IF NOT EXISTS generation_log_batches (
    generation_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (generation_id, kind, first_seq)
);
