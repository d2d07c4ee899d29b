-- no-transaction
-- Ordering keys, scheduled messages, claims by provider, and outbox ids that
-- are never reused.
--
-- Messages of one ordering key are delivered one at a time, in id order.
-- `AUTOINCREMENT` keeps SQLite from handing out the id of a deleted row
-- (a purged dead letter, a row removed by retention) to a new message:
-- the history names messages by id, so an id must mean one message for
-- good. (PostgreSQL's identity columns never reuse ids.) Adding
-- AUTOINCREMENT needs a new table: rebuilt as in 0004_operator.sql.
PRAGMA foreign_keys = OFF;
BEGIN IMMEDIATE;

-- The trigger that creates each operation's message names the table:
-- dropped while the table is replaced, then created again.
DROP TRIGGER operations_outbox;

CREATE TABLE outbox_rebuilt (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    operation_id       INTEGER NOT NULL UNIQUE REFERENCES operations (id),
    state              TEXT    NOT NULL DEFAULT 'pending'
                       CHECK (state IN ('pending', 'done', 'dead')),
    available_at_ms    INTEGER NOT NULL,
    attempts           INTEGER NOT NULL DEFAULT 0,
    previous_delay_ms  INTEGER NOT NULL DEFAULT 0,
    locked_until_ms    INTEGER,
    lease_token        INTEGER,
    in_flight          INTEGER NOT NULL DEFAULT 0,
    last_error         TEXT,
    dead_at_ms         INTEGER,
    created_at_ms      INTEGER NOT NULL,
    updated_at_ms      INTEGER NOT NULL,
    changed_by         TEXT    NOT NULL DEFAULT 'api',
    ordering_key       TEXT,
    -- The message's provider, copied from its operation: a claim takes
    -- each available provider's due messages in turns, and leaves those of
    -- a provider whose breaker is open or which is paused where they are.
    provider           TEXT    NOT NULL
);
INSERT INTO outbox_rebuilt (id, operation_id, state, available_at_ms, attempts, previous_delay_ms,
    locked_until_ms, lease_token, in_flight, last_error, dead_at_ms, created_at_ms, updated_at_ms, changed_by,
    provider)
SELECT x.id, x.operation_id, x.state, x.available_at_ms, x.attempts, x.previous_delay_ms,
    x.locked_until_ms, x.lease_token, x.in_flight, x.last_error, x.dead_at_ms, x.created_at_ms, x.updated_at_ms,
    x.changed_by, o.provider
FROM outbox x JOIN operations o ON o.id = x.operation_id;
DROP TABLE outbox;
ALTER TABLE outbox_rebuilt RENAME TO outbox;
CREATE INDEX outbox_due ON outbox (available_at_ms, id) WHERE state = 'pending';
CREATE INDEX outbox_open ON outbox (created_at_ms) WHERE state = 'pending';
CREATE INDEX outbox_dead ON outbox (dead_at_ms) WHERE state = 'dead';
CREATE INDEX outbox_ordering ON outbox (ordering_key, id) WHERE state = 'pending' AND ordering_key IS NOT NULL;
CREATE INDEX outbox_provider_due ON outbox (provider, available_at_ms, id) WHERE state = 'pending';
CREATE TRIGGER operations_outbox AFTER INSERT ON operations
BEGIN
    INSERT INTO outbox (operation_id, provider, available_at_ms, created_at_ms, updated_at_ms)
    VALUES (NEW.id, NEW.provider, NEW.created_at_ms, NEW.created_at_ms, NEW.created_at_ms);
END;
CREATE TRIGGER outbox_history_state AFTER UPDATE OF state ON outbox
WHEN OLD.state IS NOT NEW.state
BEGIN
    INSERT INTO history (subject, subject_id, operation_id, at_ms, actor, change, detail)
    VALUES ('message', NEW.id, NEW.operation_id, NEW.updated_at_ms, NEW.changed_by,
            OLD.state || ' -> ' || NEW.state, NEW.last_error);
END;
CREATE TRIGGER outbox_history_purge AFTER DELETE ON outbox
BEGIN
    INSERT INTO history (subject, subject_id, operation_id, at_ms, actor, change, detail)
    VALUES ('message', OLD.id, OLD.operation_id, OLD.updated_at_ms, OLD.changed_by, 'purged', OLD.last_error);
END;

-- A message enqueued with a later `available_at`: its delivery (deadline,
-- retry budget) counts from then, not from when it was written.
ALTER TABLE operations ADD COLUMN not_before_ms INTEGER;

COMMIT;
PRAGMA foreign_keys = ON;
