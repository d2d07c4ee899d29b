-- Many intents in one statement: `failwell_enqueue(provider, operation,
-- payloads json[], ...)`, a set-based path for an application that
-- enqueues in bulk (what pgmq's `send_batch` is to pgmq). The view's
-- `INSTEAD OF` trigger runs once per row and starts PostgreSQL's executor
-- for each; this function checks, hashes and writes all its intents with
-- one statement per table. The view's trigger now calls it with one intent,
-- so both ways in check and write the same way, with the same errors.
--
-- What it does, per intent (the arrays are read by position; an absent
-- array is all NULL):
-- - the view's checks, in the view's order, with the view's errors
--   (`23502`, `23514`), naming the intent's position when there are many;
-- - one operation, its message and its `created` history row, as the view
--   writes them; ordering keys and `available_at` are written with the
--   message (no second update, as `failwell_schedule` did);
-- - a replay (the same key and request) writes nothing; the same key with
--   another request, or a reference another operation of the provider
--   holds, is refused (`23505`) as by the view; so is a repeat inside the
--   batch;
-- - `hold_ids` tie ledger holds to the new operations, as the view's
--   `hold_id` does.
-- Operations and messages take their ids in the payloads' order (the scan
-- of `unnest … WITH ORDINALITY` returns its rows in order), so messages of
-- one ordering key are delivered in the order they were given.
--
-- Returns one row per intent, in order: the operation's id, its
-- idempotency key, and whether this call created it (false: a replay).

-- Raises `refusal`: its first five characters are the SQLSTATE, the rest
-- the message. For use in a CASE arm, which runs only when taken.
CREATE FUNCTION failwell_raise(refusal text) RETURNS jsonb LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION '%', substr(refusal, 7) USING ERRCODE = left(refusal, 5);
END $$;

-- Whether `payload` holds a number with more than 1000 digits before or
-- after the decimal point, written out in full. (A function, so that the
-- statement calling it starts no subquery unless it is called.)
CREATE FUNCTION failwell_holds_long_number(payload jsonb) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT FROM jsonb_path_query(payload, 'strict $.** ? (@.type() == "number")') AS v (n)
                   WHERE abs(v.n::numeric) >= 1e1000 OR scale(v.n::numeric) > 1000)
$$;

CREATE FUNCTION failwell_enqueue(provider text, operation text, payloads json[],
                                 idempotency_keys text[] DEFAULT NULL, refs text[] DEFAULT NULL,
                                 ordering_keys text[] DEFAULT NULL, available_at timestamptz[] DEFAULT NULL,
                                 hold_ids text[] DEFAULT NULL)
RETURNS TABLE (id bigint, idempotency_key text, created boolean) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    now_ms bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    total integer := COALESCE(cardinality(payloads), 0);
    mismatch text;
    ns bigint[];
    ids bigint[];
    keys text[];
    hashes text[];
    news boolean[];
    refusal text;
    i integer;
    jit_was text;
