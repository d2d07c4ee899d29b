-- The outbox contract: what an application written in any language inserts,
-- with plain SQL, in the transaction that changes its own state (see
-- docs/OUTBOX.md). `failwell_outbox` is a view; inserting into it records
-- the intent (an operations row) and its message (an outbox row) exactly
-- as failwell's own API does, after the checks the API makes: the payload
-- is a JSON object of at most 1 MiB, and available_at is a finite time less
-- than a year ahead (a message scheduled further is almost surely a
-- mistake, and would sit unseen).

-- SHA-256 (hex) of the request: provider, operation and payload as one
-- jsonb array, in jsonb's canonical text (object keys sorted, duplicates
-- dropped), so key order in the application's JSON does not matter. A key
-- used again with the same hash is a replay; with another hash, a misuse.
CREATE FUNCTION failwell_request_hash(provider text, operation text, payload jsonb) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN encode(sha256(convert_to(jsonb_build_array(provider, operation, payload)::text, 'UTF8')), 'hex');

-- The idempotency key sent to the provider for an intent and key group:
-- `fw_` and the first 16 bytes (hex) of SHA-256 over each part's length
-- (8 bytes, big-endian) and bytes, then the group (4 bytes, big-endian).
-- The same scheme as `failwell_policy::derive_key` (a test holds them equal).
CREATE FUNCTION failwell_provider_key(provider text, operation text, intent text, key_group integer)
RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN 'fw_' || encode(substring(sha256(
    int8send(octet_length(provider)::bigint) || convert_to(provider, 'UTF8') ||
    int8send(octet_length(operation)::bigint) || convert_to(operation, 'UTF8') ||
    int8send(octet_length(intent)::bigint) || convert_to(intent, 'UTF8') ||
    int4send(key_group)) FROM 1 FOR 16), 'hex');

-- Messages of one ordering key are delivered one at a time, in id order:
-- the next is not claimed before the previous one is done or dead.
ALTER TABLE outbox ADD COLUMN ordering_key text;
-- A message enqueued with a later `available_at`: its delivery (deadline,
-- retry budget) counts from then, not from when it was written.
ALTER TABLE operations ADD COLUMN not_before_ms bigint;
CREATE INDEX outbox_ordering ON outbox (ordering_key, id) WHERE state = 'pending' AND ordering_key IS NOT NULL;

-- The message's provider, copied from its operation: a claim takes each
-- available provider's due messages in turns, from this index, and leaves
-- those of a provider whose breaker is open or which is paused where they
-- are (no attempt spent, nothing written).
ALTER TABLE outbox ADD COLUMN provider text;
UPDATE outbox x SET provider = o.provider FROM operations o WHERE o.id = x.operation_id;
ALTER TABLE outbox ALTER COLUMN provider SET NOT NULL;
CREATE INDEX outbox_provider_due ON outbox (provider, available_at_ms, id) WHERE state = 'pending';

CREATE OR REPLACE FUNCTION failwell_operation_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox (operation_id, provider, available_at_ms, created_at_ms, updated_at_ms)
    VALUES (NEW.id, NEW.provider, NEW.created_at_ms, NEW.created_at_ms, NEW.created_at_ms);
    INSERT INTO history (subject, subject_id, operation_id, at_ms, actor, change)
    VALUES ('operation', NEW.id, NEW.id, NEW.created_at_ms, NEW.changed_by, 'created');
    RETURN NULL;
END $$;

-- Gives a new message its ordering key and, when later than now, the
-- time it becomes due (its delivery counts from then).
CREATE FUNCTION failwell_schedule(operation_id bigint, ordering_key text, available_at_ms bigint)
RETURNS void LANGUAGE sql AS $$
    UPDATE outbox SET ordering_key = $2, available_at_ms = GREATEST(available_at_ms, COALESCE($3, 0))
    WHERE outbox.operation_id = $1;
    UPDATE operations SET not_before_ms = $3 WHERE id = $1 AND $3 > created_at_ms;
$$;

CREATE VIEW failwell_outbox AS
SELECT o.id, o.provider, o.operation, o.payload::jsonb AS payload, o.idempotency_key, o.reference,
       x.ordering_key, to_timestamp(x.available_at_ms / 1000.0) AS available_at, o.status,
       x.state AS delivery, x.attempts, x.last_error
FROM operations o JOIN outbox x ON x.operation_id = o.id;

COMMENT ON VIEW failwell_outbox IS
    'Insert (provider, operation, payload [, idempotency_key, reference, ordering_key, available_at]) in your own transaction; see docs/OUTBOX.md';

CREATE FUNCTION failwell_outbox_insert() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE TRIGGER failwell_outbox_insert INSTEAD OF INSERT ON failwell_outbox
    FOR EACH ROW EXECUTE FUNCTION failwell_outbox_insert();
