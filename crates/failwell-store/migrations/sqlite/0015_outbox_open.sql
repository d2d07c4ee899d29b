-- `outbox_open` (pending messages by creation time) served no statement:
-- the age of the oldest open message is read with the counts, from every
-- pending row. It cost an insertion for every message written.
DROP INDEX outbox_open;
