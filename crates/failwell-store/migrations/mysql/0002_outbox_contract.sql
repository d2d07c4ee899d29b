-- The outbox contract on MySQL and MariaDB: an application inserts into the
-- table `failwell_outbox`, with plain SQL, in the transaction that changes
-- its own rows (see docs/OUTBOX.md). MySQL has no triggers on views, so
-- `failwell_outbox` is a table: its trigger makes the checks failwell's API
-- makes, refuses with SQLSTATE 45000 and a message `failwell_outbox: …`
-- naming the column, and writes the intent (an operations row, whose own
-- trigger writes its message) in the application's transaction. The
-- trigger runs with the rights of its definer (failwell's user), so the
-- application needs none on failwell's other tables.
--
-- SQL has no SHA-256 that both servers compute alike over failwell's
-- canonical JSON: the trigger stores the request hash as '' and holds the
-- message (locked_until_ms at the largest BIGINT, no lease) until failwell
-- fills the hash and the key sent to the provider, before it claims
-- anything. A row without an idempotency key gets a provisional key
-- (`mysql:` and 32 hex digits), replaced by `sha256:` and the hash.
--
-- A replay (same key, same request) is found without the hash: provider
-- and operation equal, the payloads each containing the other as JSON
-- (JSON_CONTAINS both ways: object keys in any order, numbers by value,
-- arrays as sets). The row is kept, with `replay` = 1, and failwell checks
-- it against the stored request's hash: a row whose request differs (an
-- array in another order) sets the message aside instead of sending it.
-- failwell deletes each row of this table once it has taken it over.

