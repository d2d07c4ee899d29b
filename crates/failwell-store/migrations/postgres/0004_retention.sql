-- Retention deletes delivered messages (state 'done') in small batches: the
-- history keeps their state changes, and only a purge (of a dead letter, or
-- of any message not delivered) is recorded as 'purged'.
DROP TRIGGER outbox_history_purge ON outbox;
CREATE TRIGGER outbox_history_purge AFTER DELETE ON outbox
    FOR EACH ROW WHEN (OLD.state <> 'done') EXECUTE FUNCTION failwell_state_changed();
