-- The response cache's ceiling (`[cache] max_total_bytes`, docs/api-edges.md §18): each entry's
-- size and last use, an index to find the least recently used first, and the entries' total in a
-- one-row table kept by the statements that add and remove entries (a sum over every entry per
-- write would read the whole table).
-- depends: 0013_response_owners
ALTER TABLE cache_entries ADD COLUMN accessed_at REAL NOT NULL DEFAULT 0;
ALTER TABLE cache_entries ADD COLUMN size INTEGER NOT NULL DEFAULT 0;
UPDATE cache_entries SET accessed_at = created_at, size = length(events);
CREATE INDEX IF NOT EXISTS cache_entries_accessed ON cache_entries (accessed_at);
CREATE TABLE IF NOT EXISTS cache_total (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    bytes INTEGER NOT NULL
);
INSERT INTO cache_total (id, bytes) SELECT 0, COALESCE(SUM(size), 0) FROM cache_entries;
