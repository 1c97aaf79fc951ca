-- Keys, budgets and rate limits (docs/api-operations.md §11): a key's settings (budget period, limits, models,
-- expiry, admin, metadata) as one JSON document; the counters admission updates in its transaction
-- (the budget period's start, the two rate limits' GCRA times); one row per live reservation.
-- depends: 0005_routing
ALTER TABLE api_keys ADD COLUMN settings TEXT NOT NULL DEFAULT '{}';
ALTER TABLE api_keys ADD COLUMN period_start REAL NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN rpm_tat REAL NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN tpm_tat REAL NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS reservations (
    generation_id TEXT PRIMARY KEY,
    key_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    amount REAL NOT NULL,
    tokens INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS reservations_key ON reservations(key_id);
