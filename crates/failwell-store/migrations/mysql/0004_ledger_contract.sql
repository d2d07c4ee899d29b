-- The ledger in plain SQL on MySQL and MariaDB (docs/LEDGER.md, "In plain
-- SQL"). MySQL has no triggers on views, so `failwell_transfers` is a
-- table: an application inserts a transfer into it in its own transaction,
-- and its trigger applies the transfer as failwell's Rust path does
-- (ledger/plan.rs with failwell_policy::balance): the same checks in the
-- same order, the same rows in ledger_transfers (with the same request
-- hash), the two accounts updated and the two journal entries written, or
-- SQLSTATE 45000 with a message naming the rule, nothing written. The
-- accounts are locked by primary key, in id order, as failwell's own
-- batches lock them (no locking read that scans). The row inserted into
-- the table stays, with `replay` set; failwell deletes the rows (they are
-- a record of the requests, not of the transfers: ledger_transfers is).
--
-- `failwell_outbox` gains `hold_id`: a pending hold (made earlier, e.g.
-- through failwell_transfers in the same transaction) that the operation's
-- outcome then posts or voids, tied by a second trigger that follows the
-- first.

CREATE TABLE failwell_transfers (
    seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    id LONGTEXT NULL,
    debit_account LONGTEXT NULL,
    credit_account LONGTEXT NULL,
    amount BIGINT NULL,
    pending TINYINT NULL DEFAULT 0,
    timeout_ms BIGINT NULL,
    -- Written by the trigger: 1 when the transfer existed with the same
    -- content (nothing was applied).
    replay TINYINT NOT NULL DEFAULT 0
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TRIGGER failwell_transfers_insert BEFORE INSERT ON failwell_transfers FOR EACH ROW
main: BEGIN
    DECLARE now_ms BIGINT DEFAULT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000;
    DECLARE hash VARCHAR(64) DEFAULT NULL;
    DECLARE stored VARCHAR(64) DEFAULT NULL;
    DECLARE d_id, c_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL;
    DECLARE d_unit, c_unit VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL;
    DECLARE d_floor, d_posted, d_pending BIGINT DEFAULT NULL;
    DECLARE refusal VARCHAR(1024) CHARACTER SET utf8mb4 DEFAULT NULL;
    DECLARE taken BOOL DEFAULT FALSE;
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;

    SET NEW.replay = 0, NEW.pending = COALESCE(NEW.pending, 0);
    IF NEW.id IS NULL OR NEW.debit_account IS NULL OR NEW.credit_account IS NULL OR NEW.amount IS NULL THEN
        SIGNAL SQLSTATE '45000'
            SET MESSAGE_TEXT = 'failwell_transfers: id, debit_account, credit_account and amount are required';
    END IF;
    IF NEW.pending NOT IN (0, 1) THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'failwell_transfers: pending must be 0 or 1 (false or true)';
    END IF;
    -- NewTransfer::request_hash: each account's length (8 bytes,
    -- big-endian) and bytes, the amount (8 bytes), pending (1 byte), the
    -- timeout (8 bytes; 8 bytes of 0xff for none). HEX of a negative
    -- BIGINT is its two's complement.
    SET hash = LOWER(SHA2(CONCAT(
        UNHEX(LPAD(HEX(LENGTH(NEW.debit_account)), 16, '0')), CAST(NEW.debit_account AS BINARY),
        UNHEX(LPAD(HEX(LENGTH(NEW.credit_account)), 16, '0')), CAST(NEW.credit_account AS BINARY),
        UNHEX(LPAD(HEX(NEW.amount), 16, '0')), UNHEX(IF(NEW.pending = 1, '01', '00')),
        UNHEX(IF(NEW.timeout_ms IS NULL, 'FFFFFFFFFFFFFFFF', LPAD(HEX(NEW.timeout_ms), 16, '0')))), 256));
    -- Checked first: the lookup below compares ids with trailing spaces
    -- ignored (PAD SPACE), and no stored id has any.
    IF NOT NEW.id REGEXP '^[!-~]{1,255}$' THEN
        SIGNAL SQLSTATE '45000'
            SET MESSAGE_TEXT = 'failwell_transfers: id must be 1 to 255 bytes of printable ASCII without spaces';
    END IF;
    -- The same id: a replay when the content is the same, refused
    -- otherwise. A plain read: a locking one would lock the gap where a
    -- new id goes. One committed meanwhile is found by the insert below.
    SELECT request_hash INTO stored FROM ledger_transfers WHERE id = NEW.id;
    IF stored IS NOT NULL THEN
        IF stored <> hash THEN
            SET refusal = LEFT(CONCAT('failwell_transfers: id "', NEW.id, '" was already used with different content'), 128);
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = refusal;
        END IF;
        SET NEW.replay = 1;
        LEAVE main;
    END IF;
    IF NEW.timeout_ms IS NOT NULL AND NEW.pending = 0 THEN
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'failwell_transfers: timeout_ms is for holds (pending transfers) only';
    END IF;
    IF NEW.timeout_ms <= 0 THEN
        SET refusal = CONCAT('failwell_transfers: timeout_ms must be more than zero, not ', NEW.timeout_ms);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = refusal;
    END IF;
    -- Both accounts read and locked by primary key, in id order (an id out
    -- of form names no account: with its spaces it could match another's).
    IF NEW.debit_account REGEXP '^[!-~]{1,255}$'
       AND (NOT NEW.credit_account REGEXP '^[!-~]{1,255}$' OR NEW.debit_account <= NEW.credit_account) THEN
        SELECT id, unit, floor, posted, debits_pending INTO d_id, d_unit, d_floor, d_posted, d_pending
        FROM ledger_accounts WHERE id = NEW.debit_account FOR UPDATE;
    END IF;
    IF NEW.credit_account REGEXP '^[!-~]{1,255}$' THEN
        SELECT id, unit INTO c_id, c_unit FROM ledger_accounts WHERE id = NEW.credit_account FOR UPDATE;
    END IF;
    IF NEW.debit_account REGEXP '^[!-~]{1,255}$' AND NEW.credit_account REGEXP '^[!-~]{1,255}$'
       AND NEW.debit_account > NEW.credit_account THEN
        SELECT id, unit, floor, posted, debits_pending INTO d_id, d_unit, d_floor, d_posted, d_pending
        FROM ledger_accounts WHERE id = NEW.debit_account FOR UPDATE;
    END IF;
    IF d_id IS NULL THEN
        SET refusal = LEFT(CONCAT('failwell_transfers: debit_account: account "', NEW.debit_account, '" does not exist'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = refusal;
    END IF;
    IF c_id IS NULL THEN
        SET refusal = LEFT(CONCAT('failwell_transfers: credit_account: account "', NEW.credit_account, '" does not exist'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = refusal;
    END IF;
    IF d_unit <> c_unit THEN
        SET refusal = LEFT(CONCAT('failwell_transfers: units differ: account "', d_id, '" is in ', d_unit,
                                  ', account "', c_id, '" in ', c_unit), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = refusal;
    END IF;
    IF NEW.amount <= 0 THEN
        SET refusal = CONCAT('failwell_transfers: amount must be a positive integer of minor units, not ', NEW.amount);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = refusal;
    END IF;
    IF d_id = c_id THEN
        SIGNAL SQLSTATE '45000'
            SET MESSAGE_TEXT = 'failwell_transfers: debit_account and credit_account must be two different accounts';
    END IF;
    IF d_floor IS NOT NULL AND CAST(d_posted AS DECIMAL(21, 0)) - d_pending - NEW.amount < d_floor THEN
        SET refusal = LEFT(CONCAT('failwell_transfers: insufficient funds: account "', d_id, '" has ',
                                  CAST(d_posted AS DECIMAL(21, 0)) - d_pending, ' available above its floor of ',
                                  d_floor, ', ', NEW.amount, ' asked'), 128);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = refusal;
    END IF;

    BEGIN
        DECLARE CONTINUE HANDLER FOR 1062 SET taken = TRUE;
        INSERT INTO ledger_transfers (id, debit_account, credit_account, unit, amount, pending, state, posted_amount,
                                      expires_at_ms, request_hash, created_at_ms)
        VALUES (NEW.id, d_id, c_id, d_unit, NEW.amount, NEW.pending, IF(NEW.pending = 1, 'pending', 'posted'),
                IF(NEW.pending = 1, NULL, NEW.amount),
                IF(NEW.timeout_ms > 9223372036854775807 - now_ms, 9223372036854775807, now_ms + NEW.timeout_ms),
                hash, now_ms);
    END;
    -- The id committed meanwhile (the insert waited for it): judged by a
    -- locking read, which sees it.
    IF taken THEN
        SELECT request_hash INTO stored FROM ledger_transfers WHERE id = NEW.id LOCK IN SHARE MODE;
        IF NOT stored <=> hash THEN
            SET refusal = LEFT(CONCAT('failwell_transfers: id "', NEW.id, '" was already used with different content'), 128);
            SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = refusal;
        END IF;
        SET NEW.replay = 1;
        LEAVE main;
    END IF;
    UPDATE ledger_accounts SET posted = posted - IF(NEW.pending = 1, 0, NEW.amount),
        debits_pending = debits_pending + IF(NEW.pending = 1, NEW.amount, 0), updated_at_ms = now_ms
    WHERE id = d_id;
    UPDATE ledger_accounts SET posted = posted + IF(NEW.pending = 1, 0, NEW.amount),
        credits_pending = credits_pending + IF(NEW.pending = 1, NEW.amount, 0), updated_at_ms = now_ms
    WHERE id = c_id;
    INSERT INTO ledger_entries (account_id, transfer_id, event, posted, debits_pending, credits_pending, created_at_ms)
    VALUES (d_id, NEW.id, IF(NEW.pending = 1, 'hold', 'transfer'), IF(NEW.pending = 1, 0, -NEW.amount),
            IF(NEW.pending = 1, NEW.amount, 0), 0, now_ms),
           (c_id, NEW.id, IF(NEW.pending = 1, 'hold', 'transfer'), IF(NEW.pending = 1, 0, NEW.amount),
            0, IF(NEW.pending = 1, NEW.amount, 0), now_ms);
END;

ALTER TABLE failwell_outbox ADD COLUMN hold_id LONGTEXT NULL;

-- After failwell_outbox_insert (which sets operation_id and replay): a new
-- operation's hold must be a pending hold without a timeout, tied to no
-- operation, and is tied to it; a replay must name the hold its operation
-- was made with.
CREATE TRIGGER failwell_outbox_hold BEFORE INSERT ON failwell_outbox FOR EACH ROW FOLLOWS failwell_outbox_insert
main: BEGIN
    DECLARE held_pending BIGINT DEFAULT NULL;
    DECLARE held_state VARCHAR(16) DEFAULT NULL;
    DECLARE held_expires BIGINT DEFAULT NULL;
    DECLARE tied BIGINT DEFAULT NULL;
    DECLARE refusal VARCHAR(1024) CHARACTER SET utf8mb4 DEFAULT NULL;
    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;

    IF NEW.hold_id IS NULL THEN
        LEAVE main;
    END IF;
    IF NEW.hold_id REGEXP '^[!-~]{1,255}$' THEN
        SELECT pending, state, expires_at_ms INTO held_pending, held_state, held_expires
        FROM ledger_transfers WHERE id = NEW.hold_id FOR UPDATE;
        SELECT id INTO tied FROM operations WHERE hold_id = NEW.hold_id;
    END IF;
    SET refusal = CASE
        WHEN NEW.replay = 1 AND NOT tied <=> NEW.operation_id
            THEN 'idempotency_key was already used without this hold_id'
        WHEN NEW.replay = 1 THEN NULL
        WHEN held_pending IS NULL THEN 'hold_id names no transfer'
        WHEN held_pending = 0 THEN 'hold_id is not a hold (a pending transfer)'
        WHEN held_state <> 'pending' THEN CONCAT('hold_id names a hold that is ', held_state, ' already')
        WHEN held_expires IS NOT NULL THEN 'hold_id names a hold with a timeout; a hold tied to an operation has none'
        WHEN tied IS NOT NULL THEN 'hold_id is tied to another operation'
    END;
    IF refusal IS NOT NULL THEN
        SET refusal = CONCAT('failwell_outbox: ', refusal);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = refusal;
    END IF;
    IF NEW.replay = 0 THEN
        UPDATE operations SET hold_id = NEW.hold_id WHERE id = NEW.operation_id;
    END IF;
END;
