-- An intent's `created` event is read from its operation instead of being
-- written as a history row beside it: a row and its two index entries
-- fewer in the application's transaction, for every intent.
--
-- - `operations.created_by` names who recorded the intent (`app` for the
--   view and `failwell_enqueue`, the API's actor for `Outbox::enqueue`).
--   An operation's history shows `operation created` by that actor at
--   `created_at_ms`, as the history row did.
-- - An insert into `operations` that does not set it (an application's
--   own, say) still gets its `created` history row from the
--   `operations_created` trigger; so do the operations stored before this
--   migration, whose rows stay where they are (the history is
--   append-only). An operation has one or the other, never both.
-- - The history is append-only, so the creation is too: an update that
--   changes `created_by` or `created_at_ms` is refused. (The trigger runs
--   only for an update that sets one of them; failwell's never do.)

ALTER TABLE operations ADD COLUMN created_by text;

CREATE FUNCTION failwell_creation_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'operations.created_by and created_at_ms record the creation, and are append-only';
END $$;
CREATE TRIGGER operations_creation_fixed BEFORE UPDATE OF created_by, created_at_ms ON operations
    FOR EACH ROW WHEN (OLD.created_by IS DISTINCT FROM NEW.created_by OR OLD.created_at_ms <> NEW.created_at_ms)
    EXECUTE FUNCTION failwell_creation_fixed();

CREATE OR REPLACE FUNCTION failwell_operation_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox (operation_id, provider, available_at_ms, created_at_ms, updated_at_ms)
    VALUES (NEW.id, NEW.provider, NEW.created_at_ms, NEW.created_at_ms, NEW.created_at_ms);
    IF NEW.created_by IS NULL THEN
        INSERT INTO history (subject, subject_id, operation_id, at_ms, actor, change)
        VALUES ('operation', NEW.id, NEW.id, NEW.created_at_ms, NEW.changed_by, 'created');
    END IF;
    RETURN NULL;
END $$;

-- 0022's function, writing `created_by` instead of a history row.
CREATE OR REPLACE FUNCTION failwell_enqueue(provider text, operation text, payloads json[],
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
    references_given text[];
    refusal text;
    hold text;
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
    -- The operations and their messages in one statement; the
    -- `operations_created` trigger leaves this statement's rows to it.
    PERFORM set_config('failwell.enqueue', 'contract', true);
    -- The intents, checked as the view checks a row, in order, each with its
    -- request hash. A payload is parsed once (the subquery with OFFSET 0),
    -- and only when the checks of its text pass. Only what the inserts need
    -- is kept, so that a large batch spills little to disk.
    WITH checked AS MATERIALIZED (
        SELECT g.n, p.written, g.key, g.reference, g.ordering_key,
               failwell_raise(COALESCE(e.early, failwell_payload_refusal(p.written, p.canonical, g.available_at, a.at)))
                   AS refused,
               failwell_request_hash(failwell_enqueue.provider, failwell_enqueue.operation, p.canonical) AS hash,
               (extract(epoch FROM g.available_at) * 1000)::bigint AS due_ms
        FROM unnest(payloads, idempotency_keys, refs, ordering_keys, failwell_enqueue.available_at)
             WITH ORDINALITY AS g (payload, key, reference, ordering_key, available_at, n),
        LATERAL (SELECT CASE WHEN total > 1 THEN format(' (intent %s)', g.n) ELSE '' END AS at) a,
        LATERAL (SELECT failwell_text_refusal(failwell_enqueue.provider, failwell_enqueue.operation, g.payload,
                                              g.key, g.ordering_key, a.at) AS early) e,
        LATERAL (SELECT g.payload::text AS written,
                        CASE WHEN e.early IS NULL THEN g.payload::jsonb END AS canonical OFFSET 0) p),
    keyed AS NOT MATERIALIZED (
        SELECT c.*, COALESCE(c.key, 'sha256:' || c.hash) AS idem FROM checked c WHERE c.refused IS NULL),
    -- Rows are written in the intents' order, so operations take their ids
    -- in that order (a scan of a CTE returns its rows in the order they
    -- were written). A key given twice is written once.
    operation AS (
        INSERT INTO operations (idempotency_key, provider, operation, reference, payload, request_hash,
                                provider_key, created_at_ms, updated_at_ms, changed_by, created_by, not_before_ms)
        SELECT k.idem, failwell_enqueue.provider, failwell_enqueue.operation, k.reference,
               k.written, k.hash, failwell_provider_key(failwell_enqueue.provider, failwell_enqueue.operation, k.idem, 0),
               now_ms, now_ms, 'app', 'app', CASE WHEN k.due_ms > now_ms THEN k.due_ms END
        FROM keyed k
        ON CONFLICT DO NOTHING
        RETURNING operations.id, operations.idempotency_key, operations.request_hash, operations.reference,
                  operations.not_before_ms),
    -- Each new operation, with the intent it was written from: the first of
    -- those with its key, request and reference. (An earlier intent with the
    -- same key may have been left out for its reference.)
    made AS (
        SELECT DISTINCT ON (o.id) o.id, k.n, k.ordering_key, o.not_before_ms
        FROM operation o
        JOIN keyed k ON k.idem = o.idempotency_key AND k.hash = o.request_hash
                        AND k.reference IS NOT DISTINCT FROM o.reference
        ORDER BY o.id, k.n),
    message AS (
        INSERT INTO outbox (operation_id, provider, ordering_key, available_at_ms, created_at_ms, updated_at_ms)
        SELECT m.id, failwell_enqueue.provider, m.ordering_key, GREATEST(now_ms, m.not_before_ms), now_ms, now_ms
        FROM made m)
    SELECT array_agg(r.n), array_agg(r.id), array_agg(r.idem), array_agg(r.hash), array_agg(r.id IS NOT NULL),
           array_agg(r.reference)
    INTO ns, ids, keys, hashes, news, references_given
    FROM (SELECT k.n, m.id, k.idem, k.hash, k.reference FROM keyed k LEFT JOIN made m ON m.n = k.n ORDER BY k.n) r;
    PERFORM set_config('failwell.enqueue', '', true);
    IF jit_was IS NOT NULL THEN
        PERFORM set_config('jit', jit_was, true);
    END IF;

    -- The intents not written: replays, or refused. One left out although a
    -- later intent with its key was written was left out for its reference.
    IF NOT (true = ALL (news)) THEN
        SELECT CASE
                   WHEN s.request_hash IS NULL OR w.n > r.n THEN
                       format('failwell_outbox: reference %s already belongs to another operation of provider %s%s',
                              r.reference, failwell_enqueue.provider, CASE WHEN total > 1 THEN format(' (intent %s)', r.n) ELSE '' END)
                   ELSE
                       format('failwell_outbox: idempotency key %s was already used with a different request%s',
                              r.key, CASE WHEN total > 1 THEN format(' (intent %s)', r.n) ELSE '' END)
               END
        INTO refusal
        FROM unnest(ns, keys, hashes, news, references_given) AS r (n, key, hash, new, reference)
        LEFT JOIN operations s ON s.idempotency_key = r.key
        LEFT JOIN unnest(ns, ids, news) AS w (n, id, new) ON w.new AND w.id = s.id
        WHERE NOT r.new AND (s.request_hash IS NULL OR w.n > r.n OR s.request_hash <> r.hash)
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
    FOR hold, i IN SELECT h.hold, h.n FROM unnest(hold_ids) WITH ORDINALITY AS h (hold, n) LOOP
        CONTINUE WHEN hold IS NULL;
        refusal := failwell_hold_refusal(hold, keys[i], NOT news[i]);
        IF refusal IS NOT NULL THEN
            RAISE EXCEPTION 'failwell_outbox: %', refusal || CASE WHEN total > 1 THEN format(' (intent %s)', i) ELSE '' END
                USING ERRCODE = CASE WHEN news[i] THEN 'check_violation' ELSE 'unique_violation' END;
        END IF;
        IF news[i] THEN
            UPDATE operations SET hold_id = hold WHERE operations.id = ids[i];
        END IF;
    END LOOP;

    -- Wake the relays at the commit, also when this runs inside a trigger,
    -- where the tables' own notice triggers leave it to the view. (A
    -- transaction sends one notice per channel and text.)
    IF true = ANY (news) THEN
        PERFORM pg_notify('failwell_outbox', current_schema());
    END IF;

    RETURN QUERY SELECT r.id, r.key, r.new FROM unnest(ids, keys, news) AS r (id, key, new);
END $$;

-- 0022's trigger of the view, writing `created_by` instead of a history
-- row.
CREATE OR REPLACE FUNCTION failwell_outbox_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    now_ms bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    due_ms bigint;
    written text := NEW.payload::text;
    canonical jsonb;
    hash text;
    key text;
    new_id bigint;
    stored text;
    refusal text;
BEGIN
    refusal := failwell_text_refusal(NEW.provider, NEW.operation, NEW.payload, NEW.idempotency_key,
                                     NEW.ordering_key, '');
    IF refusal IS NULL THEN
        canonical := NEW.payload::jsonb;
        refusal := failwell_payload_refusal(written, canonical, NEW.available_at, '');
    END IF;
    PERFORM failwell_raise(refusal);
    due_ms := (extract(epoch FROM NEW.available_at) * 1000)::bigint;
    hash := failwell_request_hash(NEW.provider, NEW.operation, canonical);
    key := COALESCE(NEW.idempotency_key, 'sha256:' || hash);
    -- The operation and its message in one statement; the
    -- `operations_created` trigger leaves this statement's row to it.
    PERFORM set_config('failwell.enqueue', 'contract', true);
    WITH operation AS (
        INSERT INTO operations (idempotency_key, provider, operation, reference, payload, request_hash,
                                provider_key, created_at_ms, updated_at_ms, changed_by, created_by, not_before_ms)
        VALUES (key, NEW.provider, NEW.operation, NEW.reference, written, hash,
                failwell_provider_key(NEW.provider, NEW.operation, key, 0), now_ms, now_ms, 'app',
                'app', CASE WHEN due_ms > now_ms THEN due_ms END)
        ON CONFLICT DO NOTHING
        RETURNING id, provider, not_before_ms),
    message AS (
        INSERT INTO outbox (operation_id, provider, ordering_key, available_at_ms, created_at_ms, updated_at_ms)
        SELECT id, provider, NEW.ordering_key, GREATEST(now_ms, not_before_ms), now_ms, now_ms FROM operation)
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
    END IF;
    IF NEW.hold_id IS NOT NULL THEN
        refusal := failwell_hold_refusal(NEW.hold_id, key, new_id IS NULL);
        IF refusal IS NOT NULL THEN
            RAISE EXCEPTION 'failwell_outbox: %', refusal
                USING ERRCODE = CASE WHEN new_id IS NULL THEN 'unique_violation' ELSE 'check_violation' END;
        END IF;
    END IF;
    IF new_id IS NULL THEN
        RETURN NULL;
    END IF;
    IF NEW.hold_id IS NOT NULL THEN
        UPDATE operations SET hold_id = NEW.hold_id WHERE id = new_id;
    END IF;
    NEW.id := new_id;
    NEW.idempotency_key := key;
    RETURN NEW;
END $$;

-- As in 0022: failwell's schema on the functions' `search_path`
-- (`CREATE OR REPLACE` resets it).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION failwell_outbox_insert() SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION failwell_enqueue(text, text, json[], text[], text[], text[], timestamptz[], text[]) '
                   'SET search_path = %I, pg_temp', current_schema());
END $$;
