-- failwell's durable core on SQLite. Times are integer milliseconds since the
-- Unix epoch (columns end in _ms).

-- One row per intent. UNIQUE(idempotency_key) is what makes a replayed
-- request a replay: the second insert fails and the first row answers.
CREATE TABLE operations (
    id                    INTEGER PRIMARY KEY,
    idempotency_key       TEXT    NOT NULL UNIQUE,
    provider              TEXT    NOT NULL,
    operation             TEXT    NOT NULL,
    reference             TEXT,
    payload               TEXT    NOT NULL,
    request_hash          TEXT    NOT NULL,
    status                TEXT    NOT NULL DEFAULT 'pending'
                          CHECK (status IN ('pending', 'succeeded', 'failed', 'unknown')),
    key_group             INTEGER NOT NULL DEFAULT 0,
    provider_key          TEXT    NOT NULL,
    key_first_sent_at_ms  INTEGER,
    attempts              INTEGER NOT NULL DEFAULT 0,
    provider_ref          TEXT,
    response              TEXT,
    last_error            TEXT,
    -- 1 once a call of the current key group may have taken effect (an
    -- ambiguous or interrupted attempt); cleared only by moving to a new key
    -- group, which needs two lookups in a row that found nothing.
    effect_possible       INTEGER NOT NULL DEFAULT 0,
    -- Lookups in a row that found nothing (a resend without a live key
    -- waits for a second one).
    lookup_misses         INTEGER NOT NULL DEFAULT 0,
    reconcile_attempts    INTEGER NOT NULL DEFAULT 0,
    next_reconcile_at_ms  INTEGER,
    created_at_ms         INTEGER NOT NULL,
    updated_at_ms         INTEGER NOT NULL
);
-- A reference identifies one intent at its provider: status lookups find the
-- provider's record by it, so two operations must never share one.
CREATE UNIQUE INDEX operations_reference ON operations (provider, reference) WHERE reference IS NOT NULL;
CREATE INDEX operations_unknown ON operations (next_reconcile_at_ms) WHERE status = 'unknown';
CREATE INDEX operations_status ON operations (status);

-- The delivery work: one message per operation. 'pending' messages are
-- claimed by the relay under a lease; 'dead' ones are dead letters.
CREATE TABLE outbox (
    id                 INTEGER PRIMARY KEY,
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
    updated_at_ms      INTEGER NOT NULL
);
CREATE INDEX outbox_due ON outbox (available_at_ms, id) WHERE state = 'pending';

-- Append-only history of every attempt: a provider call, a status lookup, or
-- an attempt that was due but deliberately not sent ('skipped', see decision).
CREATE TABLE attempts (
    id              INTEGER PRIMARY KEY,
    operation_id    INTEGER NOT NULL REFERENCES operations (id),
    kind            TEXT    NOT NULL CHECK (kind IN ('call', 'lookup', 'skipped')),
    attempt_no      INTEGER NOT NULL,
    provider_key    TEXT,
    started_at_ms   INTEGER NOT NULL,
    duration_ms     INTEGER NOT NULL,
    status_code     INTEGER,
    error_kind      TEXT,
    classification  TEXT CHECK (classification IN ('retryable', 'permanent', 'ambiguous')),
    outcome         TEXT    NOT NULL CHECK (outcome IN ('succeeded', 'failed', 'unknown')),
    decision        TEXT    NOT NULL
);
CREATE INDEX attempts_operation ON attempts (operation_id, id);

CREATE TRIGGER attempts_no_update BEFORE UPDATE ON attempts
BEGIN SELECT RAISE(ABORT, 'attempts is append-only'); END;
CREATE TRIGGER attempts_no_delete BEFORE DELETE ON attempts
BEGIN SELECT RAISE(ABORT, 'attempts is append-only'); END;

-- Every operation gets its delivery message in the same statement, so no
-- code path can record an intent without the work to carry it out.
CREATE TRIGGER operations_outbox AFTER INSERT ON operations
BEGIN
    INSERT INTO outbox (operation_id, available_at_ms, created_at_ms, updated_at_ms)
    VALUES (NEW.id, NEW.created_at_ms, NEW.created_at_ms, NEW.created_at_ms);
END;
