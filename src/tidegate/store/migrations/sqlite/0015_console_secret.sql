-- The web console's session-signing secret (server/admin/console.py): 32 random bytes, written
-- once by the first gateway that starts on this store and read by every other instance and
-- restart, so a console session outlives the process that issued it. One row.
-- depends: 0014_cache_ceiling
CREATE TABLE IF NOT EXISTS console_secret (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    secret BLOB NOT NULL
);
