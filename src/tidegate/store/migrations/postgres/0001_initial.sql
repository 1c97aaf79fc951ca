-- The tables of the versions before migrations (IF NOT EXISTS: a database they made takes this as applied).
CREATE TABLE IF NOT EXISTS api_keys (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    secret_hash TEXT NOT NULL UNIQUE,
    created_at DOUBLE PRECISION NOT NULL,
    credits DOUBLE PRECISION,
    spent DOUBLE PRECISION NOT NULL DEFAULT 0,
    revoked BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE TABLE IF NOT EXISTS generations (
    id TEXT PRIMARY KEY,
    key_id TEXT NOT NULL,
    model TEXT NOT NULL,
    door TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    status TEXT NOT NULL,
    idempotency_key TEXT,
    request_hash TEXT,
    provider TEXT,
    served_model TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    finish_reason TEXT,
    usage JSONB NOT NULL DEFAULT '{}',
    usage_estimated BOOLEAN NOT NULL DEFAULT FALSE,
    cost DOUBLE PRECISION NOT NULL DEFAULT 0,
    output_text TEXT NOT NULL DEFAULT '',
    error JSONB,
    ttft_ms DOUBLE PRECISION,
    duration_ms DOUBLE PRECISION,
    owner TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS generations_owner_status ON generations(owner, status);
CREATE INDEX IF NOT EXISTS generations_created ON generations(created_at);
CREATE TABLE IF NOT EXISTS idempotency (
    key_id TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    generation_id TEXT NOT NULL,
    request_hash TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (key_id, idem_key)
);
CREATE INDEX IF NOT EXISTS idempotency_created ON idempotency(created_at);
CREATE TABLE IF NOT EXISTS generation_log (
    generation_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    seq BIGINT NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (generation_id, kind, seq)
);
CREATE TABLE IF NOT EXISTS generation_log_batches (
    generation_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    first_seq BIGINT NOT NULL,
    last_seq BIGINT NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (generation_id, kind, first_seq)
);
