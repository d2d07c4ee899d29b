-- Every write into failwell's work tables is checked as PostgreSQL's column
-- types and checks check it (SQLite stores any value in any column), so
-- another program sharing the file cannot store what failwell could not
-- read or compute with: text where a number belongs, a count beyond
-- 2^31 - 1 (failwell reads one from 1000000 on as damage), a flag other
-- than 0 or 1, a time before 1970, a message without its operation. The
-- error names the column (`outbox.attempts must be a count from 0 to
-- 2147483647`).
--
-- An update is checked only where it changes a column, and rows stored
-- before this migration are not scanned: a row damaged earlier keeps its
-- value, and failwell sets it aside alone when it reads it.
CREATE TRIGGER operations_keep_messages BEFORE DELETE ON operations
    WHEN EXISTS (SELECT 1 FROM outbox WHERE operation_id = OLD.id)
    BEGIN SELECT RAISE(ABORT, 'operations: an operation with an outbox message cannot be deleted'); END;
CREATE TRIGGER operations_id_kept BEFORE UPDATE OF id ON operations
    WHEN NEW.id IS NOT OLD.id
    BEGIN SELECT RAISE(ABORT, 'operations.id cannot change'); END;

-- operations
CREATE TRIGGER operations_checked_insert BEFORE INSERT ON operations
BEGIN
    SELECT RAISE(ABORT, 'operations.idempotency_key must be text') WHERE NOT (typeof(NEW.idempotency_key) = 'text');
    SELECT RAISE(ABORT, 'operations.provider must be text') WHERE NOT (typeof(NEW.provider) = 'text');
    SELECT RAISE(ABORT, 'operations.operation must be text') WHERE NOT (typeof(NEW.operation) = 'text');
    SELECT RAISE(ABORT, 'operations.reference must be text or NULL') WHERE NOT (NEW.reference IS NULL OR typeof(NEW.reference) = 'text');
    SELECT RAISE(ABORT, 'operations.payload must be text') WHERE NOT (typeof(NEW.payload) = 'text');
    SELECT RAISE(ABORT, 'operations.request_hash must be text') WHERE NOT (typeof(NEW.request_hash) = 'text');
    SELECT RAISE(ABORT, 'operations.status must be text') WHERE NOT (typeof(NEW.status) = 'text');
    SELECT RAISE(ABORT, 'operations.key_group must be a count from 0 to 2147483647') WHERE NOT (typeof(NEW.key_group) = 'integer' AND NEW.key_group BETWEEN 0 AND 2147483647);
    SELECT RAISE(ABORT, 'operations.provider_key must be text') WHERE NOT (typeof(NEW.provider_key) = 'text');
    SELECT RAISE(ABORT, 'operations.key_first_sent_at_ms must be milliseconds since 1970 or NULL') WHERE NOT (NEW.key_first_sent_at_ms IS NULL OR typeof(NEW.key_first_sent_at_ms) = 'integer' AND NEW.key_first_sent_at_ms >= 0);
    SELECT RAISE(ABORT, 'operations.attempts must be a count from 0 to 2147483647') WHERE NOT (typeof(NEW.attempts) = 'integer' AND NEW.attempts BETWEEN 0 AND 2147483647);
    SELECT RAISE(ABORT, 'operations.provider_ref must be text or NULL') WHERE NOT (NEW.provider_ref IS NULL OR typeof(NEW.provider_ref) = 'text');
    SELECT RAISE(ABORT, 'operations.response must be text or NULL') WHERE NOT (NEW.response IS NULL OR typeof(NEW.response) = 'text');
    SELECT RAISE(ABORT, 'operations.last_error must be text or NULL') WHERE NOT (NEW.last_error IS NULL OR typeof(NEW.last_error) = 'text');
    SELECT RAISE(ABORT, 'operations.effect_possible must be 0 or 1') WHERE NOT (typeof(NEW.effect_possible) = 'integer' AND NEW.effect_possible IN (0, 1));
    SELECT RAISE(ABORT, 'operations.lookup_misses must be a count from 0 to 2147483647') WHERE NOT (typeof(NEW.lookup_misses) = 'integer' AND NEW.lookup_misses BETWEEN 0 AND 2147483647);
    SELECT RAISE(ABORT, 'operations.reconcile_attempts must be a count from 0 to 2147483647') WHERE NOT (typeof(NEW.reconcile_attempts) = 'integer' AND NEW.reconcile_attempts BETWEEN 0 AND 2147483647);
    SELECT RAISE(ABORT, 'operations.next_reconcile_at_ms must be milliseconds since 1970 or NULL') WHERE NOT (NEW.next_reconcile_at_ms IS NULL OR typeof(NEW.next_reconcile_at_ms) = 'integer' AND NEW.next_reconcile_at_ms >= 0);
    SELECT RAISE(ABORT, 'operations.created_at_ms must be milliseconds since 1970') WHERE NOT (typeof(NEW.created_at_ms) = 'integer' AND NEW.created_at_ms >= 0);
    SELECT RAISE(ABORT, 'operations.updated_at_ms must be milliseconds since 1970') WHERE NOT (typeof(NEW.updated_at_ms) = 'integer' AND NEW.updated_at_ms >= 0);
    SELECT RAISE(ABORT, 'operations.event_version must be an integer or NULL') WHERE NOT (NEW.event_version IS NULL OR typeof(NEW.event_version) = 'integer');
    SELECT RAISE(ABORT, 'operations.changed_by must be text') WHERE NOT (typeof(NEW.changed_by) = 'text');
    SELECT RAISE(ABORT, 'operations.replayed_at_ms must be milliseconds since 1970 or NULL') WHERE NOT (NEW.replayed_at_ms IS NULL OR typeof(NEW.replayed_at_ms) = 'integer' AND NEW.replayed_at_ms >= 0);
    SELECT RAISE(ABORT, 'operations.not_before_ms must be milliseconds since 1970 or NULL') WHERE NOT (NEW.not_before_ms IS NULL OR typeof(NEW.not_before_ms) = 'integer' AND NEW.not_before_ms >= 0);
