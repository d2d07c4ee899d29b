-- What operators need: who changed what and when (the history), dead
-- letters acknowledged, and the reports of the scheduled comparisons with
-- the provider.

-- The component that made a row's latest change: 'api', 'app', 'relay',
-- 'reconciler', 'webhook', 'forwarder' or 'operator:<channel>'. Every
-- statement that changes a state sets it; the triggers below copy it into
-- the history, so no code path can change a state without a history row.
ALTER TABLE operations ADD COLUMN changed_by TEXT NOT NULL DEFAULT 'api';
ALTER TABLE outbox ADD COLUMN changed_by TEXT NOT NULL DEFAULT 'api';
ALTER TABLE forwards ADD COLUMN changed_by TEXT NOT NULL DEFAULT 'webhook';
-- An operator's replay of a dead letter starts its delivery again: the
-- deadline and attempts count from then (NULL: from created_at_ms).
ALTER TABLE operations ADD COLUMN replayed_at_ms INTEGER;

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
CREATE INDEX discrepancies_report ON discrepancies (report_id);
CREATE INDEX discrepancies_operation ON discrepancies (operation_id) WHERE operation_id IS NOT NULL;
