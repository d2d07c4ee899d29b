-- What an application stores through the outbox contract is what the
-- provider receives. The view's `payload` column becomes `json` (the text as
-- written: numbers with all their digits and notation, keys in their order)
-- instead of `jsonb` (which rewrites `1e-400` as 400 digits and sorts keys).
-- jsonb values still insert (PostgreSQL casts jsonb to json on assignment).
-- The request hash stays jsonb's canonical text, so key order still does not
-- make two requests different.
--
-- The trigger also refuses what failwell could not read back: arrays and
-- objects nested deeper than 127 levels, and keys serde_json reserves
-- (`$serde_json::private::…`). A number beyond PostgreSQL's numeric is
-- refused by the cast to jsonb (22003). A view's column type cannot change
-- in place, so the view is made again and the privileges granted on it are
-- granted again.

CREATE TEMPORARY TABLE failwell_outbox_grants ON COMMIT DROP AS
SELECT grantee, privilege_type, is_grantable = 'YES' AS grantable
FROM information_schema.role_table_grants
WHERE table_schema = current_schema() AND table_name = 'failwell_outbox' AND grantee <> current_user;

DROP VIEW failwell_outbox;

-- Stored text as json; a row whose text is not JSON (written by another
-- program) shows as a JSON string of that text instead of failing every
-- read of the view.
CREATE FUNCTION failwell_stored_json(stored text) RETURNS json LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN stored::json;
EXCEPTION WHEN invalid_text_representation THEN
    RETURN to_json(stored);
END $$;

CREATE VIEW failwell_outbox AS
SELECT o.id, o.provider, o.operation, failwell_stored_json(o.payload) AS payload, o.idempotency_key, o.reference,
       x.ordering_key, to_timestamp(x.available_at_ms / 1000.0) AS available_at, o.status,
       x.state AS delivery, x.attempts, x.last_error
FROM operations o JOIN outbox x ON x.operation_id = o.id;

COMMENT ON VIEW failwell_outbox IS
    'Insert (provider, operation, payload [, idempotency_key, reference, ordering_key, available_at]) in your own transaction; see docs/OUTBOX.md';

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
    IF NEW.idempotency_key = '' OR NEW.provider = '' OR NEW.operation = '' THEN
        RAISE EXCEPTION 'failwell_outbox: provider, operation and idempotency_key must not be empty'
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

CREATE TRIGGER failwell_outbox_insert INSTEAD OF INSERT ON failwell_outbox
    FOR EACH ROW EXECUTE FUNCTION failwell_outbox_insert();

DO $$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT * FROM failwell_outbox_grants LOOP
        EXECUTE format('GRANT %s ON failwell_outbox TO %s%s', g.privilege_type,
            CASE WHEN g.grantee = 'PUBLIC' THEN 'PUBLIC' ELSE quote_ident(g.grantee) END,
            CASE WHEN g.grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END $$;