END;
CREATE TRIGGER operations_idempotency_key_checked BEFORE UPDATE OF idempotency_key ON operations
    WHEN NEW.idempotency_key IS NOT OLD.idempotency_key AND NOT (typeof(NEW.idempotency_key) = 'text')
    BEGIN SELECT RAISE(ABORT, 'operations.idempotency_key must be text'); END;
CREATE TRIGGER operations_provider_checked BEFORE UPDATE OF provider ON operations
    WHEN NEW.provider IS NOT OLD.provider AND NOT (typeof(NEW.provider) = 'text')
    BEGIN SELECT RAISE(ABORT, 'operations.provider must be text'); END;
CREATE TRIGGER operations_operation_checked BEFORE UPDATE OF operation ON operations
    WHEN NEW.operation IS NOT OLD.operation AND NOT (typeof(NEW.operation) = 'text')
    BEGIN SELECT RAISE(ABORT, 'operations.operation must be text'); END;
CREATE TRIGGER operations_reference_checked BEFORE UPDATE OF reference ON operations
    WHEN NEW.reference IS NOT OLD.reference AND NOT (NEW.reference IS NULL OR typeof(NEW.reference) = 'text')
    BEGIN SELECT RAISE(ABORT, 'operations.reference must be text or NULL'); END;
CREATE TRIGGER operations_payload_checked BEFORE UPDATE OF payload ON operations
    WHEN NEW.payload IS NOT OLD.payload AND NOT (typeof(NEW.payload) = 'text')
    BEGIN SELECT RAISE(ABORT, 'operations.payload must be text'); END;
CREATE TRIGGER operations_request_hash_checked BEFORE UPDATE OF request_hash ON operations
    WHEN NEW.request_hash IS NOT OLD.request_hash AND NOT (typeof(NEW.request_hash) = 'text')
    BEGIN SELECT RAISE(ABORT, 'operations.request_hash must be text'); END;
CREATE TRIGGER operations_status_checked BEFORE UPDATE OF status ON operations
    WHEN NEW.status IS NOT OLD.status AND NOT (typeof(NEW.status) = 'text')
    BEGIN SELECT RAISE(ABORT, 'operations.status must be text'); END;
CREATE TRIGGER operations_key_group_checked BEFORE UPDATE OF key_group ON operations
    WHEN NEW.key_group IS NOT OLD.key_group AND NOT (typeof(NEW.key_group) = 'integer' AND NEW.key_group BETWEEN 0 AND 2147483647)
    BEGIN SELECT RAISE(ABORT, 'operations.key_group must be a count from 0 to 2147483647'); END;
CREATE TRIGGER operations_provider_key_checked BEFORE UPDATE OF provider_key ON operations
    WHEN NEW.provider_key IS NOT OLD.provider_key AND NOT (typeof(NEW.provider_key) = 'text')
    BEGIN SELECT RAISE(ABORT, 'operations.provider_key must be text'); END;
CREATE TRIGGER operations_key_first_sent_at_ms_checked BEFORE UPDATE OF key_first_sent_at_ms ON operations
    WHEN NEW.key_first_sent_at_ms IS NOT OLD.key_first_sent_at_ms AND NOT (NEW.key_first_sent_at_ms IS NULL OR typeof(NEW.key_first_sent_at_ms) = 'integer' AND NEW.key_first_sent_at_ms >= 0)
    BEGIN SELECT RAISE(ABORT, 'operations.key_first_sent_at_ms must be milliseconds since 1970 or NULL'); END;
CREATE TRIGGER operations_attempts_checked BEFORE UPDATE OF attempts ON operations
    WHEN NEW.attempts IS NOT OLD.attempts AND NOT (typeof(NEW.attempts) = 'integer' AND NEW.attempts BETWEEN 0 AND 2147483647)
    BEGIN SELECT RAISE(ABORT, 'operations.attempts must be a count from 0 to 2147483647'); END;
CREATE TRIGGER operations_provider_ref_checked BEFORE UPDATE OF provider_ref ON operations
    WHEN NEW.provider_ref IS NOT OLD.provider_ref AND NOT (NEW.provider_ref IS NULL OR typeof(NEW.provider_ref) = 'text')
    BEGIN SELECT RAISE(ABORT, 'operations.provider_ref must be text or NULL'); END;
CREATE TRIGGER operations_response_checked BEFORE UPDATE OF response ON operations
    WHEN NEW.response IS NOT OLD.response AND NOT (NEW.response IS NULL OR typeof(NEW.response) = 'text')
    BEGIN SELECT RAISE(ABORT, 'operations.response must be text or NULL'); END;
