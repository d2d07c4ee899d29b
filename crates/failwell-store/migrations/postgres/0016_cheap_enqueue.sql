-- A cheap enqueue: an insert into `failwell_outbox` costs the application's
-- transaction less. One row through the view was four statements and
-- four trigger calls inside PostgreSQL (the operation; from its trigger,
-- the message and the history row; a notice per message), each statement
-- starting an executor of its own. Now:
--
-- - The request hash and the provider key are computed inline: the two
--   functions are STABLE (what `jsonb_build_array` and `convert_to` are)
--   and not STRICT (they return NULL for a NULL argument all the same), so
--   the planner folds their bodies into the statement that calls them
--   instead of running a SQL function per row. Same values as before.
-- - The view's trigger writes the operation, its message and its history
--   row in one statement. It says so with the transaction-local setting
--   `failwell.enqueue = contract` for that statement only, and the
--   `operations_created` trigger leaves those rows alone; every other
--   insert into `operations` still gets its message and its history row
--   from that trigger. (A setting changed inside a statement that fails is
--   undone with it, savepoints included.)
-- - The message no longer has a foreign key to its operation: messages are
--   written only beside their operation, from its row, and operations are
--   never deleted; the key's check locked the operation per message.
-- - The notice that wakes the relays (`failwell_outbox`) is sent once per
--   statement that enqueues: a statement on the view, or an insert into
--   `operations` or `outbox` that is not itself inside a trigger, instead
--   of once per message written from the view's trigger.
-- - The checks of the payload's depth and numbers run only when the
--   payload could fail them (at least 256 characters for 128 nested
--   containers; more than 1000 characters, or an exponent, for a number
--   with more than 1000 digits).

CREATE OR REPLACE FUNCTION failwell_request_hash(provider text, operation text, payload jsonb) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
RETURN CASE WHEN provider IS NOT NULL AND operation IS NOT NULL AND payload IS NOT NULL THEN
    encode(sha256(convert_to(jsonb_build_array(provider, operation, payload)::text, 'UTF8')), 'hex') END;

CREATE OR REPLACE FUNCTION failwell_provider_key(provider text, operation text, intent text, key_group integer)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE
RETURN CASE WHEN provider IS NOT NULL AND operation IS NOT NULL AND intent IS NOT NULL AND key_group IS NOT NULL THEN
    'fw_' || encode(substring(sha256(
        int8send(octet_length(provider)::bigint) || convert_to(provider, 'UTF8') ||
        int8send(octet_length(operation)::bigint) || convert_to(operation, 'UTF8') ||
        int8send(octet_length(intent)::bigint) || convert_to(intent, 'UTF8') ||
        int4send(key_group)) FROM 1 FOR 16), 'hex') END;

ALTER TABLE outbox DROP CONSTRAINT outbox_operation_id_fkey;

DROP TRIGGER operations_created ON operations;
CREATE TRIGGER operations_created AFTER INSERT ON operations
    FOR EACH ROW WHEN (current_setting('failwell.enqueue', true) IS DISTINCT FROM 'contract')
    EXECUTE FUNCTION failwell_operation_created();

DROP TRIGGER outbox_notify ON outbox;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1) EXECUTE FUNCTION failwell_outbox_notify();
CREATE TRIGGER operations_notify AFTER INSERT ON operations
    FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1) EXECUTE FUNCTION failwell_outbox_notify();
CREATE TRIGGER failwell_outbox_notify AFTER INSERT ON failwell_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION failwell_outbox_notify();

-- 0015's function: one statement for the operation, its message and its
-- history row; the payload's text read once.
CREATE OR REPLACE FUNCTION failwell_outbox_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    now_ms bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    written text := NEW.payload::text;
    canonical jsonb;
    hash text;
    key text;
    new_id bigint;
    stored text;
    refusal text;
