-- The relay's batch statement writes the history rows of the state changes
-- it makes itself, in the same statement (`complete_batch`): a plpgsql
-- trigger call per changed row was a sixth of the database's work per
-- delivered message. It says so for its own transaction only, with the
-- transaction-local setting `failwell.history_written = on`, which it turns
-- off again before any other write; every other writer (and a transaction
-- that never sets it) still gets its rows from these triggers, so no code
-- path can change an operation or a message without a history row.
DROP TRIGGER operations_history_status ON operations;
CREATE TRIGGER operations_history_status AFTER UPDATE OF status ON operations
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
                       AND current_setting('failwell.history_written', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION failwell_operation_changed();
DROP TRIGGER outbox_history_state ON outbox;
CREATE TRIGGER outbox_history_state AFTER UPDATE OF state ON outbox
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state
                       AND current_setting('failwell.history_written', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION failwell_message_changed();
