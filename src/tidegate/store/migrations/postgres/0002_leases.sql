-- Leases (docs/api-operations.md §10): expiry on the database's clock; `generations_running` keeps a sweep to the
-- running records.
-- depends: 0001_initial
CREATE INDEX IF NOT EXISTS generations_running ON generations(owner) WHERE status = 'in_progress';
CREATE TABLE IF NOT EXISTS leases (
    owner TEXT PRIMARY KEY,
    expires_at TIMESTAMPTZ NOT NULL
);
