-- Numbers are bounded before jsonb writes them out in full: a number such
-- as 1e131071 is a few bytes as written and 131072 digits as text, and the
-- request hash is taken over jsonb's text. At most 1000 digits before the
-- decimal point and 1000 after, as the HTTP API and Outbox::enqueue take.
-- Provider, operation and key must not be blank either (as Outbox::enqueue
-- refuses them).
CREATE OR REPLACE FUNCTION failwell_outbox_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    now_ms bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    canonical jsonb;
    hash text;
    key text;
    new_id bigint;
    stored text;
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
    IF octet_length(NEW.payload::text) > 1048576 THEN
        RAISE EXCEPTION 'failwell_outbox: payload is % bytes; at most 1048576 (1 MiB)',
            octet_length(NEW.payload::text) USING ERRCODE = 'check_violation';
    END IF;
    -- Also refuses what jsonb cannot hold (\u0000 in a string), with
    -- PostgreSQL's own message.
    canonical := NEW.payload::jsonb;
    -- Level 0 is the payload object itself: a container at level 127 is
    -- the 128th nested one, more than failwell reads back.
    IF jsonb_path_exists(canonical, 'strict $.**{127} ? (@.type() == "array" || @.type() == "object")') THEN
        RAISE EXCEPTION 'failwell_outbox: payload nests arrays and objects deeper than 127 levels'
            USING ERRCODE = 'check_violation';
    END IF;
    -- jsonb keeps a number compact (1e131071 is a few bytes) but writes
    -- it out in full (131072 digits) wherever it becomes text, as the
    -- request hash does: each number is bounded before that happens.
    IF EXISTS (SELECT FROM jsonb_path_query(canonical, 'strict $.** ? (@.type() == "number")') AS v (n)
               WHERE abs(n::numeric) >= 1e1000 OR scale(n::numeric) > 1000) THEN
        RAISE EXCEPTION 'failwell_outbox: payload holds a number with more than 1000 digits before or after the decimal point, written out in full'
            USING ERRCODE = 'check_violation';
    END IF;
    -- serde_json's reader takes objects with these keys for its own
    -- markers: they would not read back as written.
    -- (jsonb's text has the keys' escapes read: `\u0024` is `$` there.)
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
