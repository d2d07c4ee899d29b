-- State changes are copied into the history by one small trigger function
-- per table instead of the generic one, which converted the old and the new
-- row to JSON to find its columns: the relay settles batches of messages
-- and their operations, and the history row of each state change is now a
-- plain INSERT of the columns it needs. Same rows as before: who changed it
-- (`changed_by`), `<from> -> <to>`, and the error or reason at that moment.
-- Deletes (purges) keep the generic function.
CREATE FUNCTION failwell_operation_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO history (subject, subject_id, operation_id, at_ms, actor, change, detail)
    VALUES ('operation', NEW.id, NEW.id, NEW.updated_at_ms, NEW.changed_by, OLD.status || ' -> ' || NEW.status,
            NEW.last_error);
    RETURN NULL;
END $$;
DROP TRIGGER operations_history_status ON operations;
CREATE TRIGGER operations_history_status AFTER UPDATE OF status ON operations
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION failwell_operation_changed();

CREATE FUNCTION failwell_message_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO history (subject, subject_id, operation_id, at_ms, actor, change, detail)
    VALUES ('message', NEW.id, NEW.operation_id, NEW.updated_at_ms, NEW.changed_by, OLD.state || ' -> ' || NEW.state,
            NEW.last_error);
    RETURN NULL;
END $$;
DROP TRIGGER outbox_history_state ON outbox;
CREATE TRIGGER outbox_history_state AFTER UPDATE OF state ON outbox
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION failwell_message_changed();

CREATE FUNCTION failwell_forward_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO history (subject, subject_id, event_seq, at_ms, actor, change, detail)
    VALUES ('forward', NEW.id, NEW.event_seq, NEW.updated_at_ms, NEW.changed_by, OLD.state || ' -> ' || NEW.state,
            NEW.last_error);
    RETURN NULL;
END $$;
DROP TRIGGER forwards_history_state ON forwards;
CREATE TRIGGER forwards_history_state AFTER UPDATE OF state ON forwards
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION failwell_forward_changed();

-- A claim rewrites only unindexed columns of its messages (the lease): with
-- room left on each page, that new row version stays on the page and no
-- index is touched (a HOT update). Rows are small; half a page is spare.
ALTER TABLE outbox SET (fillfactor = 50);

-- Every attempt row is inserted by a SELECT from its operation's row, so it
-- cannot name a missing operation, and operations are never deleted; the
-- foreign key added a lookup and a row lock on the operation per attempt,
-- on the relay's hottest path.
ALTER TABLE attempts DROP CONSTRAINT attempts_operation_id_fkey;