CREATE TRIGGER operations_last_error_checked BEFORE UPDATE OF last_error ON operations
    WHEN NEW.last_error IS NOT OLD.last_error AND NOT (NEW.last_error IS NULL OR typeof(NEW.last_error) = 'text')
    BEGIN SELECT RAISE(ABORT, 'operations.last_error must be text or NULL'); END;
CREATE TRIGGER operations_effect_possible_checked BEFORE UPDATE OF effect_possible ON operations
    WHEN NEW.effect_possible IS NOT OLD.effect_possible AND NOT (typeof(NEW.effect_possible) = 'integer' AND NEW.effect_possible IN (0, 1))
    BEGIN SELECT RAISE(ABORT, 'operations.effect_possible must be 0 or 1'); END;
CREATE TRIGGER operations_lookup_misses_checked BEFORE UPDATE OF lookup_misses ON operations
    WHEN NEW.lookup_misses IS NOT OLD.lookup_misses AND NOT (typeof(NEW.lookup_misses) = 'integer' AND NEW.lookup_misses BETWEEN 0 AND 2147483647)
    BEGIN SELECT RAISE(ABORT, 'operations.lookup_misses must be a count from 0 to 2147483647'); END;
CREATE TRIGGER operations_reconcile_attempts_checked BEFORE UPDATE OF reconcile_attempts ON operations
    WHEN NEW.reconcile_attempts IS NOT OLD.reconcile_attempts AND NOT (typeof(NEW.reconcile_attempts) = 'integer' AND NEW.reconcile_attempts BETWEEN 0 AND 2147483647)
    BEGIN SELECT RAISE(ABORT, 'operations.reconcile_attempts must be a count from 0 to 2147483647'); END;
CREATE TRIGGER operations_next_reconcile_at_ms_checked BEFORE UPDATE OF next_reconcile_at_ms ON operations
    WHEN NEW.next_reconcile_at_ms IS NOT OLD.next_reconcile_at_ms AND NOT (NEW.next_reconcile_at_ms IS NULL OR typeof(NEW.next_reconcile_at_ms) = 'integer' AND NEW.next_reconcile_at_ms >= 0)
    BEGIN SELECT RAISE(ABORT, 'operations.next_reconcile_at_ms must be milliseconds since 1970 or NULL'); END;
CREATE TRIGGER operations_created_at_ms_checked BEFORE UPDATE OF created_at_ms ON operations
    WHEN NEW.created_at_ms IS NOT OLD.created_at_ms AND NOT (typeof(NEW.created_at_ms) = 'integer' AND NEW.created_at_ms >= 0)
    BEGIN SELECT RAISE(ABORT, 'operations.created_at_ms must be milliseconds since 1970'); END;
CREATE TRIGGER operations_updated_at_ms_checked BEFORE UPDATE OF updated_at_ms ON operations
    WHEN NEW.updated_at_ms IS NOT OLD.updated_at_ms AND NOT (typeof(NEW.updated_at_ms) = 'integer' AND NEW.updated_at_ms >= 0)
    BEGIN SELECT RAISE(ABORT, 'operations.updated_at_ms must be milliseconds since 1970'); END;
CREATE TRIGGER operations_event_version_checked BEFORE UPDATE OF event_version ON operations
    WHEN NEW.event_version IS NOT OLD.event_version AND NOT (NEW.event_version IS NULL OR typeof(NEW.event_version) = 'integer')
    BEGIN SELECT RAISE(ABORT, 'operations.event_version must be an integer or NULL'); END;
CREATE TRIGGER operations_changed_by_checked BEFORE UPDATE OF changed_by ON operations
    WHEN NEW.changed_by IS NOT OLD.changed_by AND NOT (typeof(NEW.changed_by) = 'text')
    BEGIN SELECT RAISE(ABORT, 'operations.changed_by must be text'); END;
CREATE TRIGGER operations_replayed_at_ms_checked BEFORE UPDATE OF replayed_at_ms ON operations
    WHEN NEW.replayed_at_ms IS NOT OLD.replayed_at_ms AND NOT (NEW.replayed_at_ms IS NULL OR typeof(NEW.replayed_at_ms) = 'integer' AND NEW.replayed_at_ms >= 0)
    BEGIN SELECT RAISE(ABORT, 'operations.replayed_at_ms must be milliseconds since 1970 or NULL'); END;
CREATE TRIGGER operations_not_before_ms_checked BEFORE UPDATE OF not_before_ms ON operations
    WHEN NEW.not_before_ms IS NOT OLD.not_before_ms AND NOT (NEW.not_before_ms IS NULL OR typeof(NEW.not_before_ms) = 'integer' AND NEW.not_before_ms >= 0)
    BEGIN SELECT RAISE(ABORT, 'operations.not_before_ms must be milliseconds since 1970 or NULL'); END;

