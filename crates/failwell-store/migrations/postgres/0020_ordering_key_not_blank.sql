-- An ordering key names the sequence a message is delivered in: an empty
-- or blank one would put every such message of every application in one
-- sequence by accident. The outbox contract refuses it
-- (`check_violation`), before anything is written and on a replay too, as
-- `Outbox::enqueue` does. Rows written before are left as they are.
-- The function is 0016's with that one check added.
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
    IF NEW.ordering_key !~ '\S' THEN
        RAISE EXCEPTION 'failwell_outbox: ordering_key must not be empty or blank'
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
