-- no-transaction
-- What operators need: who changed what and when (the history), the
-- `needs_human` status, dead letters acknowledged, and the reports of the
-- scheduled comparisons with the provider.
--
-- Adding a status changes the operations table's CHECK constraint, which
-- SQLite cannot alter: the table is rebuilt as SQLite's documentation
-- prescribes (foreign keys off, new table, copy, drop, rename, indexes and
-- triggers again, foreign keys checked), all in one transaction.
PRAGMA foreign_keys = OFF;
BEGIN IMMEDIATE;

CREATE TABLE operations_rebuilt (
    id                    INTEGER PRIMARY KEY,
    idempotency_key       TEXT    NOT NULL UNIQUE,
    provider              TEXT    NOT NULL,
    operation             TEXT    NOT NULL,
    reference             TEXT,
    payload               TEXT    NOT NULL,
    request_hash          TEXT    NOT NULL,
    -- needs_human: failwell cannot find the outcome out (no lookup, no
    -- reference, or reconciliation declared `none`) and will not retry.
    status                TEXT    NOT NULL DEFAULT 'pending'
                          CHECK (status IN ('pending', 'succeeded', 'failed', 'unknown', 'needs_human')),
    key_group             INTEGER NOT NULL DEFAULT 0,
    provider_key          TEXT    NOT NULL,
    key_first_sent_at_ms  INTEGER,
    attempts              INTEGER NOT NULL DEFAULT 0,
    provider_ref          TEXT,
    response              TEXT,
    last_error            TEXT,
    effect_possible       INTEGER NOT NULL DEFAULT 0,
    lookup_misses         INTEGER NOT NULL DEFAULT 0,
    reconcile_attempts    INTEGER NOT NULL DEFAULT 0,
    next_reconcile_at_ms  INTEGER,
    created_at_ms         INTEGER NOT NULL,
    updated_at_ms         INTEGER NOT NULL,
    event_version         INTEGER,
    -- The component that made the row's latest change: 'api', 'app',
    -- 'relay', 'reconciler', 'webhook' or 'operator:<channel>'. Every
    -- statement that changes a state sets it; the triggers below copy it
    -- into the history, so no code path changes a state without a history
    -- row.
    changed_by            TEXT    NOT NULL DEFAULT 'api',
    -- An operator's replay of a dead letter starts its delivery again: the
    -- deadline and attempts count from then (NULL: from created_at_ms).
    replayed_at_ms        INTEGER
);
INSERT INTO operations_rebuilt (id, idempotency_key, provider, operation, reference, payload, request_hash,
    status, key_group, provider_key, key_first_sent_at_ms, attempts, provider_ref, response, last_error,
    effect_possible, lookup_misses, reconcile_attempts, next_reconcile_at_ms, created_at_ms, updated_at_ms,
    event_version)
SELECT id, idempotency_key, provider, operation, reference, payload, request_hash,
    status, key_group, provider_key, key_first_sent_at_ms, attempts, provider_ref, response, last_error,
    effect_possible, lookup_misses, reconcile_attempts, next_reconcile_at_ms, created_at_ms, updated_at_ms,
    event_version
FROM operations;
DROP TABLE operations;
ALTER TABLE operations_rebuilt RENAME TO operations;
CREATE UNIQUE INDEX operations_reference ON operations (provider, reference) WHERE reference IS NOT NULL;
CREATE INDEX operations_unknown ON operations (next_reconcile_at_ms) WHERE status = 'unknown';
CREATE INDEX operations_status ON operations (status);
CREATE TRIGGER operations_outbox AFTER INSERT ON operations
BEGIN
    INSERT INTO outbox (operation_id, available_at_ms, created_at_ms, updated_at_ms)
    VALUES (NEW.id, NEW.created_at_ms, NEW.created_at_ms, NEW.created_at_ms);
END;

ALTER TABLE outbox ADD COLUMN changed_by TEXT NOT NULL DEFAULT 'api';
ALTER TABLE forwards ADD COLUMN changed_by TEXT NOT NULL DEFAULT 'webhook';

-- Append-only history of state changes of operations, their outbox
-- messages and webhook forwards. `change` is `created`, `<from> -> <to>`
-- or `purged`; `detail` the error or reason at that moment.
CREATE TABLE history (
    id            INTEGER PRIMARY KEY,
    subject       TEXT    NOT NULL CHECK (subject IN ('operation', 'message', 'forward')),
    subject_id    INTEGER NOT NULL,
    operation_id  INTEGER,
    event_seq     INTEGER,
    at_ms         INTEGER NOT NULL,
    actor         TEXT    NOT NULL,
    change        TEXT    NOT NULL,
    detail        TEXT
);
CREATE INDEX history_operation ON history (operation_id, id) WHERE operation_id IS NOT NULL;
CREATE INDEX history_event ON history (event_seq, id) WHERE event_seq IS NOT NULL;
CREATE TRIGGER history_no_update BEFORE UPDATE ON history
BEGIN SELECT RAISE(ABORT, 'history is append-only'); END;
CREATE TRIGGER history_no_delete BEFORE DELETE ON history
BEGIN SELECT RAISE(ABORT, 'history is append-only'); END;

