-- The ledger in plain SQL on SQLite (docs/LEDGER.md, "In plain SQL"): an
-- application that keeps its data in the same file inserts a transfer into
-- the view `failwell_transfers` in its own transaction, and the view's
-- trigger applies it as failwell's Rust path does (ledger/plan.rs with
-- failwell_policy::balance): the same checks in the same order, the same
-- rows, the two accounts updated and the two journal entries written, or
-- RAISE(ABORT) with a fixed message naming the rule, nothing written.
-- SQLite's single writer is the lock.
--
-- SQLite has no SHA-256 in SQL: the trigger stores the request hash as ''
-- (empty text), and failwell computes NewTransfer::request_hash from the
-- stored columns when it reads such a row (the timeout is expires_at_ms −
-- created_at_ms). The trigger finds a replay by comparing those columns
-- directly, which is the same question.
--
-- `failwell_outbox` gains `hold_id`: a pending hold (made earlier, e.g.
-- through failwell_transfers in the same transaction) that the operation's
-- outcome then posts or voids. A view's trigger cannot change, so the view
-- and its trigger are made again (0010's, with hold_id).

CREATE VIEW failwell_transfers AS
SELECT t.id, t.debit_account, t.credit_account, t.amount, t.pending,
       t.expires_at_ms - t.created_at_ms AS timeout_ms, t.unit, t.state, t.posted_amount,
       o.idempotency_key AS operation
FROM ledger_transfers t LEFT JOIN operations o ON o.hold_id = t.id;

CREATE TRIGGER failwell_transfers_insert INSTEAD OF INSERT ON failwell_transfers
BEGIN
    SELECT RAISE(ABORT, 'failwell_transfers: id, debit_account, credit_account and amount are required')
    WHERE NEW.id IS NULL OR NEW.debit_account IS NULL OR NEW.credit_account IS NULL OR NEW.amount IS NULL;
    SELECT RAISE(ABORT, 'failwell_transfers: amount must be an integer of minor units')
    WHERE typeof(NEW.amount) <> 'integer';
    SELECT RAISE(ABORT, 'failwell_transfers: pending must be 0 or 1 (false or true)')
    WHERE NEW.pending IS NOT NULL AND NEW.pending NOT IN (0, 1);
    SELECT RAISE(ABORT, 'failwell_transfers: timeout_ms must be an integer of milliseconds')
    WHERE NEW.timeout_ms IS NOT NULL AND typeof(NEW.timeout_ms) <> 'integer';
    -- Checked first: no stored id is out of form. GLOB stops at a U+0000,
    -- so one is found by the text's length (to its first U+0000) differing
    -- from its bytes'.
    SELECT RAISE(ABORT, 'failwell_transfers: id must be 1 to 255 bytes of printable ASCII without spaces')
    WHERE typeof(NEW.id) <> 'text' OR length(CAST(NEW.id AS BLOB)) NOT BETWEEN 1 AND 255
       OR length(CAST(NEW.id AS BLOB)) <> length(NEW.id) OR NEW.id GLOB '*[^!-~]*';
    -- The same id: a replay when the content is the same, refused otherwise.
    SELECT RAISE(ABORT, 'failwell_transfers: id was already used with different content')
    FROM ledger_transfers t WHERE t.id = NEW.id
      AND NOT (t.debit_account IS NEW.debit_account AND t.credit_account IS NEW.credit_account
               AND t.amount IS NEW.amount AND t.pending IS COALESCE(NEW.pending, 0)
               AND t.expires_at_ms - t.created_at_ms IS NEW.timeout_ms);
    SELECT RAISE(IGNORE) WHERE EXISTS (SELECT 1 FROM ledger_transfers WHERE id = NEW.id);
    SELECT RAISE(ABORT, 'failwell_transfers: timeout_ms is for holds (pending transfers) only')
    WHERE NEW.timeout_ms IS NOT NULL AND COALESCE(NEW.pending, 0) = 0;
    SELECT RAISE(ABORT, 'failwell_transfers: timeout_ms must be more than zero') WHERE NEW.timeout_ms <= 0;
    SELECT RAISE(ABORT, 'failwell_transfers: debit_account: the account does not exist')
    WHERE NOT EXISTS (SELECT 1 FROM ledger_accounts WHERE id = NEW.debit_account);
    SELECT RAISE(ABORT, 'failwell_transfers: credit_account: the account does not exist')
    WHERE NOT EXISTS (SELECT 1 FROM ledger_accounts WHERE id = NEW.credit_account);
    SELECT RAISE(ABORT, 'failwell_transfers: units differ: debit_account and credit_account are in different units')
    FROM ledger_accounts d, ledger_accounts c
    WHERE d.id = NEW.debit_account AND c.id = NEW.credit_account AND d.unit <> c.unit;
    SELECT RAISE(ABORT, 'failwell_transfers: amount must be a positive integer of minor units')
    WHERE NEW.amount <= 0;
    SELECT RAISE(ABORT, 'failwell_transfers: debit_account and credit_account must be two different accounts')
    WHERE NEW.debit_account = NEW.credit_account;
    -- (An integer that would overflow becomes a real, compared as such.)
    SELECT RAISE(ABORT, 'failwell_transfers: insufficient funds: the debit account''s available balance less the amount would be below its floor')
    FROM ledger_accounts d
    WHERE d.id = NEW.debit_account AND d.floor IS NOT NULL AND d.posted - d.debits_pending - NEW.amount < d.floor;

    INSERT INTO ledger_transfers (id, debit_account, credit_account, unit, amount, pending, state, posted_amount,
                                  expires_at_ms, request_hash, created_at_ms)
    SELECT NEW.id, NEW.debit_account, NEW.credit_account, d.unit, NEW.amount, COALESCE(NEW.pending, 0),
           CASE WHEN NEW.pending THEN 'pending' ELSE 'posted' END,
           CASE WHEN NEW.pending THEN NULL ELSE NEW.amount END,
           CASE WHEN NEW.timeout_ms > 9223372036854775807 - now.ms THEN 9223372036854775807
                ELSE now.ms + NEW.timeout_ms END, '', now.ms
    FROM ledger_accounts d,
         (SELECT CAST(round((julianday('now') - 2440587.5) * 86400000) AS INTEGER) AS ms) AS now
    WHERE d.id = NEW.debit_account;
    UPDATE ledger_accounts SET
        posted = posted + CASE WHEN NEW.pending THEN 0 WHEN id = NEW.debit_account THEN -NEW.amount ELSE NEW.amount END,
        debits_pending = debits_pending + CASE WHEN NEW.pending AND id = NEW.debit_account THEN NEW.amount ELSE 0 END,
        credits_pending = credits_pending + CASE WHEN NEW.pending AND id = NEW.credit_account THEN NEW.amount ELSE 0 END,
        updated_at_ms = (SELECT created_at_ms FROM ledger_transfers WHERE id = NEW.id)
    WHERE id IN (NEW.debit_account, NEW.credit_account);
    INSERT INTO ledger_entries (account_id, transfer_id, event, posted, debits_pending, credits_pending, created_at_ms)
    SELECT a.id, t.id, CASE WHEN t.pending = 1 THEN 'hold' ELSE 'transfer' END,
           CASE WHEN t.pending = 1 THEN 0 WHEN a.id = t.debit_account THEN -t.amount ELSE t.amount END,
           CASE WHEN t.pending = 1 AND a.id = t.debit_account THEN t.amount ELSE 0 END,
           CASE WHEN t.pending = 1 AND a.id = t.credit_account THEN t.amount ELSE 0 END, t.created_at_ms
    FROM ledger_transfers t, (SELECT NEW.debit_account AS id, 0 AS n UNION ALL SELECT NEW.credit_account, 1) AS a
    WHERE t.id = NEW.id ORDER BY a.n;
END;

DROP VIEW failwell_outbox;

CREATE VIEW failwell_outbox AS
SELECT o.id, o.provider, o.operation, o.payload, o.idempotency_key, o.reference, x.ordering_key,
       strftime('%Y-%m-%dT%H:%M:%fZ', x.available_at_ms / 1000.0, 'unixepoch') AS available_at,
       o.status, x.state AS delivery, x.attempts, x.last_error, o.hold_id
FROM operations o JOIN outbox x ON x.operation_id = o.id;

CREATE TRIGGER failwell_outbox_insert INSTEAD OF INSERT ON failwell_outbox
BEGIN
    SELECT RAISE(ABORT, 'failwell_outbox: provider, operation and payload are required')
    WHERE NEW.provider IS NULL OR NEW.operation IS NULL OR NEW.payload IS NULL;
    SELECT RAISE(ABORT, 'failwell_outbox: provider must not be empty or blank')
    WHERE trim(NEW.provider, char(32, 9, 10, 11, 12, 13)) = '';
    SELECT RAISE(ABORT, 'failwell_outbox: operation must not be empty or blank')
    WHERE trim(NEW.operation, char(32, 9, 10, 11, 12, 13)) = '';
    SELECT RAISE(ABORT, 'failwell_outbox: idempotency_key must not be empty or blank')
    WHERE trim(NEW.idempotency_key, char(32, 9, 10, 11, 12, 13)) = '';
    SELECT RAISE(ABORT, 'failwell_outbox: reference must not be empty or blank')
    WHERE trim(NEW.reference, char(32, 9, 10, 11, 12, 13)) = '';
    SELECT RAISE(ABORT, 'failwell_outbox: payload must be JSON text')
    WHERE typeof(NEW.payload) <> 'text' OR NOT json_valid(NEW.payload);
    SELECT RAISE(ABORT, 'failwell_outbox: payload must be a JSON object')
    WHERE json_type(NEW.payload) <> 'object';
    SELECT RAISE(ABORT, 'failwell_outbox: payload is over 1048576 bytes (1 MiB)')
    WHERE length(CAST(NEW.payload AS BLOB)) > 1048576;
    -- Level 0 is the payload object itself: a container at level 127 is
    -- the 128th nested one, more than failwell reads back. Each level's
    -- containers are read from their parent's text, so the walk stops there.
    SELECT RAISE(ABORT, 'failwell_outbox: payload nests arrays and objects deeper than 127 levels')
    WHERE EXISTS (
        WITH RECURSIVE nested (value, level) AS (
            SELECT NEW.payload, 0
            UNION ALL
            SELECT e.value, n.level + 1 FROM nested n, json_each(n.value) e
            WHERE e.type IN ('object', 'array') AND n.level < 127
        )
        SELECT 1 FROM nested WHERE level = 127
    );
    -- serde_json's reader takes objects with these keys for its own markers.
    SELECT RAISE(ABORT, 'failwell_outbox: payload holds a key starting with $serde_json::private::, which failwell''s JSON reader reserves')
    WHERE EXISTS (SELECT 1 FROM json_tree(NEW.payload)
                  WHERE typeof(key) = 'text' AND substr(key, 1, 22) = '$serde_json::private::');
    -- available_at: ISO-8601 text SQLite's date functions read (UTC unless
    -- it names an offset), or a Unix time in seconds as a number.
    SELECT RAISE(ABORT, 'failwell_outbox: available_at is not a time SQLite reads (ISO-8601 text, or Unix seconds as a number)')
    WHERE NEW.available_at IS NOT NULL
      AND (CASE WHEN typeof(NEW.available_at) IN ('integer', 'real') THEN julianday(NEW.available_at, 'unixepoch')
                ELSE julianday(NEW.available_at) END) IS NULL;
    SELECT RAISE(ABORT, 'failwell_outbox: available_at is not a time within a year from now')
    WHERE NEW.available_at IS NOT NULL
      AND (CASE WHEN typeof(NEW.available_at) IN ('integer', 'real') THEN julianday(NEW.available_at, 'unixepoch')
                ELSE julianday(NEW.available_at) END) > julianday('now', '+1 year');
    -- The same key again: a replay when the request is the same (nothing
    -- is written), refused when it is another.
    SELECT RAISE(ABORT, 'failwell_outbox: idempotency key was already used with a different request')
    FROM operations o WHERE o.idempotency_key = NEW.idempotency_key
      AND (o.provider IS NOT NEW.provider OR o.operation IS NOT NEW.operation
           OR NOT json_valid(o.payload)
           OR EXISTS (SELECT fullkey, type, atom FROM json_tree(NEW.payload)
                      EXCEPT SELECT fullkey, type, atom FROM json_tree(o.payload))
           OR EXISTS (SELECT fullkey, type, atom FROM json_tree(o.payload)
                      EXCEPT SELECT fullkey, type, atom FROM json_tree(NEW.payload)));
    -- A replay names the hold its operation was made with, or none.
    SELECT RAISE(ABORT, 'failwell_outbox: idempotency key was already used without this hold_id')
    FROM operations o WHERE o.idempotency_key = NEW.idempotency_key
      AND NEW.hold_id IS NOT NULL AND o.hold_id IS NOT NEW.hold_id;
    SELECT RAISE(IGNORE) WHERE EXISTS (SELECT 1 FROM operations WHERE idempotency_key = NEW.idempotency_key);
    -- Without a key, the same request with the same reference is a replay
    -- too; any other operation holding the reference refuses the insert.
    SELECT RAISE(IGNORE)
    FROM operations o WHERE NEW.idempotency_key IS NULL
      AND o.provider = NEW.provider AND o.reference = NEW.reference
      AND (NEW.hold_id IS NULL OR o.hold_id IS NEW.hold_id)
      AND o.operation = NEW.operation AND json_valid(o.payload)
      AND NOT EXISTS (SELECT fullkey, type, atom FROM json_tree(NEW.payload)
                      EXCEPT SELECT fullkey, type, atom FROM json_tree(o.payload))
      AND NOT EXISTS (SELECT fullkey, type, atom FROM json_tree(o.payload)
                      EXCEPT SELECT fullkey, type, atom FROM json_tree(NEW.payload));
    SELECT RAISE(ABORT, 'failwell_outbox: reference already belongs to another operation of the provider')
    WHERE EXISTS (SELECT 1 FROM operations WHERE provider = NEW.provider AND reference = NEW.reference);

    -- A new operation's hold: a pending hold without a timeout, tied to
    -- no other operation.
    SELECT RAISE(ABORT, 'failwell_outbox: hold_id names no transfer')
    WHERE NEW.hold_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM ledger_transfers WHERE id = NEW.hold_id);
    SELECT RAISE(ABORT, 'failwell_outbox: hold_id is not a hold (a pending transfer)')
    FROM ledger_transfers WHERE id = NEW.hold_id AND pending = 0;
    SELECT RAISE(ABORT, 'failwell_outbox: hold_id names a hold that is not pending (posted, voided or expired already)')
    FROM ledger_transfers WHERE id = NEW.hold_id AND state <> 'pending';
    SELECT RAISE(ABORT, 'failwell_outbox: hold_id names a hold with a timeout; a hold tied to an operation has none')
    FROM ledger_transfers WHERE id = NEW.hold_id AND expires_at_ms IS NOT NULL;
    SELECT RAISE(ABORT, 'failwell_outbox: hold_id is tied to another operation')
    WHERE EXISTS (SELECT 1 FROM operations WHERE hold_id = NEW.hold_id);

    INSERT INTO operations (idempotency_key, provider, operation, reference, payload, request_hash,
                            provider_key, created_at_ms, updated_at_ms, changed_by)
    VALUES (COALESCE(NEW.idempotency_key, 'sqlite:' || lower(hex(randomblob(16)))), NEW.provider,
            NEW.operation, NEW.reference, NEW.payload, '',
            CASE WHEN NEW.idempotency_key IS NULL THEN 'provisional' ELSE '' END,
            CAST(round((julianday('now') - 2440587.5) * 86400000) AS INTEGER),
            CAST(round((julianday('now') - 2440587.5) * 86400000) AS INTEGER), 'app');
    -- last_insert_rowid() is the operation's id here (the message inserted
    -- by the operations' own trigger does not change it once that ends).
    UPDATE outbox SET ordering_key = NEW.ordering_key,
        available_at_ms = MAX(available_at_ms, COALESCE(CAST(round(((CASE
            WHEN typeof(NEW.available_at) IN ('integer', 'real') THEN julianday(NEW.available_at, 'unixepoch')
            ELSE julianday(NEW.available_at) END) - 2440587.5) * 86400000) AS INTEGER), 0))
    WHERE operation_id = last_insert_rowid() AND (NEW.ordering_key IS NOT NULL OR NEW.available_at IS NOT NULL);
    UPDATE operations SET not_before_ms = (SELECT available_at_ms FROM outbox WHERE operation_id = operations.id)
    WHERE id = last_insert_rowid() AND NEW.available_at IS NOT NULL
      AND (SELECT available_at_ms FROM outbox WHERE operation_id = operations.id) > created_at_ms;
    UPDATE operations SET hold_id = NEW.hold_id WHERE id = last_insert_rowid() AND NEW.hold_id IS NOT NULL;
END;
