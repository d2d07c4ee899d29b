-- failwell's store on MySQL 8.0+ and MariaDB 10.6+: the tables, checks and
-- triggers of the PostgreSQL store (migrations/postgres), in SQL both
-- servers accept. Text compares as bytes (utf8mb4_bin), so keys that
-- differ only in case are two keys; but, as in every MySQL and MariaDB
-- collation both accept, trailing spaces are ignored: `ref-1 ` and `ref-1`
-- are one reference. Free text is LONGTEXT, as long as PostgreSQL's text.
-- Times are milliseconds since 1970.

CREATE TABLE operations (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    idempotency_key VARCHAR(255) NOT NULL,
    provider VARCHAR(255) NOT NULL,
    operation VARCHAR(255) NOT NULL,
    reference VARCHAR(255) NULL,
    payload MEDIUMTEXT NOT NULL,
    request_hash VARCHAR(64) NOT NULL,
    status VARCHAR(16) NOT NULL DEFAULT 'pending',
    key_group BIGINT NOT NULL DEFAULT 0,
    provider_key VARCHAR(64) NOT NULL,
    key_first_sent_at_ms BIGINT NULL,
    attempts BIGINT NOT NULL DEFAULT 0,
    provider_ref LONGTEXT NULL,
    response LONGTEXT NULL,
    last_error LONGTEXT NULL,
    effect_possible BIGINT NOT NULL DEFAULT 0,
    lookup_misses BIGINT NOT NULL DEFAULT 0,
    reconcile_attempts BIGINT NOT NULL DEFAULT 0,
    next_reconcile_at_ms BIGINT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    event_version BIGINT NULL,
    changed_by VARCHAR(32) NOT NULL DEFAULT 'api',
    replayed_at_ms BIGINT NULL,
    not_before_ms BIGINT NULL,
    CONSTRAINT operations_idempotency_key UNIQUE (idempotency_key),
    CONSTRAINT operations_reference UNIQUE (provider, reference),
    CONSTRAINT operations_status_check CHECK (status IN ('pending', 'succeeded', 'failed', 'unknown', 'needs_human')),
    CONSTRAINT operations_reference_not_blank CHECK (TRIM(reference) <> ''),
    CONSTRAINT operations_numbers_in_range CHECK (attempts BETWEEN 0 AND 2147483647
        AND reconcile_attempts BETWEEN 0 AND 2147483647 AND lookup_misses BETWEEN 0 AND 2147483647
        AND effect_possible IN (0, 1) AND key_group BETWEEN 0 AND 2147483647),
    INDEX operations_created (provider, created_at_ms),
    INDEX operations_reconcile (next_reconcile_at_ms),
    INDEX operations_unsettled (status, provider)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE outbox (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    operation_id BIGINT NOT NULL,
    provider VARCHAR(255) NOT NULL,
    state VARCHAR(16) NOT NULL DEFAULT 'pending',
    available_at_ms BIGINT NOT NULL,
    attempts BIGINT NOT NULL DEFAULT 0,
    previous_delay_ms BIGINT NOT NULL DEFAULT 0,
    locked_until_ms BIGINT NULL,
    lease_token BIGINT NULL,
    in_flight BIGINT NOT NULL DEFAULT 0,
    last_error LONGTEXT NULL,
    dead_at_ms BIGINT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    changed_by VARCHAR(32) NOT NULL DEFAULT 'api',
    ordering_key VARCHAR(255) NULL,
    CONSTRAINT outbox_operation UNIQUE (operation_id),
    CONSTRAINT outbox_state_check CHECK (state IN ('pending', 'done', 'dead')),
    CONSTRAINT outbox_numbers_in_range CHECK (attempts BETWEEN 0 AND 2147483647 AND previous_delay_ms >= 0
        AND in_flight IN (0, 1) AND updated_at_ms >= 0),
    INDEX outbox_due (state, available_at_ms, id),
    INDEX outbox_provider_due (state, provider, available_at_ms, id),
    INDEX outbox_ordering (ordering_key, state, id),
    INDEX outbox_dead (state, dead_at_ms),
    INDEX outbox_open (state, created_at_ms)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE attempts (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    operation_id BIGINT NOT NULL,
    kind VARCHAR(16) NOT NULL,
    attempt_no BIGINT NOT NULL,
    provider_key VARCHAR(64) NULL,
    started_at_ms BIGINT NOT NULL,
    duration_ms BIGINT NOT NULL,
    status_code BIGINT NULL,
    error_kind LONGTEXT NULL,
    classification VARCHAR(16) NULL,
    outcome VARCHAR(16) NOT NULL,
    decision LONGTEXT NOT NULL,
    CONSTRAINT attempts_kind_check CHECK (kind IN ('call', 'lookup', 'skipped')),
    CONSTRAINT attempts_classification_check CHECK (classification IN ('retryable', 'permanent', 'ambiguous')),
    CONSTRAINT attempts_outcome_check CHECK (outcome IN ('succeeded', 'failed', 'unknown')),
    INDEX attempts_operation (operation_id, id),
    INDEX attempts_started (kind, started_at_ms)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE history (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    subject VARCHAR(16) NOT NULL,
    subject_id BIGINT NOT NULL,
    operation_id BIGINT NULL,
    event_seq BIGINT NULL,
    at_ms BIGINT NOT NULL,
    actor VARCHAR(255) NOT NULL,
    `change` VARCHAR(64) NOT NULL,
    detail LONGTEXT NULL,
    CONSTRAINT history_subject_check CHECK (subject IN ('operation', 'message', 'forward')),
    INDEX history_operation (operation_id, id),
    INDEX history_event (event_seq, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE inbox_events (
    seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    integration VARCHAR(255) NOT NULL,
    event_id VARCHAR(255) NOT NULL,
    payload LONGBLOB NOT NULL,
    headers MEDIUMTEXT NOT NULL,
    received_at_ms BIGINT NOT NULL,
    CONSTRAINT inbox_events_event UNIQUE (integration, event_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE inbox_steps (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    event_seq BIGINT NOT NULL,
    kind VARCHAR(16) NOT NULL,
    at_ms BIGINT NOT NULL,
    duration_ms BIGINT NULL,
    status_code BIGINT NULL,
    operation_id BIGINT NULL,
    effect VARCHAR(16) NULL,
    detail LONGTEXT NOT NULL,
    CONSTRAINT inbox_steps_kind_check CHECK (kind IN ('ledger', 'forward')),
    CONSTRAINT inbox_steps_effect_check CHECK (effect IN ('resolved', 'changed', 'confirmed', 'noted', 'stale',
        'would_regress', 'conflict', 'no_operation', 'not_applicable')),
    INDEX inbox_steps_event (event_seq, id),
    INDEX inbox_steps_operation (operation_id),
    INDEX inbox_steps_effect (effect)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE forwards (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    event_seq BIGINT NOT NULL,
    state VARCHAR(16) NOT NULL DEFAULT 'pending',
    available_at_ms BIGINT NOT NULL,
    attempts BIGINT NOT NULL DEFAULT 0,
    previous_delay_ms BIGINT NOT NULL DEFAULT 0,
    locked_until_ms BIGINT NULL,
    lease_token BIGINT NULL,
    last_error LONGTEXT NULL,
    dead_at_ms BIGINT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    changed_by VARCHAR(32) NOT NULL DEFAULT 'webhook',
    replayed_at_ms BIGINT NULL,
    CONSTRAINT forwards_event UNIQUE (event_seq),
    CONSTRAINT forwards_state_check CHECK (state IN ('pending', 'done', 'dead')),
    INDEX forwards_due (state, available_at_ms, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE dead_letter_acks (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    actor VARCHAR(255) NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE reconciliation_reports (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    provider VARCHAR(255) NOT NULL,
    window_from_ms BIGINT NOT NULL,
    window_to_ms BIGINT NOT NULL,
    started_at_ms BIGINT NOT NULL,
    finished_at_ms BIGINT NOT NULL,
    actor VARCHAR(255) NOT NULL,
    ours BIGINT NOT NULL,
    theirs BIGINT NOT NULL,
    discrepancies BIGINT NOT NULL,
    report LONGTEXT NOT NULL,
    `text` LONGTEXT NOT NULL,
    alerted_at_ms BIGINT NULL,
    alert_error LONGTEXT NULL,
    INDEX reconciliation_reports_provider (provider, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE discrepancies (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    report_id BIGINT NOT NULL,
    provider VARCHAR(255) NOT NULL,
    kind VARCHAR(32) NOT NULL,
    reference LONGTEXT NULL,
    operation_id BIGINT NULL,
    provider_ref LONGTEXT NULL,
    detail LONGTEXT NOT NULL,
    CONSTRAINT discrepancies_kind_check CHECK (kind IN ('missing_at_provider', 'missing_here', 'amount_mismatch',
        'status_mismatch', 'duplicate_at_provider')),
    INDEX discrepancies_report (report_id),
    INDEX discrepancies_operation (operation_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE comparison_runs (
    provider VARCHAR(255) NOT NULL,
    window_from_ms BIGINT NOT NULL,
    window_to_ms BIGINT NOT NULL,
    claimed_at_ms BIGINT NOT NULL,
    finished_at_ms BIGINT NULL,
    PRIMARY KEY (provider, window_from_ms, window_to_ms)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE alerts (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    kind VARCHAR(64) NOT NULL,
    subject VARCHAR(255) NOT NULL,
    report_id BIGINT NULL,
    `text` LONGTEXT NULL,
    details LONGTEXT NULL,
    created_at_ms BIGINT NOT NULL,
    next_at_ms BIGINT NOT NULL,
    attempts BIGINT NOT NULL DEFAULT 0,
    locked_until_ms BIGINT NULL,
    sent_at_ms BIGINT NULL,
    gave_up_at_ms BIGINT NULL,
    last_error LONGTEXT NULL,
    CONSTRAINT alerts_check CHECK ((report_id IS NULL) = (`text` IS NOT NULL AND details IS NOT NULL)),
    INDEX alerts_unsent (sent_at_ms, gave_up_at_ms, next_at_ms)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE alerts_firing (
    kind VARCHAR(64) NOT NULL,
    subject VARCHAR(255) NOT NULL,
    since_ms BIGINT NOT NULL,
    PRIMARY KEY (kind, subject)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- A new operation gets its outbox message and its first history row.
CREATE TRIGGER operations_created AFTER INSERT ON operations FOR EACH ROW
BEGIN
    INSERT INTO outbox (operation_id, provider, available_at_ms, created_at_ms, updated_at_ms)
    VALUES (NEW.id, NEW.provider, NEW.created_at_ms, NEW.created_at_ms, NEW.created_at_ms);
    INSERT INTO history (subject, subject_id, operation_id, at_ms, actor, `change`)
    VALUES ('operation', NEW.id, NEW.id, NEW.created_at_ms, NEW.changed_by, 'created');
END;

-- Every change of state is a history row, written by the change itself.
CREATE TRIGGER operations_history_status AFTER UPDATE ON operations FOR EACH ROW
    INSERT INTO history (subject, subject_id, operation_id, at_ms, actor, `change`, detail)
    SELECT 'operation', NEW.id, NEW.id, NEW.updated_at_ms, NEW.changed_by, CONCAT(OLD.status, ' -> ', NEW.status),
           NEW.last_error
    FROM DUAL WHERE NOT (OLD.status <=> NEW.status);

CREATE TRIGGER outbox_history_state AFTER UPDATE ON outbox FOR EACH ROW
    INSERT INTO history (subject, subject_id, operation_id, at_ms, actor, `change`, detail)
    SELECT 'message', NEW.id, NEW.operation_id, NEW.updated_at_ms, NEW.changed_by, CONCAT(OLD.state, ' -> ', NEW.state),
           NEW.last_error
    FROM DUAL WHERE NOT (OLD.state <=> NEW.state);

CREATE TRIGGER outbox_history_purge AFTER DELETE ON outbox FOR EACH ROW
    INSERT INTO history (subject, subject_id, operation_id, at_ms, actor, `change`, detail)
    SELECT 'message', OLD.id, OLD.operation_id, OLD.updated_at_ms, OLD.changed_by, 'purged', OLD.last_error
    FROM DUAL WHERE OLD.state <> 'done';

CREATE TRIGGER forwards_history_state AFTER UPDATE ON forwards FOR EACH ROW
    INSERT INTO history (subject, subject_id, event_seq, at_ms, actor, `change`, detail)
    SELECT 'forward', NEW.id, NEW.event_seq, NEW.updated_at_ms, NEW.changed_by, CONCAT(OLD.state, ' -> ', NEW.state),
           NEW.last_error
    FROM DUAL WHERE NOT (OLD.state <=> NEW.state);

CREATE TRIGGER forwards_history_purge AFTER DELETE ON forwards FOR EACH ROW
    INSERT INTO history (subject, subject_id, event_seq, at_ms, actor, `change`, detail)
    VALUES ('forward', OLD.id, OLD.event_seq, OLD.updated_at_ms, OLD.changed_by, 'purged', OLD.last_error);

-- The attempt history, the change history and the events received are
-- append-only.
CREATE TRIGGER attempts_no_update BEFORE UPDATE ON attempts FOR EACH ROW
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'attempts is append-only';
CREATE TRIGGER attempts_no_delete BEFORE DELETE ON attempts FOR EACH ROW
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'attempts is append-only';
CREATE TRIGGER history_no_update BEFORE UPDATE ON history FOR EACH ROW
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'history is append-only';
CREATE TRIGGER history_no_delete BEFORE DELETE ON history FOR EACH ROW
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'history is append-only';
CREATE TRIGGER inbox_events_no_update BEFORE UPDATE ON inbox_events FOR EACH ROW
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'inbox_events is append-only';
CREATE TRIGGER inbox_steps_no_update BEFORE UPDATE ON inbox_steps FOR EACH ROW
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'inbox_steps is append-only';
CREATE TRIGGER inbox_steps_no_delete BEFORE DELETE ON inbox_steps FOR EACH ROW
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'inbox_steps is append-only';

-- Row locks that make a kind of write take one transaction at a time:
-- `inbox` is taken by every transaction that stores webhook events, so
-- their `seq`s are assigned in commit order.
CREATE TABLE failwell_locks (
    name VARCHAR(64) NOT NULL PRIMARY KEY
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
INSERT INTO failwell_locks (name) VALUES ('inbox');
