-- Processing of received webhook events: what each one did to the
-- operations ledger, and its delivery to the application.

-- The version (provider-side creation time or object version) of the newest
-- event applied to an operation: an event not newer than it changes nothing.
ALTER TABLE operations ADD COLUMN event_version INTEGER;

-- Append-only history of each event after it was stored (its
-- received_at_ms): what it did to the ledger, every forwarding attempt.
CREATE TABLE inbox_steps (
    id            INTEGER PRIMARY KEY,
    event_seq     INTEGER NOT NULL REFERENCES inbox_events (seq),
    kind          TEXT    NOT NULL CHECK (kind IN ('ledger', 'forward')),
    at_ms         INTEGER NOT NULL,
    duration_ms   INTEGER,
    status_code   INTEGER,
    operation_id  INTEGER REFERENCES operations (id),
    -- For 'ledger' steps: what the event did (see `LedgerEffect`).
    effect        TEXT CHECK (effect IN ('resolved', 'changed', 'confirmed', 'noted', 'stale',
                                         'would_regress', 'conflict', 'no_operation',
                                         'not_applicable')),
    detail        TEXT    NOT NULL
);
CREATE INDEX inbox_steps_event ON inbox_steps (event_seq, id);
-- What the status counts read.
CREATE INDEX inbox_steps_resolved ON inbox_steps (effect) WHERE effect = 'resolved';
CREATE TRIGGER inbox_steps_no_update BEFORE UPDATE ON inbox_steps
BEGIN SELECT RAISE(ABORT, 'inbox steps are append-only'); END;
CREATE TRIGGER inbox_steps_no_delete BEFORE DELETE ON inbox_steps
BEGIN SELECT RAISE(ABORT, 'inbox steps are append-only'); END;

-- The delivery of an event to the application's endpoint: created in the
-- transaction that stores the event, claimed under a lease like an outbox
-- message, every state change a compare-and-set on (id, lease_token).
CREATE TABLE forwards (
    id                 INTEGER PRIMARY KEY,
    event_seq          INTEGER NOT NULL UNIQUE REFERENCES inbox_events (seq),
    state              TEXT    NOT NULL DEFAULT 'pending'
                       CHECK (state IN ('pending', 'done', 'dead')),
    available_at_ms    INTEGER NOT NULL,
    attempts           INTEGER NOT NULL DEFAULT 0,
    previous_delay_ms  INTEGER NOT NULL DEFAULT 0,
    locked_until_ms    INTEGER,
    lease_token        INTEGER,
    last_error         TEXT,
    dead_at_ms         INTEGER,
    created_at_ms      INTEGER NOT NULL,
    updated_at_ms      INTEGER NOT NULL
);
CREATE INDEX forwards_due ON forwards (available_at_ms, id) WHERE state = 'pending';
CREATE INDEX forwards_dead ON forwards (state) WHERE state = 'dead';