-- outbox
CREATE TRIGGER outbox_checked_insert BEFORE INSERT ON outbox
BEGIN
    SELECT RAISE(ABORT, 'outbox.operation_id must be an integer') WHERE NOT (typeof(NEW.operation_id) = 'integer');
    SELECT RAISE(ABORT, 'outbox.state must be text') WHERE NOT (typeof(NEW.state) = 'text');
    SELECT RAISE(ABORT, 'outbox.available_at_ms must be milliseconds since 1970') WHERE NOT (typeof(NEW.available_at_ms) = 'integer' AND NEW.available_at_ms >= 0);
    SELECT RAISE(ABORT, 'outbox.attempts must be a count from 0 to 2147483647') WHERE NOT (typeof(NEW.attempts) = 'integer' AND NEW.attempts BETWEEN 0 AND 2147483647);
    SELECT RAISE(ABORT, 'outbox.previous_delay_ms must be a count from 0 to 2147483647') WHERE NOT (typeof(NEW.previous_delay_ms) = 'integer' AND NEW.previous_delay_ms BETWEEN 0 AND 2147483647);
    SELECT RAISE(ABORT, 'outbox.locked_until_ms must be milliseconds since 1970 or NULL') WHERE NOT (NEW.locked_until_ms IS NULL OR typeof(NEW.locked_until_ms) = 'integer' AND NEW.locked_until_ms >= 0);
    SELECT RAISE(ABORT, 'outbox.lease_token must be an integer or NULL') WHERE NOT (NEW.lease_token IS NULL OR typeof(NEW.lease_token) = 'integer');
    SELECT RAISE(ABORT, 'outbox.in_flight must be 0 or 1') WHERE NOT (typeof(NEW.in_flight) = 'integer' AND NEW.in_flight IN (0, 1));
    SELECT RAISE(ABORT, 'outbox.last_error must be text or NULL') WHERE NOT (NEW.last_error IS NULL OR typeof(NEW.last_error) = 'text');
    SELECT RAISE(ABORT, 'outbox.dead_at_ms must be milliseconds since 1970 or NULL') WHERE NOT (NEW.dead_at_ms IS NULL OR typeof(NEW.dead_at_ms) = 'integer' AND NEW.dead_at_ms >= 0);
    SELECT RAISE(ABORT, 'outbox.created_at_ms must be milliseconds since 1970') WHERE NOT (typeof(NEW.created_at_ms) = 'integer' AND NEW.created_at_ms >= 0);
    SELECT RAISE(ABORT, 'outbox.updated_at_ms must be milliseconds since 1970') WHERE NOT (typeof(NEW.updated_at_ms) = 'integer' AND NEW.updated_at_ms >= 0);
    SELECT RAISE(ABORT, 'outbox.changed_by must be text') WHERE NOT (typeof(NEW.changed_by) = 'text');
    SELECT RAISE(ABORT, 'outbox.ordering_key must be text or NULL') WHERE NOT (NEW.ordering_key IS NULL OR typeof(NEW.ordering_key) = 'text');
    SELECT RAISE(ABORT, 'outbox.provider must be text') WHERE NOT (typeof(NEW.provider) = 'text');
    SELECT RAISE(ABORT, 'outbox.operation_id must name an operation')
        WHERE NOT EXISTS (SELECT 1 FROM operations WHERE id = NEW.operation_id);
END;
CREATE TRIGGER outbox_operation_id_checked BEFORE UPDATE OF operation_id ON outbox
    WHEN NEW.operation_id IS NOT OLD.operation_id AND NOT (typeof(NEW.operation_id) = 'integer' AND EXISTS (SELECT 1 FROM operations WHERE id = NEW.operation_id))
    BEGIN SELECT RAISE(ABORT, 'outbox.operation_id must name an operation'); END;
CREATE TRIGGER outbox_state_checked BEFORE UPDATE OF state ON outbox
    WHEN NEW.state IS NOT OLD.state AND NOT (typeof(NEW.state) = 'text')
    BEGIN SELECT RAISE(ABORT, 'outbox.state must be text'); END;
CREATE TRIGGER outbox_available_at_ms_checked BEFORE UPDATE OF available_at_ms ON outbox
    WHEN NEW.available_at_ms IS NOT OLD.available_at_ms AND NOT (typeof(NEW.available_at_ms) = 'integer' AND NEW.available_at_ms >= 0)
    BEGIN SELECT RAISE(ABORT, 'outbox.available_at_ms must be milliseconds since 1970'); END;
CREATE TRIGGER outbox_attempts_checked BEFORE UPDATE OF attempts ON outbox
    WHEN NEW.attempts IS NOT OLD.attempts AND NOT (typeof(NEW.attempts) = 'integer' AND NEW.attempts BETWEEN 0 AND 2147483647)
    BEGIN SELECT RAISE(ABORT, 'outbox.attempts must be a count from 0 to 2147483647'); END;
CREATE TRIGGER outbox_previous_delay_ms_checked BEFORE UPDATE OF previous_delay_ms ON outbox
    WHEN NEW.previous_delay_ms IS NOT OLD.previous_delay_ms AND NOT (typeof(NEW.previous_delay_ms) = 'integer' AND NEW.previous_delay_ms BETWEEN 0 AND 2147483647)
    BEGIN SELECT RAISE(ABORT, 'outbox.previous_delay_ms must be a count from 0 to 2147483647'); END;
CREATE TRIGGER outbox_locked_until_ms_checked BEFORE UPDATE OF locked_until_ms ON outbox
    WHEN NEW.locked_until_ms IS NOT OLD.locked_until_ms AND NOT (NEW.locked_until_ms IS NULL OR typeof(NEW.locked_until_ms) = 'integer' AND NEW.locked_until_ms >= 0)
    BEGIN SELECT RAISE(ABORT, 'outbox.locked_until_ms must be milliseconds since 1970 or NULL'); END;
