-- The checks of a message's and an operation's columns move from the
-- tables to domains, with the same rules. PostgreSQL reads a table's CHECK
-- constraints again from their stored text each time a statement writing
-- the table starts; the view's trigger runs one such statement per row, so
-- an insert into `failwell_outbox` spent more than a quarter of its time
-- reading them (`perf`: `ExecConstraints` -> `stringToNode`). A domain's
-- checks are read once per connection and kept. Same rules, same error
-- code (`23514`); the error now says "value for domain ... violates check
-- constraint ...". Only `operations.status` keeps its table check: the
-- generated column `unsettled` reads it, and changing its type would
-- rewrite the table.
--
-- No table is rewritten: each domain is created without its check, the
-- columns change to it (the same stored type), and the check is added NOT
-- VALID, like the table checks it replaces (rows already stored are not
-- checked; every value written from now on is). The indexes that name a
-- changed column are built again (`outbox`'s partial indexes on `state`,
-- `operations_reference`), which reads those tables once. The view
-- `failwell_outbox` and the two triggers that name changed columns are made
-- again, the same; the privileges granted on the view or on some of its
-- columns are granted again. The view's columns keep their types (`text`,
-- `bigint`). The changed columns' statistics, which the type change drops,
-- are read again at the end.

-- The privileges granted on the view, as the statements that grant them.
CREATE TEMPORARY TABLE failwell_outbox_grants ON COMMIT DROP AS
SELECT format('GRANT %s ON failwell_outbox TO %s%s', privilege_type,
              CASE WHEN grantee = 'PUBLIC' THEN 'PUBLIC' ELSE quote_ident(grantee) END,
              CASE WHEN is_grantable = 'YES' THEN ' WITH GRANT OPTION' ELSE '' END) AS statement
FROM information_schema.role_table_grants
WHERE table_schema = current_schema() AND table_name = 'failwell_outbox' AND grantee <> current_user
UNION ALL
-- Privileges granted on some of its columns only.
SELECT format('GRANT %s (%I) ON failwell_outbox TO %s%s', a.privilege_type, c.attname,
              CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END,
              CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
FROM pg_attribute c CROSS JOIN LATERAL aclexplode(c.attacl) AS a
WHERE c.attrelid = 'failwell_outbox'::regclass AND c.attnum > 0
  AND a.grantee <> (SELECT oid FROM pg_roles WHERE rolname = current_user);

DROP VIEW failwell_outbox;
DROP TRIGGER outbox_history_purge ON outbox;
DROP TRIGGER outbox_history_state ON outbox;

-- A count: 0 to 2^31 - 1 (0012's rule).
CREATE DOMAIN failwell_count AS bigint;
-- A flag: 0 or 1.
CREATE DOMAIN failwell_flag AS bigint;
-- A delay or a time in ms since 1970: not negative.
CREATE DOMAIN failwell_non_negative AS bigint;
-- A message's delivery state.
CREATE DOMAIN failwell_message_state AS text;
-- What a history row is about.
CREATE DOMAIN failwell_history_subject AS text;
-- An operation's reference at its provider: not empty or blank.
CREATE DOMAIN failwell_reference AS text;

ALTER TABLE outbox
    DROP CONSTRAINT outbox_state_check,
    DROP CONSTRAINT outbox_numbers_in_range,
    ALTER COLUMN state TYPE failwell_message_state,
    ALTER COLUMN attempts TYPE failwell_count,
    ALTER COLUMN previous_delay_ms TYPE failwell_non_negative,
    ALTER COLUMN in_flight TYPE failwell_flag,
    ALTER COLUMN updated_at_ms TYPE failwell_non_negative;
ALTER TABLE operations
    DROP CONSTRAINT operations_reference_not_blank,
    DROP CONSTRAINT operations_numbers_in_range,
    ALTER COLUMN reference TYPE failwell_reference,
    ALTER COLUMN attempts TYPE failwell_count,
    ALTER COLUMN reconcile_attempts TYPE failwell_count,
    ALTER COLUMN lookup_misses TYPE failwell_count,
    ALTER COLUMN effect_possible TYPE failwell_flag;
ALTER TABLE history
    DROP CONSTRAINT history_subject_check,
    ALTER COLUMN subject TYPE failwell_history_subject;

ALTER DOMAIN failwell_count ADD CONSTRAINT failwell_count_in_range
    CHECK (VALUE BETWEEN 0 AND 2147483647) NOT VALID;
ALTER DOMAIN failwell_flag ADD CONSTRAINT failwell_flag_in_range CHECK (VALUE IN (0, 1)) NOT VALID;
ALTER DOMAIN failwell_non_negative ADD CONSTRAINT failwell_non_negative_in_range CHECK (VALUE >= 0) NOT VALID;
ALTER DOMAIN failwell_message_state ADD CONSTRAINT failwell_message_state_known
    CHECK (VALUE IN ('pending', 'done', 'dead')) NOT VALID;
ALTER DOMAIN failwell_history_subject ADD CONSTRAINT failwell_history_subject_known
    CHECK (VALUE IN ('operation', 'message', 'forward')) NOT VALID;
-- The name docs/OUTBOX.md gives applications.
ALTER DOMAIN failwell_reference ADD CONSTRAINT operations_reference_not_blank
    CHECK (btrim(VALUE) <> '') NOT VALID;

-- 0004's and 0008's triggers, unchanged.
CREATE TRIGGER outbox_history_purge AFTER DELETE ON outbox
    FOR EACH ROW WHEN (OLD.state <> 'done') EXECUTE FUNCTION failwell_state_changed();
CREATE TRIGGER outbox_history_state AFTER UPDATE OF state ON outbox
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state
                       AND current_setting('failwell.history_written', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION failwell_message_changed();

-- 0015's view; the changed columns are shown with their stored types.
CREATE VIEW failwell_outbox AS
SELECT o.id, o.provider, o.operation, failwell_stored_json(o.payload) AS payload, o.idempotency_key,
       o.reference::text AS reference, x.ordering_key, to_timestamp(x.available_at_ms / 1000.0) AS available_at,
       o.status, x.state::text AS delivery, x.attempts::bigint AS attempts, x.last_error, o.hold_id
FROM operations o JOIN outbox x ON x.operation_id = o.id;

COMMENT ON VIEW failwell_outbox IS
    'Insert (provider, operation, payload [, idempotency_key, reference, ordering_key, available_at, hold_id]) in your own transaction; see docs/OUTBOX.md';

CREATE TRIGGER failwell_outbox_insert INSTEAD OF INSERT ON failwell_outbox
    FOR EACH ROW EXECUTE FUNCTION failwell_outbox_insert();
CREATE TRIGGER failwell_outbox_notify AFTER INSERT ON failwell_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION failwell_outbox_notify();

DO $$
DECLARE
    statement text;
BEGIN
    FOR statement IN SELECT g.statement FROM failwell_outbox_grants g LOOP
        EXECUTE statement;
    END LOOP;
END $$;

-- A column's type change drops its statistics: the planner's estimates for
-- the claims' partial indexes come back now, not at autovacuum's next
-- ANALYZE.
ANALYZE outbox (state, attempts, previous_delay_ms, in_flight, updated_at_ms);
ANALYZE operations (reference, attempts, reconcile_attempts, lookup_misses, effect_possible);
ANALYZE history (subject);