CREATE TABLE failwell_outbox (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    provider LONGTEXT NULL,
    operation LONGTEXT NULL,
    payload LONGTEXT NULL,
    idempotency_key LONGTEXT NULL,
    reference LONGTEXT NULL,
    ordering_key LONGTEXT NULL,
    -- In the connection's time zone, as NOW() is.
    available_at DATETIME(6) NULL,
    -- Written by the trigger: the operation this row created or replayed.
    operation_id BIGINT NULL,
    replay TINYINT NOT NULL DEFAULT 0
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- What an application reads back: the columns of PostgreSQL's view.
CREATE VIEW failwell_outbox_status AS
SELECT o.id, o.provider, o.operation, o.payload, o.idempotency_key, o.reference, x.ordering_key,
       FROM_UNIXTIME(x.available_at_ms / 1000) AS available_at, o.status, x.state AS delivery, x.attempts,
       x.last_error
FROM operations o JOIN outbox x ON x.operation_id = o.id;

CREATE TRIGGER failwell_outbox_insert BEFORE INSERT ON failwell_outbox FOR EACH ROW
main: BEGIN
    DECLARE now_ms BIGINT DEFAULT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000;
    DECLARE at_ms BIGINT DEFAULT NULL;
    DECLARE taken BOOL DEFAULT FALSE;
    DECLARE tries INT DEFAULT 0;
    DECLARE held_id BIGINT DEFAULT NULL;
    DECLARE held_provider VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL;
    DECLARE held_operation VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL;
    DECLARE held_payload LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL;
    DECLARE refusal VARCHAR(128) CHARACTER SET utf8mb4 DEFAULT NULL;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET held_id = NULL;

    SET NEW.operation_id = NULL, NEW.replay = 0;
    -- The first column missing, blank (nothing but white space, or
    -- nothing at all) or too long, in this order.
    SET refusal = CASE
        WHEN NEW.provider IS NULL THEN 'provider is required'
        WHEN NEW.operation IS NULL THEN 'operation is required'
        WHEN NEW.payload IS NULL THEN 'payload is required'
        WHEN NEW.provider NOT REGEXP '[^[:space:]]' THEN 'provider must not be empty or blank'
        WHEN NEW.operation NOT REGEXP '[^[:space:]]' THEN 'operation must not be empty or blank'
        WHEN NEW.idempotency_key NOT REGEXP '[^[:space:]]' THEN 'idempotency_key must not be empty or blank'
        WHEN NEW.reference NOT REGEXP '[^[:space:]]' THEN 'reference must not be empty or blank'
        WHEN LENGTH(NEW.provider) > 255 THEN 'provider is longer than 255 bytes'
        WHEN LENGTH(NEW.operation) > 255 THEN 'operation is longer than 255 bytes'
        WHEN LENGTH(NEW.idempotency_key) > 255 THEN 'idempotency_key is longer than 255 bytes'
        WHEN LENGTH(NEW.reference) > 255 THEN 'reference is longer than 255 bytes'
        WHEN LENGTH(NEW.ordering_key) > 255 THEN 'ordering_key is longer than 255 bytes'
    END;
    IF refusal IS NOT NULL THEN
        SET refusal = CONCAT('failwell_outbox: ', refusal);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = refusal;
    END IF;
    IF LENGTH(NEW.payload) > 1048576 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'failwell_outbox: payload is over 1048576 bytes (1 MiB)';
    END IF;
    -- MariaDB's JSON functions read at most 31 nested levels; MySQL's 100.
    IF NOT JSON_VALID(NEW.payload) THEN
        SIGNAL SQLSTATE '45000'
            SET MESSAGE_TEXT = 'failwell_outbox: payload is not JSON this server reads (malformed, or nested too deep)';
    END IF;
    IF JSON_TYPE(NEW.payload) <> 'OBJECT' THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'failwell_outbox: payload must be a JSON object';
    END IF;
    -- JSON_DEPTH counts the values inside the deepest container as a
    -- level: above 128, a container sits at level 127 (the payload object
    -- is level 0), more than failwell reads back. What the server cannot
    -- judge here (an empty container at level 127, a reserved key, a number
    -- of more than 1000 digits) is set aside by failwell, never sent.
    IF JSON_DEPTH(NEW.payload) > 128 THEN
        SIGNAL SQLSTATE '45000'
            SET MESSAGE_TEXT = 'failwell_outbox: payload nests arrays and objects deeper than 127 levels';
    END IF;
    IF NEW.available_at > NOW(6) + INTERVAL 1 YEAR THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'failwell_outbox: available_at is not a time within a year from now';
    END IF;
    SET at_ms = CAST(ROUND(UNIX_TIMESTAMP(NEW.available_at) * 1000) AS SIGNED);

    -- Twice at most. The first reads are plain ones: they lock nothing,
    -- so failwell, which fills these operations, never waits for the
    -- application's transaction. An insert that another transaction's
    -- commit made a duplicate (the insert waits for it) is judged again by
    -- locking reads, which see the rows committed meanwhile at any
    -- isolation level.
    attempt: LOOP
        SET tries = tries + 1, held_id = NULL;
        IF NEW.idempotency_key IS NOT NULL THEN
            IF tries = 1 THEN
                SELECT id, provider, operation, payload INTO held_id, held_provider, held_operation, held_payload
                FROM operations WHERE idempotency_key = NEW.idempotency_key;
            ELSE
                SELECT id, provider, operation, payload INTO held_id, held_provider, held_operation, held_payload
                FROM operations WHERE idempotency_key = NEW.idempotency_key LOCK IN SHARE MODE;
            END IF;
            IF held_id IS NOT NULL THEN
                IF NOT (held_provider = NEW.provider AND held_operation = NEW.operation AND JSON_VALID(held_payload)
                        AND JSON_CONTAINS(held_payload, NEW.payload) AND JSON_CONTAINS(NEW.payload, held_payload)) THEN
                    SIGNAL SQLSTATE '45000'
                        SET MESSAGE_TEXT = 'failwell_outbox: idempotency_key was already used with a different request';
                END IF;
                SET NEW.operation_id = held_id, NEW.replay = 1;
                LEAVE main;
            END IF;
        END IF;
        IF NEW.reference IS NOT NULL THEN
            IF tries = 1 THEN
                SELECT id, operation, payload INTO held_id, held_operation, held_payload FROM operations
                WHERE provider = NEW.provider AND reference = NEW.reference;
            ELSE
                SELECT id, operation, payload INTO held_id, held_operation, held_payload FROM operations
                WHERE provider = NEW.provider AND reference = NEW.reference LOCK IN SHARE MODE;
            END IF;
            -- Without a key, the same request under the same reference is
            -- a replay too.
            IF held_id IS NOT NULL AND NEW.idempotency_key IS NULL AND held_operation = NEW.operation
               AND JSON_VALID(held_payload)
               AND JSON_CONTAINS(held_payload, NEW.payload) AND JSON_CONTAINS(NEW.payload, held_payload) THEN
                SET NEW.operation_id = held_id, NEW.replay = 1;
                LEAVE main;
            END IF;
            IF held_id IS NOT NULL THEN
                SIGNAL SQLSTATE '45000'
                    SET MESSAGE_TEXT = 'failwell_outbox: reference already belongs to another operation of the provider';
            END IF;
        END IF;
        BEGIN
            DECLARE CONTINUE HANDLER FOR 1062 SET taken = TRUE;
            SET taken = FALSE;
            INSERT INTO operations (idempotency_key, provider, operation, reference, payload, request_hash,
                                    provider_key, created_at_ms, updated_at_ms, changed_by)
            VALUES (COALESCE(NEW.idempotency_key, CONCAT('mysql:', REPLACE(UUID(), '-', ''))), NEW.provider,
                    NEW.operation, NEW.reference, NEW.payload, '',
                    IF(NEW.idempotency_key IS NULL, 'provisional', ''), now_ms, now_ms, 'app');
        END;
        IF NOT taken THEN
            LEAVE attempt;
        END IF;
        IF tries >= 2 THEN
            SIGNAL SQLSTATE '45000'
                SET MESSAGE_TEXT = 'failwell_outbox: idempotency_key or reference was taken meanwhile; try again';
        END IF;
    END LOOP;

    -- LAST_INSERT_ID() is the operation's id here (the message inserted by
    -- its own trigger does not change it once that ends). The message is
    -- held until failwell has filled it.
    SET NEW.operation_id = LAST_INSERT_ID();
    UPDATE outbox SET ordering_key = NEW.ordering_key, available_at_ms = GREATEST(available_at_ms, COALESCE(at_ms, 0)),
        locked_until_ms = 9223372036854775807
    WHERE operation_id = NEW.operation_id;
    UPDATE operations SET not_before_ms = at_ms WHERE id = NEW.operation_id AND at_ms > created_at_ms;
END;