CREATE TRIGGER outbox_lease_token_checked BEFORE UPDATE OF lease_token ON outbox
    WHEN NEW.lease_token IS NOT OLD.lease_token AND NOT (NEW.lease_token IS NULL OR typeof(NEW.lease_token) = 'integer')
    BEGIN SELECT RAISE(ABORT, 'outbox.lease_token must be an integer or NULL'); END;
CREATE TRIGGER outbox_in_flight_checked BEFORE UPDATE OF in_flight ON outbox
    WHEN NEW.in_flight IS NOT OLD.in_flight AND NOT (typeof(NEW.in_flight) = 'integer' AND NEW.in_flight IN (0, 1))
    BEGIN SELECT RAISE(ABORT, 'outbox.in_flight must be 0 or 1'); END;
CREATE TRIGGER outbox_last_error_checked BEFORE UPDATE OF last_error ON outbox
    WHEN NEW.last_error IS NOT OLD.last_error AND NOT (NEW.last_error IS NULL OR typeof(NEW.last_error) = 'text')
    BEGIN SELECT RAISE(ABORT, 'outbox.last_error must be text or NULL'); END;
CREATE TRIGGER outbox_dead_at_ms_checked BEFORE UPDATE OF dead_at_ms ON outbox
    WHEN NEW.dead_at_ms IS NOT OLD.dead_at_ms AND NOT (NEW.dead_at_ms IS NULL OR typeof(NEW.dead_at_ms) = 'integer' AND NEW.dead_at_ms >= 0)
    BEGIN SELECT RAISE(ABORT, 'outbox.dead_at_ms must be milliseconds since 1970 or NULL'); END;
CREATE TRIGGER outbox_created_at_ms_checked BEFORE UPDATE OF created_at_ms ON outbox
    WHEN NEW.created_at_ms IS NOT OLD.created_at_ms AND NOT (typeof(NEW.created_at_ms) = 'integer' AND NEW.created_at_ms >= 0)
    BEGIN SELECT RAISE(ABORT, 'outbox.created_at_ms must be milliseconds since 1970'); END;
CREATE TRIGGER outbox_updated_at_ms_checked BEFORE UPDATE OF updated_at_ms ON outbox
    WHEN NEW.updated_at_ms IS NOT OLD.updated_at_ms AND NOT (typeof(NEW.updated_at_ms) = 'integer' AND NEW.updated_at_ms >= 0)
    BEGIN SELECT RAISE(ABORT, 'outbox.updated_at_ms must be milliseconds since 1970'); END;
CREATE TRIGGER outbox_changed_by_checked BEFORE UPDATE OF changed_by ON outbox
    WHEN NEW.changed_by IS NOT OLD.changed_by AND NOT (typeof(NEW.changed_by) = 'text')
    BEGIN SELECT RAISE(ABORT, 'outbox.changed_by must be text'); END;
CREATE TRIGGER outbox_ordering_key_checked BEFORE UPDATE OF ordering_key ON outbox
    WHEN NEW.ordering_key IS NOT OLD.ordering_key AND NOT (NEW.ordering_key IS NULL OR typeof(NEW.ordering_key) = 'text')
    BEGIN SELECT RAISE(ABORT, 'outbox.ordering_key must be text or NULL'); END;
CREATE TRIGGER outbox_provider_checked BEFORE UPDATE OF provider ON outbox
    WHEN NEW.provider IS NOT OLD.provider AND NOT (typeof(NEW.provider) = 'text')
    BEGIN SELECT RAISE(ABORT, 'outbox.provider must be text'); END;

-- forwards
CREATE TRIGGER forwards_checked_insert BEFORE INSERT ON forwards
BEGIN
    SELECT RAISE(ABORT, 'forwards.event_seq must be an integer') WHERE NOT (typeof(NEW.event_seq) = 'integer');
    SELECT RAISE(ABORT, 'forwards.state must be text') WHERE NOT (typeof(NEW.state) = 'text');
    SELECT RAISE(ABORT, 'forwards.available_at_ms must be milliseconds since 1970') WHERE NOT (typeof(NEW.available_at_ms) = 'integer' AND NEW.available_at_ms >= 0);
    SELECT RAISE(ABORT, 'forwards.attempts must be a count from 0 to 2147483647') WHERE NOT (typeof(NEW.attempts) = 'integer' AND NEW.attempts BETWEEN 0 AND 2147483647);
    SELECT RAISE(ABORT, 'forwards.previous_delay_ms must be a count from 0 to 2147483647') WHERE NOT (typeof(NEW.previous_delay_ms) = 'integer' AND NEW.previous_delay_ms BETWEEN 0 AND 2147483647);
    SELECT RAISE(ABORT, 'forwards.locked_until_ms must be milliseconds since 1970 or NULL') WHERE NOT (NEW.locked_until_ms IS NULL OR typeof(NEW.locked_until_ms) = 'integer' AND NEW.locked_until_ms >= 0);
    SELECT RAISE(ABORT, 'forwards.lease_token must be an integer or NULL') WHERE NOT (NEW.lease_token IS NULL OR typeof(NEW.lease_token) = 'integer');
    SELECT RAISE(ABORT, 'forwards.last_error must be text or NULL') WHERE NOT (NEW.last_error IS NULL OR typeof(NEW.last_error) = 'text');
    SELECT RAISE(ABORT, 'forwards.dead_at_ms must be milliseconds since 1970 or NULL') WHERE NOT (NEW.dead_at_ms IS NULL OR typeof(NEW.dead_at_ms) = 'integer' AND NEW.dead_at_ms >= 0);
    SELECT RAISE(ABORT, 'forwards.created_at_ms must be milliseconds since 1970') WHERE NOT (typeof(NEW.created_at_ms) = 'integer' AND NEW.created_at_ms >= 0);
    SELECT RAISE(ABORT, 'forwards.updated_at_ms must be milliseconds since 1970') WHERE NOT (typeof(NEW.updated_at_ms) = 'integer' AND NEW.updated_at_ms >= 0);
    SELECT RAISE(ABORT, 'forwards.changed_by must be text') WHERE NOT (typeof(NEW.changed_by) = 'text');
    SELECT RAISE(ABORT, 'forwards.replayed_at_ms must be milliseconds since 1970 or NULL') WHERE NOT (NEW.replayed_at_ms IS NULL OR typeof(NEW.replayed_at_ms) = 'integer' AND NEW.replayed_at_ms >= 0);