BEGIN
    IF NEW.provider IS NULL OR NEW.operation IS NULL OR NEW.payload IS NULL THEN
        RAISE EXCEPTION 'failwell_outbox: provider, operation and payload are required'
            USING ERRCODE = 'not_null_violation';
    END IF;
    IF NEW.idempotency_key !~ '\S' OR NEW.provider !~ '\S' OR NEW.operation !~ '\S' THEN
        RAISE EXCEPTION 'failwell_outbox: provider, operation and idempotency_key must not be empty or blank'
            USING ERRCODE = 'check_violation';
    END IF;
    IF json_typeof(NEW.payload) <> 'object' THEN
        RAISE EXCEPTION 'failwell_outbox: payload must be a JSON object, not %', json_typeof(NEW.payload)
            USING ERRCODE = 'check_violation';
    END IF;
    IF octet_length(written) > 1048576 THEN
        RAISE EXCEPTION 'failwell_outbox: payload is % bytes; at most 1048576 (1 MiB)',
            octet_length(written) USING ERRCODE = 'check_violation';
    END IF;
    canonical := NEW.payload::jsonb;
    -- 128 nested containers take at least 256 characters.
    IF octet_length(written) >= 256 AND jsonb_path_exists(canonical, 'strict $.**{127} ? (@.type() == "array" || @.type() == "object")') THEN
        RAISE EXCEPTION 'failwell_outbox: payload nests arrays and objects deeper than 127 levels'
            USING ERRCODE = 'check_violation';
    END IF;
    -- Such a number is either more than 1000 characters long or written
    -- with an exponent (a digit, then e or E).
    IF (octet_length(written) > 1000 OR written ~ '[0-9][eE]') AND EXISTS (SELECT FROM jsonb_path_query(canonical, 'strict $.** ? (@.type() == "number")') AS v (n)
               WHERE abs(n::numeric) >= 1e1000 OR scale(n::numeric) > 1000) THEN
        RAISE EXCEPTION 'failwell_outbox: payload holds a number with more than 1000 digits before or after the decimal point, written out in full'
            USING ERRCODE = 'check_violation';
    END IF;
    IF strpos(canonical::text, '$serde_json::private::') > 0 AND jsonb_path_exists(canonical,
        'strict $.** ? (@.type() == "object").keyvalue() ? (@.key starts with "$serde_json::private::")') THEN
        RAISE EXCEPTION 'failwell_outbox: payload holds a key starting with $serde_json::private::, which failwell''s JSON reader reserves'
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.available_at IS NOT NULL
       AND (NOT isfinite(NEW.available_at) OR NEW.available_at > clock_timestamp() + interval '1 year') THEN
        RAISE EXCEPTION 'failwell_outbox: available_at % is not a time within a year from now', NEW.available_at
            USING ERRCODE = 'check_violation';
    END IF;
    hash := failwell_request_hash(NEW.provider, NEW.operation, canonical);
    key := COALESCE(NEW.idempotency_key, 'sha256:' || hash);
    -- The operation, its message and its history row in one statement; the
    -- `operations_created` trigger leaves this statement's row to it.
    PERFORM set_config('failwell.enqueue', 'contract', true);
    WITH operation AS (
        INSERT INTO operations (idempotency_key, provider, operation, reference, payload, request_hash,
                                provider_key, created_at_ms, updated_at_ms, changed_by)
        VALUES (key, NEW.provider, NEW.operation, NEW.reference, written, hash,
                failwell_provider_key(NEW.provider, NEW.operation, key, 0), now_ms, now_ms, 'app')
        ON CONFLICT DO NOTHING
        RETURNING id, provider),
    message AS (
        INSERT INTO outbox (operation_id, provider, available_at_ms, created_at_ms, updated_at_ms)
        SELECT id, provider, now_ms, now_ms, now_ms FROM operation),
    created AS (
        INSERT INTO history (subject, subject_id, operation_id, at_ms, actor, change)
        SELECT 'operation', id, id, now_ms, 'app', 'created' FROM operation)
    SELECT id INTO new_id FROM operation;
    PERFORM set_config('failwell.enqueue', '', true);
    IF new_id IS NULL THEN
        SELECT request_hash INTO stored FROM operations WHERE idempotency_key = key;
        IF stored IS NULL THEN
            RAISE EXCEPTION 'failwell_outbox: reference % already belongs to another operation of provider %',
                NEW.reference, NEW.provider USING ERRCODE = 'unique_violation';
        ELSIF stored <> hash THEN
            RAISE EXCEPTION 'failwell_outbox: idempotency key % was already used with a different request', key
                USING ERRCODE = 'unique_violation';
        END IF;
        IF NEW.hold_id IS NOT NULL THEN
            refusal := failwell_hold_refusal(NEW.hold_id, key, true);
            IF refusal IS NOT NULL THEN
                RAISE EXCEPTION 'failwell_outbox: %', refusal USING ERRCODE = 'unique_violation';
            END IF;
        END IF;
        RETURN NULL;
    END IF;
    IF NEW.hold_id IS NOT NULL THEN
        refusal := failwell_hold_refusal(NEW.hold_id, key, false);
        IF refusal IS NOT NULL THEN
            RAISE EXCEPTION 'failwell_outbox: %', refusal USING ERRCODE = 'check_violation';
        END IF;
        UPDATE operations SET hold_id = NEW.hold_id WHERE id = new_id;
    END IF;
    IF NEW.ordering_key IS NOT NULL OR NEW.available_at IS NOT NULL THEN
        PERFORM failwell_schedule(new_id, NEW.ordering_key, (extract(epoch FROM NEW.available_at) * 1000)::bigint);
    END IF;
    NEW.id := new_id;
    NEW.idempotency_key := key;
    RETURN NEW;
END $$;
