-- The column PostgreSQL's relay marks when an attempt's result settled its
-- message and operation without writing their history rows (see
-- migrations/postgres/0017_history_from_attempts.sql). On SQLite the
-- history triggers still write those rows, so it stays NULL; an operation's
-- history reads it on every store.
ALTER TABLE attempts ADD COLUMN settled_from TEXT
    CHECK (settled_from IN ('pending', 'succeeded', 'failed', 'unknown', 'needs_human'));
