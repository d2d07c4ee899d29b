-- An intent's `created` event can be read from its operation instead of a
-- history row beside it, as on PostgreSQL (its `0024`):
-- `operations.created_by` names who recorded the intent, and an
-- operation's history shows `operation created` by that actor at
-- `created_at_ms`. An insert that does not set it (the contract's view,
-- an application's own insert) still gets its `created` history row from
-- the trigger, and so do the operations stored before this migration. An
-- operation has one or the other, never both. The history is append-only,
-- so the creation is too: an update that changes `created_by` or
-- `created_at_ms` is refused.
ALTER TABLE operations ADD COLUMN created_by TEXT;

CREATE TRIGGER operations_creation_fixed BEFORE UPDATE OF created_by, created_at_ms ON operations
    WHEN NEW.created_by IS NOT OLD.created_by OR NEW.created_at_ms IS NOT OLD.created_at_ms
BEGIN
    SELECT RAISE(ABORT, 'operations.created_by and created_at_ms record the creation, and are append-only');
END;

DROP TRIGGER operations_history_insert;
CREATE TRIGGER operations_history_insert AFTER INSERT ON operations WHEN NEW.created_by IS NULL
BEGIN
    INSERT INTO history (subject, subject_id, operation_id, at_ms, actor, change)
    VALUES ('operation', NEW.id, NEW.id, NEW.created_at_ms, NEW.changed_by, 'created');
END;
