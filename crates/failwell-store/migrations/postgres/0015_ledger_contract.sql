-- The ledger in plain SQL (docs/LEDGER.md, "In plain SQL"): an application
-- inserts a transfer into the view `failwell_transfers` in its own
-- transaction, and the view's trigger applies it as failwell's Rust path
-- does (ledger/plan.rs with failwell_policy::balance): the same checks in
-- the same order, the same rows in ledger_transfers (with the same request
-- hash), the two accounts updated and the two journal entries written, or
-- a refusal naming the rule, with nothing written. The accounts are locked
-- in id order, as failwell's own batches lock them, so the two never
-- deadlock.
--
-- `failwell_outbox` gains `hold_id`: a pending hold (made earlier, e.g.
-- through failwell_transfers in the same transaction) that the operation's
-- outcome then posts or voids.

-- NewTransfer::request_hash: SHA-256 (hex) over each account's length (8
-- bytes, big-endian) and bytes, the amount (8 bytes), pending (1 byte), and
-- the timeout (8 bytes; 8 bytes of 0xff for none).
CREATE FUNCTION failwell_transfer_hash(debit text, credit text, amount bigint, pending boolean, timeout_ms bigint)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN encode(sha256(
    int8send(octet_length(convert_to(debit, 'UTF8'))::bigint) || convert_to(debit, 'UTF8') ||
    int8send(octet_length(convert_to(credit, 'UTF8'))::bigint) || convert_to(credit, 'UTF8') ||
    int8send(amount) || CASE WHEN pending THEN '\x01'::bytea ELSE '\x00'::bytea END ||
    COALESCE(int8send(timeout_ms), '\xffffffffffffffff'::bytea)), 'hex');

CREATE VIEW failwell_transfers AS
SELECT t.id, t.debit_account, t.credit_account, t.amount, t.pending = 1 AS pending,
       t.expires_at_ms - t.created_at_ms AS timeout_ms, t.unit, t.state, t.posted_amount,
       o.idempotency_key AS operation
FROM ledger_transfers t LEFT JOIN operations o ON o.hold_id = t.id;
ALTER VIEW failwell_transfers ALTER COLUMN pending SET DEFAULT false;

COMMENT ON VIEW failwell_transfers IS
    'Insert (id, debit_account, credit_account, amount [, pending, timeout_ms]) in your own transaction; see docs/LEDGER.md';

CREATE FUNCTION failwell_transfers_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    now_ms bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    pending boolean := COALESCE(NEW.pending, false);
    hash text;
    stored text;
    debit ledger_accounts%ROWTYPE;
    credit ledger_accounts%ROWTYPE;
    available bigint;
    written text;