END;
CREATE TRIGGER forwards_event_seq_checked BEFORE UPDATE OF event_seq ON forwards
    WHEN NEW.event_seq IS NOT OLD.event_seq AND NOT (typeof(NEW.event_seq) = 'integer')
    BEGIN SELECT RAISE(ABORT, 'forwards.event_seq must be an integer'); END;
CREATE TRIGGER forwards_state_checked BEFORE UPDATE OF state ON forwards
    WHEN NEW.state IS NOT OLD.state AND NOT (typeof(NEW.state) = 'text')
    BEGIN SELECT RAISE(ABORT, 'forwards.state must be text'); END;
CREATE TRIGGER forwards_available_at_ms_checked BEFORE UPDATE OF available_at_ms ON forwards
    WHEN NEW.available_at_ms IS NOT OLD.available_at_ms AND NOT (typeof(NEW.available_at_ms) = 'integer' AND NEW.available_at_ms >= 0)
    BEGIN SELECT RAISE(ABORT, 'forwards.available_at_ms must be milliseconds since 1970'); END;
CREATE TRIGGER forwards_attempts_checked BEFORE UPDATE OF attempts ON forwards
    WHEN NEW.attempts IS NOT OLD.attempts AND NOT (typeof(NEW.attempts) = 'integer' AND NEW.attempts BETWEEN 0 AND 2147483647)
    BEGIN SELECT RAISE(ABORT, 'forwards.attempts must be a count from 0 to 2147483647'); END;
CREATE TRIGGER forwards_previous_delay_ms_checked BEFORE UPDATE OF previous_delay_ms ON forwards
    WHEN NEW.previous_delay_ms IS NOT OLD.previous_delay_ms AND NOT (typeof(NEW.previous_delay_ms) = 'integer' AND NEW.previous_delay_ms BETWEEN 0 AND 2147483647)
    BEGIN SELECT RAISE(ABORT, 'forwards.previous_delay_ms must be a count from 0 to 2147483647'); END;
CREATE TRIGGER forwards_locked_until_ms_checked BEFORE UPDATE OF locked_until_ms ON forwards
    WHEN NEW.locked_until_ms IS NOT OLD.locked_until_ms AND NOT (NEW.locked_until_ms IS NULL OR typeof(NEW.locked_until_ms) = 'integer' AND NEW.locked_until_ms >= 0)
    BEGIN SELECT RAISE(ABORT, 'forwards.locked_until_ms must be milliseconds since 1970 or NULL'); END;
CREATE TRIGGER forwards_lease_token_checked BEFORE UPDATE OF lease_token ON forwards
    WHEN NEW.lease_token IS NOT OLD.lease_token AND NOT (NEW.lease_token IS NULL OR typeof(NEW.lease_token) = 'integer')
    BEGIN SELECT RAISE(ABORT, 'forwards.lease_token must be an integer or NULL'); END;
CREATE TRIGGER forwards_last_error_checked BEFORE UPDATE OF last_error ON forwards
    WHEN NEW.last_error IS NOT OLD.last_error AND NOT (NEW.last_error IS NULL OR typeof(NEW.last_error) = 'text')
    BEGIN SELECT RAISE(ABORT, 'forwards.last_error must be text or NULL'); END;
CREATE TRIGGER forwards_dead_at_ms_checked BEFORE UPDATE OF dead_at_ms ON forwards
    WHEN NEW.dead_at_ms IS NOT OLD.dead_at_ms AND NOT (NEW.dead_at_ms IS NULL OR typeof(NEW.dead_at_ms) = 'integer' AND NEW.dead_at_ms >= 0)
    BEGIN SELECT RAISE(ABORT, 'forwards.dead_at_ms must be milliseconds since 1970 or NULL'); END;
CREATE TRIGGER forwards_created_at_ms_checked BEFORE UPDATE OF created_at_ms ON forwards
    WHEN NEW.created_at_ms IS NOT OLD.created_at_ms AND NOT (typeof(NEW.created_at_ms) = 'integer' AND NEW.created_at_ms >= 0)
    BEGIN SELECT RAISE(ABORT, 'forwards.created_at_ms must be milliseconds since 1970'); END;
