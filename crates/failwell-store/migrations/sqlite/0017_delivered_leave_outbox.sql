-- A message whose delivery succeeded leaves the outbox when its result is
-- recorded, as on PostgreSQL (its `0026`): the relay's batch of results
-- marks it `done` (its history row is written as before) and deletes it
-- in the same transaction. The outbox then holds open work (pending
-- messages, dead letters) and the messages that ended another way
-- (failed, or settled by a status lookup or an event), which retention
-- deletes after `retention.delivered_ms` as before. The operation keeps
-- the outcome.
--
-- The contract's view keeps showing a delivered operation: a succeeded
-- operation without its message reads as delivered ('done'), with the
-- operation's attempts and error, the time its delivery started, and no
-- ordering key (a key orders open messages only). SQLite cannot change a
-- view in place, and dropping it drops its triggers: both are created
-- again below, unchanged (from 0012 and 0014).
DROP VIEW failwell_outbox;

CREATE VIEW failwell_outbox AS
SELECT o.id, o.provider, o.operation, o.payload, o.idempotency_key, o.reference, x.ordering_key,
       strftime('%Y-%m-%dT%H:%M:%fZ', x.available_at_ms / 1000.0, 'unixepoch') AS available_at,
       o.status, x.state AS delivery, x.attempts, x.last_error, o.hold_id
FROM operations o JOIN outbox x ON x.operation_id = o.id
UNION ALL
SELECT o.id, o.provider, o.operation, o.payload, o.idempotency_key, o.reference, NULL,
       strftime('%Y-%m-%dT%H:%M:%fZ', COALESCE(o.not_before_ms, o.created_at_ms) / 1000.0, 'unixepoch'),
       o.status, 'done', o.attempts, o.last_error, o.hold_id
FROM operations o
WHERE o.status = 'succeeded' AND NOT EXISTS (SELECT 1 FROM outbox x WHERE x.operation_id = o.id);

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

CREATE TRIGGER failwell_outbox_ordering_key INSTEAD OF INSERT ON failwell_outbox
    WHEN trim(NEW.ordering_key, char(32, 9, 10, 11, 12, 13)) = ''
BEGIN
    SELECT RAISE(ABORT, 'failwell_outbox: ordering_key must not be empty or blank');
END;
