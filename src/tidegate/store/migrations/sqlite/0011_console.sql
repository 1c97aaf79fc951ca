-- The console at scale (docs/console-api.md): rollups kept as records end, per bucket width
-- (`res`: 60, 3600, 86400 s) and (model, provider, key), with the time to first token as a histogram
-- over fixed log-spaced bounds (store/console.py, TTFT_BOUNDS_MS: h0..h24); the keys admin API's
-- audit log; logged request and answer bodies, apart from the records and pruned by retention; and
-- the log's keyset indexes, (created_at, id) alone and after each identity column a filter names
-- (written once at insert: the final update never touches them).
-- depends: 0008_reasoning_pace
CREATE TABLE IF NOT EXISTS console_rollup (
    res INTEGER NOT NULL,
    t INTEGER NOT NULL,
    model TEXT NOT NULL,
    provider TEXT NOT NULL,
    key_id TEXT NOT NULL,
    requests INTEGER NOT NULL DEFAULT 0,
    errors INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cost REAL NOT NULL DEFAULT 0,
    h0 INTEGER NOT NULL DEFAULT 0,
    h1 INTEGER NOT NULL DEFAULT 0,
    h2 INTEGER NOT NULL DEFAULT 0,
    h3 INTEGER NOT NULL DEFAULT 0,
    h4 INTEGER NOT NULL DEFAULT 0,
    h5 INTEGER NOT NULL DEFAULT 0,
    h6 INTEGER NOT NULL DEFAULT 0,
    h7 INTEGER NOT NULL DEFAULT 0,
    h8 INTEGER NOT NULL DEFAULT 0,
    h9 INTEGER NOT NULL DEFAULT 0,
    h10 INTEGER NOT NULL DEFAULT 0,
    h11 INTEGER NOT NULL DEFAULT 0,
    h12 INTEGER NOT NULL DEFAULT 0,
    h13 INTEGER NOT NULL DEFAULT 0,
    h14 INTEGER NOT NULL DEFAULT 0,
    h15 INTEGER NOT NULL DEFAULT 0,
    h16 INTEGER NOT NULL DEFAULT 0,
    h17 INTEGER NOT NULL DEFAULT 0,
    h18 INTEGER NOT NULL DEFAULT 0,
    h19 INTEGER NOT NULL DEFAULT 0,
    h20 INTEGER NOT NULL DEFAULT 0,
    h21 INTEGER NOT NULL DEFAULT 0,
    h22 INTEGER NOT NULL DEFAULT 0,
    h23 INTEGER NOT NULL DEFAULT 0,
    h24 INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (res, t, model, provider, key_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS console_audit (
    id TEXT PRIMARY KEY,
    at REAL NOT NULL,
    actor_key_id TEXT NOT NULL,
    actor_name TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS generation_bodies (
    generation_id TEXT PRIMARY KEY,
    at REAL NOT NULL,
    request TEXT,
    response TEXT
);
CREATE INDEX IF NOT EXISTS generation_bodies_at ON generation_bodies(at);
CREATE INDEX IF NOT EXISTS generations_created_id ON generations(created_at, id);
CREATE INDEX IF NOT EXISTS generations_key_created ON generations(key_id, created_at, id);
CREATE INDEX IF NOT EXISTS generations_model_created ON generations(model, created_at, id);