BEGIN
    IF NEW.id IS NULL OR NEW.debit_account IS NULL OR NEW.credit_account IS NULL OR NEW.amount IS NULL THEN
        RAISE EXCEPTION 'failwell_transfers: id, debit_account, credit_account and amount are required'
            USING ERRCODE = 'not_null_violation';
    END IF;
    hash := failwell_transfer_hash(NEW.debit_account, NEW.credit_account, NEW.amount, pending, NEW.timeout_ms);
    -- Both accounts locked, in id order (failwell's batches lock theirs so).
    PERFORM 1 FROM ledger_accounts WHERE id IN (NEW.debit_account, NEW.credit_account) ORDER BY id FOR UPDATE;
    -- The same id: a replay when the content is the same, refused otherwise.
    SELECT request_hash INTO stored FROM ledger_transfers WHERE id = NEW.id;
    IF FOUND THEN
        IF stored <> hash THEN
            RAISE EXCEPTION 'failwell_transfers: id "%" was already used with different content', NEW.id
                USING ERRCODE = 'unique_violation';
        END IF;
        RETURN NULL;
    END IF;
    IF NEW.id !~ '^[!-~]{1,255}$' THEN
        RAISE EXCEPTION 'failwell_transfers: id must be 1 to 255 bytes of printable ASCII without spaces'
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.timeout_ms IS NOT NULL AND NOT pending THEN
        RAISE EXCEPTION 'failwell_transfers: timeout_ms is for holds (pending transfers) only'
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.timeout_ms <= 0 THEN
        RAISE EXCEPTION 'failwell_transfers: timeout_ms must be more than zero, not %', NEW.timeout_ms
            USING ERRCODE = 'check_violation';
    END IF;
    SELECT * INTO debit FROM ledger_accounts WHERE id = NEW.debit_account;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'failwell_transfers: debit_account: account "%" does not exist', NEW.debit_account
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    SELECT * INTO credit FROM ledger_accounts WHERE id = NEW.credit_account;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'failwell_transfers: credit_account: account "%" does not exist', NEW.credit_account
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    IF debit.unit <> credit.unit THEN
        RAISE EXCEPTION 'failwell_transfers: units differ: account "%" is in %, account "%" in %',
            debit.id, debit.unit, credit.id, credit.unit USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.amount <= 0 THEN
        RAISE EXCEPTION 'failwell_transfers: amount must be a positive integer of minor units, not %', NEW.amount
            USING ERRCODE = 'check_violation';
    END IF;
    IF debit.id = credit.id THEN
        RAISE EXCEPTION 'failwell_transfers: debit_account and credit_account must be two different accounts'
            USING ERRCODE = 'check_violation';
    END IF;
    available := debit.posted - debit.debits_pending;
    IF debit.floor IS NOT NULL AND available::numeric - NEW.amount < debit.floor THEN
        RAISE EXCEPTION 'failwell_transfers: insufficient funds: account "%" has % available above its floor of %, % asked',
            debit.id, available, debit.floor, NEW.amount USING ERRCODE = 'check_violation';
    END IF;
    -- A transfer of the same id committed meanwhile (by a transaction that
    -- locked other accounts) is judged as above.
    INSERT INTO ledger_transfers (id, debit_account, credit_account, unit, amount, pending, state, posted_amount,
                                  expires_at_ms, request_hash, created_at_ms)
    VALUES (NEW.id, debit.id, credit.id, debit.unit, NEW.amount, CASE WHEN pending THEN 1 ELSE 0 END,
            CASE WHEN pending THEN 'pending' ELSE 'posted' END, CASE WHEN pending THEN NULL ELSE NEW.amount END,
            CASE WHEN NEW.timeout_ms > 9223372036854775807 - now_ms THEN 9223372036854775807
                 ELSE now_ms + NEW.timeout_ms END,
            hash, now_ms)
    ON CONFLICT (id) DO NOTHING
    RETURNING id INTO written;
    IF written IS NULL THEN
        SELECT request_hash INTO stored FROM ledger_transfers WHERE id = NEW.id;
        IF stored <> hash THEN
            RAISE EXCEPTION 'failwell_transfers: id "%" was already used with different content', NEW.id
                USING ERRCODE = 'unique_violation';
        END IF;
        RETURN NULL;
    END IF;
    UPDATE ledger_accounts SET posted = posted - CASE WHEN pending THEN 0 ELSE NEW.amount END,
        debits_pending = debits_pending + CASE WHEN pending THEN NEW.amount ELSE 0 END, updated_at_ms = now_ms
    WHERE id = debit.id;
    UPDATE ledger_accounts SET posted = posted + CASE WHEN pending THEN 0 ELSE NEW.amount END,
        credits_pending = credits_pending + CASE WHEN pending THEN NEW.amount ELSE 0 END, updated_at_ms = now_ms
    WHERE id = credit.id;
    INSERT INTO ledger_entries (account_id, transfer_id, event, posted, debits_pending, credits_pending, created_at_ms)
    VALUES (debit.id, NEW.id, CASE WHEN pending THEN 'hold' ELSE 'transfer' END,
            CASE WHEN pending THEN 0 ELSE -NEW.amount END, CASE WHEN pending THEN NEW.amount ELSE 0 END, 0, now_ms),
           (credit.id, NEW.id, CASE WHEN pending THEN 'hold' ELSE 'transfer' END,
            CASE WHEN pending THEN 0 ELSE NEW.amount END, 0, CASE WHEN pending THEN NEW.amount ELSE 0 END, now_ms);
    NEW.pending := pending;
    NEW.unit := debit.unit;
    NEW.state := CASE WHEN pending THEN 'pending' ELSE 'posted' END;
    NEW.posted_amount := CASE WHEN pending THEN NULL ELSE NEW.amount END;
    NEW.operation := NULL;
    RETURN NEW;
END $$;

CREATE TRIGGER failwell_transfers_insert INSTEAD OF INSERT ON failwell_transfers
    FOR EACH ROW EXECUTE FUNCTION failwell_transfers_insert();

-- Why hold `hold` cannot be tied to the operation of key `key` (NULL: it
-- can), locked first. A replay (`replay`) asks only that it be tied to
-- that operation already; a new operation, that it be a pending hold
-- without a timeout, tied to no operation.
CREATE FUNCTION failwell_hold_refusal(hold text, key text, replay boolean) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    t ledger_transfers%ROWTYPE;
    tied text;
BEGIN
    SELECT * INTO t FROM ledger_transfers WHERE id = hold FOR UPDATE;
    IF NOT FOUND THEN
        RETURN format('hold_id "%s" names no transfer', hold);
    END IF;
    SELECT idempotency_key INTO tied FROM operations WHERE hold_id = hold;
    IF replay THEN
        IF tied IS DISTINCT FROM key THEN
            RETURN format('idempotency key %s was already used without this hold_id ("%s")', key, hold);
        END IF;
        RETURN NULL;
    END IF;
    IF t.pending = 0 THEN
        RETURN format('hold_id "%s" is not a hold (a pending transfer)', hold);
    ELSIF t.state <> 'pending' THEN
        RETURN format('hold_id "%s" is %s already', hold, t.state);
    ELSIF t.expires_at_ms IS NOT NULL THEN
        RETURN format('hold_id "%s" has a timeout; a hold tied to an operation has none', hold);
    ELSIF tied IS NOT NULL THEN
        RETURN format('hold_id "%s" is tied to another operation (%s)', hold, tied);
    END IF;
    RETURN NULL;
END $$;

-- The view gains hold_id (at its end: the view's grants and trigger stay).
CREATE OR REPLACE VIEW failwell_outbox AS
SELECT o.id, o.provider, o.operation, failwell_stored_json(o.payload) AS payload, o.idempotency_key, o.reference,
       x.ordering_key, to_timestamp(x.available_at_ms / 1000.0) AS available_at, o.status,
       x.state AS delivery, x.attempts, x.last_error, o.hold_id
FROM operations o JOIN outbox x ON x.operation_id = o.id;

COMMENT ON VIEW failwell_outbox IS
    'Insert (provider, operation, payload [, idempotency_key, reference, ordering_key, available_at, hold_id]) in your own transaction; see docs/OUTBOX.md';

-- 0013's function, with hold_id.
CREATE OR REPLACE FUNCTION failwell_outbox_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    now_ms bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
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
    IF octet_length(NEW.payload::text) > 1048576 THEN
        RAISE EXCEPTION 'failwell_outbox: payload is % bytes; at most 1048576 (1 MiB)',
            octet_length(NEW.payload::text) USING ERRCODE = 'check_violation';
    END IF;
    canonical := NEW.payload::jsonb;
    IF jsonb_path_exists(canonical, 'strict $.**{127} ? (@.type() == "array" || @.type() == "object")') THEN
        RAISE EXCEPTION 'failwell_outbox: payload nests arrays and objects deeper than 127 levels'
            USING ERRCODE = 'check_violation';
    END IF;
    IF EXISTS (SELECT FROM jsonb_path_query(canonical, 'strict $.** ? (@.type() == "number")') AS v (n)
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
