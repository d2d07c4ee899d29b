-- The outbox contract on SQLite: an application that keeps its data in the
-- same file inserts into the view `failwell_outbox`, with plain SQL, in the
-- transaction that changes its own rows (see docs/OUTBOX.md). The view's
-- trigger makes the checks failwell's API makes and writes the intent (an
-- operations row) and its message (an outbox row).
--
-- SQLite has no SHA-256 in SQL, and the application's connection has none
-- of failwell's functions: the trigger cannot compute the request hash nor
-- the key sent to the provider. It stores the hash as '' (empty text), and
-- failwell fills both in its own write transaction before the message is
-- claimed. A row inserted without an idempotency key gets a provisional
-- key (`sqlite:` and 32 random hex digits) and the provider key
-- 'provisional': failwell replaces the key with `sha256:` and the request
-- hash, as on every other path; a second row of the same request is then
-- marked done without being sent.
--
-- A replay (same key, same request) is found without the hash: provider,
-- operation and payload are compared as JSON values (object keys in any
-- order; a number compared by its value, an integer never equal to a real).

-- The operations failwell has still to fill (few at any moment).
CREATE INDEX operations_unfilled ON operations (id) WHERE request_hash = '';

CREATE VIEW failwell_outbox AS
SELECT o.id, o.provider, o.operation, o.payload, o.idempotency_key, o.reference, x.ordering_key,
       strftime('%Y-%m-%dT%H:%M:%fZ', x.available_at_ms / 1000.0, 'unixepoch') AS available_at,
       o.status, x.state AS delivery, x.attempts, x.last_error
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
    SELECT RAISE(IGNORE) WHERE EXISTS (SELECT 1 FROM operations WHERE idempotency_key = NEW.idempotency_key);
    -- Without a key, the same request with the same reference is a replay
    -- too; any other operation holding the reference refuses the insert.
    SELECT RAISE(IGNORE)
    FROM operations o WHERE NEW.idempotency_key IS NULL
      AND o.provider = NEW.provider AND o.reference = NEW.reference
      AND o.operation = NEW.operation AND json_valid(o.payload)
      AND NOT EXISTS (SELECT fullkey, type, atom FROM json_tree(NEW.payload)
                      EXCEPT SELECT fullkey, type, atom FROM json_tree(o.payload))
      AND NOT EXISTS (SELECT fullkey, type, atom FROM json_tree(o.payload)
                      EXCEPT SELECT fullkey, type, atom FROM json_tree(NEW.payload));
    SELECT RAISE(ABORT, 'failwell_outbox: reference already belongs to another operation of the provider')
    WHERE EXISTS (SELECT 1 FROM operations WHERE provider = NEW.provider AND reference = NEW.reference);

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
END;
