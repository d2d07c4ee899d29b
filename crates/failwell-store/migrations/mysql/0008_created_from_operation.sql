-- An intent's `created` event can be read from its operation instead of a
-- history row beside it, as on PostgreSQL (its `0024`):
-- `operations.created_by` names who recorded the intent, and an
-- operation's history shows `operation created` by that actor at
-- `created_at_ms`. An insert that does not set it (the contract's table,
-- an application's own insert) still gets its `created` history row from
-- the trigger, and so do the operations stored before this migration. An
-- operation has one or the other, never both. The history is append-only,
-- so the creation is too: an update that changes `created_by` or
-- `created_at_ms` is refused.
ALTER TABLE operations ADD COLUMN created_by VARCHAR(32) NULL;

CREATE TRIGGER operations_creation_fixed BEFORE UPDATE ON operations FOR EACH ROW
    IF NOT (NEW.created_by <=> OLD.created_by) OR NOT (NEW.created_at_ms <=> OLD.created_at_ms) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'operations.created_by and created_at_ms record the creation, and are append-only';
    END IF;

DROP TRIGGER operations_created;
CREATE TRIGGER operations_created AFTER INSERT ON operations FOR EACH ROW
BEGIN
    INSERT INTO outbox (operation_id, provider, available_at_ms, created_at_ms, updated_at_ms)
    VALUES (NEW.id, NEW.provider, NEW.created_at_ms, NEW.created_at_ms, NEW.created_at_ms);
    IF NEW.created_by IS NULL THEN
        INSERT INTO history (subject, subject_id, operation_id, at_ms, actor, `change`)
        VALUES ('operation', NEW.id, NEW.id, NEW.created_at_ms, NEW.changed_by, 'created');
    END IF;
END;
