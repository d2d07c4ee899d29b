-- An operation's own update when its delivery settles (`pending ->
-- succeeded`) changes its status and its answer, never its key, reference,
-- provider or creation time. With no index naming `status` and room left
-- on its page, that new row version is a HOT update: no index is touched
-- (it was 5 index insertions per delivered message, and the largest part
-- of the relay's batch statement). So:
-- - operations that wait for a lookup or a person are found through
--   `unsettled`, a column PostgreSQL computes from the status: it is false
--   before and after a delivery settles, so that update does not change it;
-- - reconciliation finds its due lookups through `next_reconcile_at_ms`
--   (set only while a lookup is scheduled, NULL before and after);
-- - the counts by status read the table once (`failwell status`);
-- - half of each page is kept free for the settled row versions (the
--   table takes up to twice the room of its live rows).
-- Adding the column rewrites the table once, under an exclusive lock.
ALTER TABLE operations
    ADD COLUMN unsettled boolean GENERATED ALWAYS AS (status IN ('unknown', 'needs_human')) STORED;
DROP INDEX operations_status;
DROP INDEX operations_unknown;
CREATE INDEX operations_unsettled ON operations (provider) WHERE unsettled;
CREATE INDEX operations_reconcile ON operations (next_reconcile_at_ms) WHERE next_reconcile_at_ms IS NOT NULL;
ALTER TABLE operations SET (fillfactor = 50);