CREATE TRIGGER operations_history_insert AFTER INSERT ON operations
BEGIN
    INSERT INTO history (subject, subject_id, operation_id, at_ms, actor, change)
    VALUES ('operation', NEW.id, NEW.id, NEW.created_at_ms, NEW.changed_by, 'created');
END;
CREATE TRIGGER operations_history_status AFTER UPDATE OF status ON operations
WHEN OLD.status IS NOT NEW.status
BEGIN
    INSERT INTO history (subject, subject_id, operation_id, at_ms, actor, change, detail)
    VALUES ('operation', NEW.id, NEW.id, NEW.updated_at_ms, NEW.changed_by,
            OLD.status || ' -> ' || NEW.status, NEW.last_error);
END;
CREATE TRIGGER outbox_history_state AFTER UPDATE OF state ON outbox
WHEN OLD.state IS NOT NEW.state
BEGIN
    INSERT INTO history (subject, subject_id, operation_id, at_ms, actor, change, detail)
    VALUES ('message', NEW.id, NEW.operation_id, NEW.updated_at_ms, NEW.changed_by,
            OLD.state || ' -> ' || NEW.state, NEW.last_error);
END;
CREATE TRIGGER forwards_history_state AFTER UPDATE OF state ON forwards
WHEN OLD.state IS NOT NEW.state
BEGIN
    INSERT INTO history (subject, subject_id, event_seq, at_ms, actor, change, detail)
    VALUES ('forward', NEW.id, NEW.event_seq, NEW.updated_at_ms, NEW.changed_by,
            OLD.state || ' -> ' || NEW.state, NEW.last_error);
END;
-- A purge removes a dead letter for good; the history keeps that it did.
CREATE TRIGGER outbox_history_purge AFTER DELETE ON outbox
BEGIN
    INSERT INTO history (subject, subject_id, operation_id, at_ms, actor, change, detail)
    VALUES ('message', OLD.id, OLD.operation_id, OLD.updated_at_ms, OLD.changed_by, 'purged', OLD.last_error);
END;
CREATE TRIGGER forwards_history_purge AFTER DELETE ON forwards
BEGIN
    INSERT INTO history (subject, subject_id, event_seq, at_ms, actor, change, detail)
    VALUES ('forward', OLD.id, OLD.event_seq, OLD.updated_at_ms, OLD.changed_by, 'purged', OLD.last_error);
END;

-- What the four numbers read: calls in a time window, open messages, dead
-- letters since a moment.
CREATE INDEX attempts_started ON attempts (started_at_ms) WHERE kind = 'call';
CREATE INDEX outbox_open ON outbox (created_at_ms) WHERE state = 'pending';
CREATE INDEX outbox_dead ON outbox (dead_at_ms) WHERE state = 'dead';

-- Each "I have looked at the dead letters" (`failwell dlq ack`): dead
-- letters since the latest one are the ones nobody has seen.
CREATE TABLE dead_letter_acks (
    id     INTEGER PRIMARY KEY,
    at_ms  INTEGER NOT NULL,
    actor  TEXT    NOT NULL
);

-- Alerts failwell raised and has not resolved yet (kind, e.g.
-- 'oldest_open_age', and the integration), so a restarted process still
-- sends the resolve, and never raises one twice.
CREATE TABLE alerts_firing (
    kind      TEXT    NOT NULL,
    subject   TEXT    NOT NULL,
    since_ms  INTEGER NOT NULL,
    PRIMARY KEY (kind, subject)
);

-- One scheduled or operator-started comparison of our operations with the
-- provider's records over a time window, and what it found.
CREATE TABLE reconciliation_reports (
    id              INTEGER PRIMARY KEY,
    provider        TEXT    NOT NULL,
    window_from_ms  INTEGER NOT NULL,
    window_to_ms    INTEGER NOT NULL,
    started_at_ms   INTEGER NOT NULL,
    finished_at_ms  INTEGER NOT NULL,
    actor           TEXT    NOT NULL,
    ours            INTEGER NOT NULL,
    theirs          INTEGER NOT NULL,
    discrepancies   INTEGER NOT NULL,
    -- The whole report as JSON and as readable text.
    report          TEXT    NOT NULL,
    text            TEXT    NOT NULL,
    -- When the alert sink took the report, and the last error sending it.
    alerted_at_ms   INTEGER,
    alert_error     TEXT
);
CREATE TABLE discrepancies (
    id            INTEGER PRIMARY KEY,
    report_id     INTEGER NOT NULL REFERENCES reconciliation_reports (id),
    provider      TEXT    NOT NULL,
    kind          TEXT    NOT NULL CHECK (kind IN ('missing_at_provider', 'missing_here', 'amount_mismatch',
                                                   'status_mismatch', 'duplicate_at_provider')),
    reference     TEXT,
    operation_id  INTEGER REFERENCES operations (id),
    provider_ref  TEXT,
    detail        TEXT    NOT NULL
);
CREATE INDEX reconciliation_reports_provider ON reconciliation_reports (provider, id);
CREATE INDEX discrepancies_report ON discrepancies (report_id);
CREATE INDEX discrepancies_operation ON discrepancies (operation_id) WHERE operation_id IS NOT NULL;

COMMIT;
PRAGMA foreign_keys = ON;