BEGIN
    mismatch := CASE
        WHEN cardinality(idempotency_keys) <> total THEN 'idempotency_keys'
        WHEN cardinality(refs) <> total THEN 'refs'
        WHEN cardinality(ordering_keys) <> total THEN 'ordering_keys'
        WHEN cardinality(failwell_enqueue.available_at) <> total THEN 'available_at'
        WHEN cardinality(hold_ids) <> total THEN 'hold_ids' END;
    IF mismatch IS NOT NULL THEN
        RAISE EXCEPTION 'failwell_enqueue: % has a different number of entries than payloads (%); give one per payload, or none',
            mismatch, total USING ERRCODE = 'array_subscript_error';
    END IF;
    IF total = 0 THEN
        RETURN;
    END IF;
    -- A large batch's plan costs enough for PostgreSQL to compile it (JIT),
    -- which takes longer than the statement runs; for this statement only.
    IF total > 100 THEN
        jit_was := current_setting('jit');
        PERFORM set_config('jit', 'off', true);
    END IF;
    -- The operations, their messages and history rows in one statement; the
    -- `operations_created` trigger leaves this statement's rows to it.
    PERFORM set_config('failwell.enqueue', 'contract', true);
    -- The intents, parsed when they are objects within the size limit.
    WITH given AS MATERIALIZED (
        SELECT g.n, g.payload, g.payload::text AS written, g.key, g.reference, g.ordering_key, g.available_at,
               CASE WHEN json_typeof(g.payload) = 'object' AND octet_length(g.payload::text) <= 1048576
                    THEN g.payload::jsonb END AS canonical,
               CASE WHEN total > 1 THEN format(' (intent %s)', g.n) ELSE '' END AS at
        FROM unnest(payloads, idempotency_keys, refs, ordering_keys, failwell_enqueue.available_at)
             WITH ORDINALITY AS g (payload, key, reference, ordering_key, available_at, n)),
    -- The view's checks in the view's order, then the request hash. The
    -- checks of the parsed payload run only when it could fail them: 128
    -- nested containers take at least 256 characters; a number with more
    -- than 1000 digits is longer than 1000 characters or written with an
    -- exponent; a key can read as the reserved prefix only when the text
    -- holds it or a `\u` escape.
    checked AS MATERIALIZED (
        SELECT g.*, CASE
            WHEN failwell_enqueue.provider IS NULL OR failwell_enqueue.operation IS NULL OR g.payload IS NULL THEN
                failwell_raise('23502 failwell_outbox: provider, operation and payload are required' || g.at)
            WHEN g.key !~ '\S' OR failwell_enqueue.provider !~ '\S' OR failwell_enqueue.operation !~ '\S' THEN
                failwell_raise('23514 failwell_outbox: provider, operation and idempotency_key must not be empty or blank' || g.at)
            WHEN g.ordering_key !~ '\S' THEN
                failwell_raise('23514 failwell_outbox: ordering_key must not be empty or blank' || g.at)
            WHEN json_typeof(g.payload) <> 'object' THEN
                failwell_raise(format('23514 failwell_outbox: payload must be a JSON object, not %s%s',
                                      json_typeof(g.payload), g.at))
            WHEN octet_length(g.written) > 1048576 THEN
                failwell_raise(format('23514 failwell_outbox: payload is %s bytes; at most 1048576 (1 MiB)%s',
                                      octet_length(g.written), g.at))
            WHEN octet_length(g.written) >= 256 AND jsonb_path_exists(g.canonical,
                     'strict $.**{127} ? (@.type() == "array" || @.type() == "object")') THEN
                failwell_raise('23514 failwell_outbox: payload nests arrays and objects deeper than 127 levels' || g.at)
            WHEN (octet_length(g.written) > 1000 OR g.written ~ '[0-9][eE]') AND failwell_holds_long_number(g.canonical) THEN
                failwell_raise('23514 failwell_outbox: payload holds a number with more than 1000 digits before or after the decimal point, written out in full' || g.at)
            WHEN (strpos(g.written, '$serde_json::private::') > 0 OR strpos(g.written, '\u') > 0) AND jsonb_path_exists(g.canonical,
                     'strict $.** ? (@.type() == "object").keyvalue() ? (@.key starts with "$serde_json::private::")') THEN
                failwell_raise('23514 failwell_outbox: payload holds a key starting with $serde_json::private::, which failwell''s JSON reader reserves' || g.at)
            WHEN g.available_at IS NOT NULL
                 AND (NOT isfinite(g.available_at) OR g.available_at > clock_timestamp() + interval '1 year') THEN
                failwell_raise(format('23514 failwell_outbox: available_at %s is not a time within a year from now%s',
                                      g.available_at, g.at))
            END AS refused,
            failwell_request_hash(failwell_enqueue.provider, failwell_enqueue.operation, g.canonical) AS hash,
            (extract(epoch FROM g.available_at) * 1000)::bigint AS due_ms
        FROM given g),
    keyed AS (
        SELECT c.*, COALESCE(c.key, 'sha256:' || c.hash) AS idem FROM checked c WHERE c.refused IS NULL),
    -- Rows are written in the intents' order, so operations take their ids
    -- in that order (a scan of a CTE returns its rows in the order they
    -- were written). A key given twice is written once.
    operation AS (
        INSERT INTO operations (idempotency_key, provider, operation, reference, payload, request_hash,
                                provider_key, created_at_ms, updated_at_ms, changed_by, not_before_ms)
        SELECT k.idem, failwell_enqueue.provider, failwell_enqueue.operation, k.reference,
               k.written, k.hash, failwell_provider_key(failwell_enqueue.provider, failwell_enqueue.operation, k.idem, 0),
               now_ms, now_ms, 'app', CASE WHEN k.due_ms > now_ms THEN k.due_ms END
        FROM keyed k
        ON CONFLICT DO NOTHING
        RETURNING operations.id, operations.idempotency_key, operations.not_before_ms),
    -- Each new operation, with the first intent that gave its key.
    made AS (
        SELECT DISTINCT ON (o.id) o.id, k.n, k.ordering_key, o.not_before_ms
        FROM operation o JOIN keyed k ON k.idem = o.idempotency_key
        ORDER BY o.id, k.n),
    message AS (
        INSERT INTO outbox (operation_id, provider, ordering_key, available_at_ms, created_at_ms, updated_at_ms)
        SELECT m.id, failwell_enqueue.provider, m.ordering_key, GREATEST(now_ms, m.not_before_ms), now_ms, now_ms
        FROM made m),
    history AS (
        INSERT INTO history (subject, subject_id, operation_id, at_ms, actor, change)
        SELECT 'operation', m.id, m.id, now_ms, 'app', 'created' FROM made m)
    SELECT array_agg(r.n), array_agg(r.id), array_agg(r.idem), array_agg(r.hash), array_agg(r.id IS NOT NULL)
    INTO ns, ids, keys, hashes, news
    FROM (SELECT k.n, m.id, k.idem, k.hash FROM keyed k LEFT JOIN made m ON m.n = k.n ORDER BY k.n) r;
    PERFORM set_config('failwell.enqueue', '', true);
    IF jit_was IS NOT NULL THEN
        PERFORM set_config('jit', jit_was, true);
    END IF;

    -- The intents not written: replays, or refused.
    IF NOT (true = ALL (news)) THEN
        SELECT CASE
                   WHEN s.request_hash IS NULL THEN
                       format('failwell_outbox: reference %s already belongs to another operation of provider %s%s',
                              refs[r.n], failwell_enqueue.provider, CASE WHEN total > 1 THEN format(' (intent %s)', r.n) ELSE '' END)
                   WHEN s.request_hash <> r.hash THEN
                       format('failwell_outbox: idempotency key %s was already used with a different request%s',
                              r.key, CASE WHEN total > 1 THEN format(' (intent %s)', r.n) ELSE '' END)
               END
        INTO refusal
        FROM unnest(ns, keys, hashes, news) AS r (n, key, hash, new)
        LEFT JOIN operations s ON s.idempotency_key = r.key
        WHERE NOT r.new AND (s.request_hash IS NULL OR s.request_hash <> r.hash)
        ORDER BY r.n
        LIMIT 1;
        IF refusal IS NOT NULL THEN
            RAISE EXCEPTION '%', refusal USING ERRCODE = 'unique_violation';
        END IF;
        SELECT array_agg(COALESCE(s.id, r.id) ORDER BY r.n) INTO ids
        FROM unnest(ns, ids, keys, news) AS r (n, id, key, new)
        LEFT JOIN operations s ON NOT r.new AND s.idempotency_key = r.key;
    END IF;

    -- Holds, one at a time and in order, as the view ties them.
    FOR i IN 1 .. COALESCE(cardinality(hold_ids), 0) LOOP
        CONTINUE WHEN hold_ids[i] IS NULL;
        refusal := failwell_hold_refusal(hold_ids[i], keys[i], NOT news[i]);
        IF refusal IS NOT NULL THEN
            RAISE EXCEPTION 'failwell_outbox: %', refusal || CASE WHEN total > 1 THEN format(' (intent %s)', i) ELSE '' END
                USING ERRCODE = CASE WHEN news[i] THEN 'check_violation' ELSE 'unique_violation' END;
        END IF;
        IF news[i] THEN
            UPDATE operations SET hold_id = hold_ids[i] WHERE operations.id = ids[i];
        END IF;
    END LOOP;

    RETURN QUERY SELECT r.id, r.key, r.new FROM unnest(ids, keys, news) AS r (id, key, new);
END $$;

COMMENT ON FUNCTION failwell_enqueue IS
    'Enqueue many intents of one provider operation in one statement, in your own transaction; see docs/OUTBOX.md';

-- The view's trigger: one intent through `failwell_enqueue`.
CREATE OR REPLACE FUNCTION failwell_outbox_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    written record;
BEGIN
    SELECT * INTO written
    FROM failwell_enqueue(NEW.provider, NEW.operation, ARRAY[NEW.payload], ARRAY[NEW.idempotency_key],
                          ARRAY[NEW.reference], ARRAY[NEW.ordering_key], ARRAY[NEW.available_at], ARRAY[NEW.hold_id]);
    IF NOT written.created THEN
        RETURN NULL;
    END IF;
    NEW.id := written.id;
    NEW.idempotency_key := written.idempotency_key;
    RETURN NEW;
END $$;