CREATE TRIGGER forwards_updated_at_ms_checked BEFORE UPDATE OF updated_at_ms ON forwards
    WHEN NEW.updated_at_ms IS NOT OLD.updated_at_ms AND NOT (typeof(NEW.updated_at_ms) = 'integer' AND NEW.updated_at_ms >= 0)
    BEGIN SELECT RAISE(ABORT, 'forwards.updated_at_ms must be milliseconds since 1970'); END;
CREATE TRIGGER forwards_changed_by_checked BEFORE UPDATE OF changed_by ON forwards
    WHEN NEW.changed_by IS NOT OLD.changed_by AND NOT (typeof(NEW.changed_by) = 'text')
    BEGIN SELECT RAISE(ABORT, 'forwards.changed_by must be text'); END;
CREATE TRIGGER forwards_replayed_at_ms_checked BEFORE UPDATE OF replayed_at_ms ON forwards
    WHEN NEW.replayed_at_ms IS NOT OLD.replayed_at_ms AND NOT (NEW.replayed_at_ms IS NULL OR typeof(NEW.replayed_at_ms) = 'integer' AND NEW.replayed_at_ms >= 0)
    BEGIN SELECT RAISE(ABORT, 'forwards.replayed_at_ms must be milliseconds since 1970 or NULL'); END;

-- attempts
CREATE TRIGGER attempts_checked_insert BEFORE INSERT ON attempts
BEGIN
    SELECT RAISE(ABORT, 'attempts.operation_id must be an integer') WHERE NOT (typeof(NEW.operation_id) = 'integer');
    SELECT RAISE(ABORT, 'attempts.kind must be text') WHERE NOT (typeof(NEW.kind) = 'text');
    SELECT RAISE(ABORT, 'attempts.attempt_no must be a count from 0 to 2147483647') WHERE NOT (typeof(NEW.attempt_no) = 'integer' AND NEW.attempt_no BETWEEN 0 AND 2147483647);
    SELECT RAISE(ABORT, 'attempts.provider_key must be text or NULL') WHERE NOT (NEW.provider_key IS NULL OR typeof(NEW.provider_key) = 'text');
    SELECT RAISE(ABORT, 'attempts.started_at_ms must be milliseconds since 1970') WHERE NOT (typeof(NEW.started_at_ms) = 'integer' AND NEW.started_at_ms >= 0);
    SELECT RAISE(ABORT, 'attempts.duration_ms must be an integer') WHERE NOT (typeof(NEW.duration_ms) = 'integer');
    SELECT RAISE(ABORT, 'attempts.status_code must be an integer or NULL') WHERE NOT (NEW.status_code IS NULL OR typeof(NEW.status_code) = 'integer');
    SELECT RAISE(ABORT, 'attempts.error_kind must be text or NULL') WHERE NOT (NEW.error_kind IS NULL OR typeof(NEW.error_kind) = 'text');
    SELECT RAISE(ABORT, 'attempts.classification must be text or NULL') WHERE NOT (NEW.classification IS NULL OR typeof(NEW.classification) = 'text');
    SELECT RAISE(ABORT, 'attempts.outcome must be text') WHERE NOT (typeof(NEW.outcome) = 'text');
    SELECT RAISE(ABORT, 'attempts.decision must be text') WHERE NOT (typeof(NEW.decision) = 'text');
END;

-- alerts
CREATE TRIGGER alerts_checked_insert BEFORE INSERT ON alerts
BEGIN
    SELECT RAISE(ABORT, 'alerts.kind must be text') WHERE NOT (typeof(NEW.kind) = 'text');
    SELECT RAISE(ABORT, 'alerts.subject must be text') WHERE NOT (typeof(NEW.subject) = 'text');
    SELECT RAISE(ABORT, 'alerts.report_id must be an integer or NULL') WHERE NOT (NEW.report_id IS NULL OR typeof(NEW.report_id) = 'integer');
    SELECT RAISE(ABORT, 'alerts.text must be text or NULL') WHERE NOT (NEW.text IS NULL OR typeof(NEW.text) = 'text');
    SELECT RAISE(ABORT, 'alerts.details must be text or NULL') WHERE NOT (NEW.details IS NULL OR typeof(NEW.details) = 'text');
    SELECT RAISE(ABORT, 'alerts.created_at_ms must be milliseconds since 1970') WHERE NOT (typeof(NEW.created_at_ms) = 'integer' AND NEW.created_at_ms >= 0);
    SELECT RAISE(ABORT, 'alerts.next_at_ms must be milliseconds since 1970') WHERE NOT (typeof(NEW.next_at_ms) = 'integer' AND NEW.next_at_ms >= 0);
    SELECT RAISE(ABORT, 'alerts.attempts must be a count from 0 to 2147483647') WHERE NOT (typeof(NEW.attempts) = 'integer' AND NEW.attempts BETWEEN 0 AND 2147483647);
    SELECT RAISE(ABORT, 'alerts.locked_until_ms must be milliseconds since 1970 or NULL') WHERE NOT (NEW.locked_until_ms IS NULL OR typeof(NEW.locked_until_ms) = 'integer' AND NEW.locked_until_ms >= 0);
    SELECT RAISE(ABORT, 'alerts.sent_at_ms must be milliseconds since 1970 or NULL') WHERE NOT (NEW.sent_at_ms IS NULL OR typeof(NEW.sent_at_ms) = 'integer' AND NEW.sent_at_ms >= 0);
    SELECT RAISE(ABORT, 'alerts.gave_up_at_ms must be milliseconds since 1970 or NULL') WHERE NOT (NEW.gave_up_at_ms IS NULL OR typeof(NEW.gave_up_at_ms) = 'integer' AND NEW.gave_up_at_ms >= 0);
    SELECT RAISE(ABORT, 'alerts.last_error must be text or NULL') WHERE NOT (NEW.last_error IS NULL OR typeof(NEW.last_error) = 'text');
