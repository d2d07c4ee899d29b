-- Retention deletes delivered messages (state 'done') in small batches: the
-- history keeps their state changes, and only a purge (of a dead letter, or
-- of any message not delivered) is recorded as 'purged'.
DROP TRIGGER outbox_history_purge;
CREATE TRIGGER outbox_history_purge AFTER DELETE ON outbox
WHEN OLD.state <> 'done'
BEGIN
    INSERT INTO history (subject, subject_id, operation_id, at_ms, actor, change, detail)
    VALUES ('message', OLD.id, OLD.operation_id, OLD.updated_at_ms, OLD.changed_by, 'purged', OLD.last_error);
END;
