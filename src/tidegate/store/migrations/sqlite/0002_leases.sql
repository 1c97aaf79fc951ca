-- Leases (docs/api-operations.md §10): each gateway process start renews one; a sweep marks the running records of the
-- owners whose lease expired. `first_rowid`: every record the owner made has a higher rowid (no index on
-- status: it cost each request two WAL frames).
-- depends: 0001_initial
CREATE TABLE IF NOT EXISTS leases (
    owner TEXT PRIMARY KEY,
    first_rowid INTEGER NOT NULL,
    expires_at REAL NOT NULL
);