END;
CREATE TRIGGER alerts_kind_checked BEFORE UPDATE OF kind ON alerts
    WHEN NEW.kind IS NOT OLD.kind AND NOT (typeof(NEW.kind) = 'text')
    BEGIN SELECT RAISE(ABORT, 'alerts.kind must be text'); END;
CREATE TRIGGER alerts_subject_checked BEFORE UPDATE OF subject ON alerts
    WHEN NEW.subject IS NOT OLD.subject AND NOT (typeof(NEW.subject) = 'text')
    BEGIN SELECT RAISE(ABORT, 'alerts.subject must be text'); END;
CREATE TRIGGER alerts_report_id_checked BEFORE UPDATE OF report_id ON alerts
    WHEN NEW.report_id IS NOT OLD.report_id AND NOT (NEW.report_id IS NULL OR typeof(NEW.report_id) = 'integer')
    BEGIN SELECT RAISE(ABORT, 'alerts.report_id must be an integer or NULL'); END;
CREATE TRIGGER alerts_text_checked BEFORE UPDATE OF text ON alerts
    WHEN NEW.text IS NOT OLD.text AND NOT (NEW.text IS NULL OR typeof(NEW.text) = 'text')
    BEGIN SELECT RAISE(ABORT, 'alerts.text must be text or NULL'); END;
CREATE TRIGGER alerts_details_checked BEFORE UPDATE OF details ON alerts
    WHEN NEW.details IS NOT OLD.details AND NOT (NEW.details IS NULL OR typeof(NEW.details) = 'text')
    BEGIN SELECT RAISE(ABORT, 'alerts.details must be text or NULL'); END;
CREATE TRIGGER alerts_created_at_ms_checked BEFORE UPDATE OF created_at_ms ON alerts
    WHEN NEW.created_at_ms IS NOT OLD.created_at_ms AND NOT (typeof(NEW.created_at_ms) = 'integer' AND NEW.created_at_ms >= 0)
    BEGIN SELECT RAISE(ABORT, 'alerts.created_at_ms must be milliseconds since 1970'); END;
CREATE TRIGGER alerts_next_at_ms_checked BEFORE UPDATE OF next_at_ms ON alerts
    WHEN NEW.next_at_ms IS NOT OLD.next_at_ms AND NOT (typeof(NEW.next_at_ms) = 'integer' AND NEW.next_at_ms >= 0)
    BEGIN SELECT RAISE(ABORT, 'alerts.next_at_ms must be milliseconds since 1970'); END;
CREATE TRIGGER alerts_attempts_checked BEFORE UPDATE OF attempts ON alerts
    WHEN NEW.attempts IS NOT OLD.attempts AND NOT (typeof(NEW.attempts) = 'integer' AND NEW.attempts BETWEEN 0 AND 2147483647)
    BEGIN SELECT RAISE(ABORT, 'alerts.attempts must be a count from 0 to 2147483647'); END;
CREATE TRIGGER alerts_locked_until_ms_checked BEFORE UPDATE OF locked_until_ms ON alerts
    WHEN NEW.locked_until_ms IS NOT OLD.locked_until_ms AND NOT (NEW.locked_until_ms IS NULL OR typeof(NEW.locked_until_ms) = 'integer' AND NEW.locked_until_ms >= 0)
    BEGIN SELECT RAISE(ABORT, 'alerts.locked_until_ms must be milliseconds since 1970 or NULL'); END;
CREATE TRIGGER alerts_sent_at_ms_checked BEFORE UPDATE OF sent_at_ms ON alerts
    WHEN NEW.sent_at_ms IS NOT OLD.sent_at_ms AND NOT (NEW.sent_at_ms IS NULL OR typeof(NEW.sent_at_ms) = 'integer' AND NEW.sent_at_ms >= 0)
    BEGIN SELECT RAISE(ABORT, 'alerts.sent_at_ms must be milliseconds since 1970 or NULL'); END;
CREATE TRIGGER alerts_gave_up_at_ms_checked BEFORE UPDATE OF gave_up_at_ms ON alerts
    WHEN NEW.gave_up_at_ms IS NOT OLD.gave_up_at_ms AND NOT (NEW.gave_up_at_ms IS NULL OR typeof(NEW.gave_up_at_ms) = 'integer' AND NEW.gave_up_at_ms >= 0)
    BEGIN SELECT RAISE(ABORT, 'alerts.gave_up_at_ms must be milliseconds since 1970 or NULL'); END;
CREATE TRIGGER alerts_last_error_checked BEFORE UPDATE OF last_error ON alerts
    WHEN NEW.last_error IS NOT OLD.last_error AND NOT (NEW.last_error IS NULL OR typeof(NEW.last_error) = 'text')
    BEGIN SELECT RAISE(ABORT, 'alerts.last_error must be text or NULL'); END;
