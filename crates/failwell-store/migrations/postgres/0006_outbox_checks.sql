-- The outbox contract checks what the HTTP API checks before anything is
-- written: the payload is a JSON object of at most 1 MiB, and available_at
-- is a finite time less than a year ahead (a message scheduled further is
-- almost surely a mistake, and would sit unseen).
CREATE OR REPLACE FUNCTION failwell_outbox_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    now_ms bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    hash text;
    key text;
    new_id bigint;
    stored text;
BEGIN
    IF NEW.provider IS NULL OR NEW.operation IS NULL OR NEW.payload IS NULL THEN
        RAISE EXCEPTION 'failwell_outbox: provider, operation and payload are required'
            USING ERRCODE = 'not_null_violation';
    END IF;
    IF NEW.idempotency_key = '' OR NEW.provider = '' OR NEW.operation = '' THEN
        RAISE EXCEPTION 'failwell_outbox: provider, operation and idempotency_key must not be empty'
            USING ERRCODE = 'check_violation';
    END IF;
    IF jsonb_typeof(NEW.payload) <> 'object' THEN
        RAISE EXCEPTION 'failwell_outbox: payload must be a JSON object, not %', jsonb_typeof(NEW.payload)
            USING ERRCODE = 'check_violation';
    END IF;
    IF octet_length(NEW.payload::text) > 1048576 THEN
        RAISE EXCEPTION 'failwell_outbox: payload is % bytes; at most 1048576 (1 MiB)',
            octet_length(NEW.payload::text) USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.available_at IS NOT NULL
       AND (NOT isfinite(NEW.available_at) OR NEW.available_at > clock_timestamp() + interval '1 year') THEN
        RAISE EXCEPTION 'failwell_outbox: available_at % is not a time within a year from now', NEW.available_at
            USING ERRCODE = 'check_violation';
    END IF;
    hash := failwell_request_hash(NEW.provider, NEW.operation, NEW.payload);
    -- Without a key, the intent is the request itself: the same provider,
    -- operation and payload enqueued twice is one message.
    key := COALESCE(NEW.idempotency_key, 'sha256:' || hash);
    INSERT INTO operations (idempotency_key, provider, operation, reference, payload, request_hash,
                            provider_key, created_at_ms, updated_at_ms, changed_by)
    VALUES (key, NEW.provider, NEW.operation, NEW.reference, NEW.payload::text, hash,
            failwell_provider_key(NEW.provider, NEW.operation, key, 0), now_ms, now_ms, 'app')
    ON CONFLICT DO NOTHING
    RETURNING id INTO new_id;
    IF new_id IS NULL THEN
        SELECT request_hash INTO stored FROM operations WHERE idempotency_key = key;
        IF stored IS NULL THEN
            RAISE EXCEPTION 'failwell_outbox: reference % already belongs to another operation of provider %',
                NEW.reference, NEW.provider USING ERRCODE = 'unique_violation';
        ELSIF stored <> hash THEN
            RAISE EXCEPTION 'failwell_outbox: idempotency key % was already used with a different request', key
                USING ERRCODE = 'unique_violation';
        END IF;
        -- The same request again: a replay, nothing is written.
        RETURN NULL;
    END IF;
    IF NEW.ordering_key IS NOT NULL OR NEW.available_at IS NOT NULL THEN
        PERFORM failwell_schedule(new_id, NEW.ordering_key, (extract(epoch FROM NEW.available_at) * 1000)::bigint);
    END IF;
    NEW.id := new_id;
    NEW.idempotency_key := key;
    RETURN NEW;
END $$;
