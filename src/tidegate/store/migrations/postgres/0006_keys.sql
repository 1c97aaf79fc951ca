-- Keys, budgets and rate limits (docs/api-operations.md §11): a key's settings (budget period, limits, models,
-- expiry, admin, metadata) as one JSON document; the counters admission updates in its transaction
-- (the budget period's start, the two rate limits' GCRA times); one row per live reservation.
-- depends: 0005_routing
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS settings TEXT NOT NULL DEFAULT '{}';
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS period_start DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS rpm_tat DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS tpm_tat DOUBLE PRECISION NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS reservations (
    generation_id TEXT PRIMARY KEY,
    key_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    amount DOUBLE PRECISION NOT NULL,
    tokens INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS reservations_key ON reservations(key_id);
