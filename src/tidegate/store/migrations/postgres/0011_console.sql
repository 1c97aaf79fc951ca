-- The console at scale (docs/console-api.md): rollups kept as records end, per bucket width
-- (`res`: 60, 3600, 86400 s) and (model, provider, key), with the time to first token as a histogram
-- over fixed log-spaced bounds (store/console.py, TTFT_BOUNDS_MS: h0..h24); the keys admin API's
-- audit log; logged request and answer bodies, apart from the records and pruned by retention; and
-- the log's keyset indexes, (created_at, id) alone and after each identity column a filter names
-- (written once at insert: the final update never touches them).
-- depends: 0008_reasoning_pace
CREATE TABLE IF NOT EXISTS console_rollup (
    res INTEGER NOT NULL,
    t BIGINT NOT NULL,
    model TEXT NOT NULL,
    provider TEXT NOT NULL,
    key_id TEXT NOT NULL,
    requests BIGINT NOT NULL DEFAULT 0,
    errors BIGINT NOT NULL DEFAULT 0,
    input_tokens BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    cost DOUBLE PRECISION NOT NULL DEFAULT 0,
    h0 BIGINT NOT NULL DEFAULT 0,
    h1 BIGINT NOT NULL DEFAULT 0,
    h2 BIGINT NOT NULL DEFAULT 0,
    h3 BIGINT NOT NULL DEFAULT 0,
    h4 BIGINT NOT NULL DEFAULT 0,
    h5 BIGINT NOT NULL DEFAULT 0,
    h6 BIGINT NOT NULL DEFAULT 0,
    h7 BIGINT NOT NULL DEFAULT 0,
    h8 BIGINT NOT NULL DEFAULT 0,
    h9 BIGINT NOT NULL DEFAULT 0,
    h10 BIGINT NOT NULL DEFAULT 0,
    h11 BIGINT NOT NULL DEFAULT 0,
    h12 BIGINT NOT NULL DEFAULT 0,
    h13 BIGINT NOT NULL DEFAULT 0,
    h14 BIGINT NOT NULL DEFAULT 0,
    h15 BIGINT NOT NULL DEFAULT 0,
    h16 BIGINT NOT NULL DEFAULT 0,
    h17 BIGINT NOT NULL DEFAULT 0,
    h18 BIGINT NOT NULL DEFAULT 0,
    h19 BIGINT NOT NULL DEFAULT 0,
    h20 BIGINT NOT NULL DEFAULT 0,
    h21 BIGINT NOT NULL DEFAULT 0,
    h22 BIGINT NOT NULL DEFAULT 0,
    h23 BIGINT NOT NULL DEFAULT 0,
    h24 BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (res, t, model, provider, key_id)
);
CREATE TABLE IF NOT EXISTS console_audit (
    id TEXT PRIMARY KEY,
    at DOUBLE PRECISION NOT NULL,
    actor_key_id TEXT NOT NULL,
    actor_name TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    detail JSONB NOT NULL
);
CREATE TABLE IF NOT EXISTS generation_bodies (
    generation_id TEXT PRIMARY KEY,
    at DOUBLE PRECISION NOT NULL,
    request JSONB,
    response JSONB
);
CREATE INDEX IF NOT EXISTS generation_bodies_at ON generation_bodies(at);
CREATE INDEX IF NOT EXISTS generations_created_id ON generations(created_at, id);
CREATE INDEX IF NOT EXISTS generations_key_created ON generations(key_id, created_at, id);
CREATE INDEX IF NOT EXISTS generations_model_created ON generations(model, created_at, id);
