-- The internal balance ledger (docs/LEDGER.md): accounts, transfers
-- between them (posted at once, or held and later posted, voided or
-- expired), and the journal, two entries per change. The rules are
-- failwell-policy's `balance` module; failwell applies them and writes the
-- result here. Amounts are integers of the unit's minor unit.

CREATE TABLE ledger_accounts (
    id VARCHAR(255) NOT NULL PRIMARY KEY,
    unit VARCHAR(16) NOT NULL,
    -- The lowest available balance a debit may leave; NULL: no limit (a
    -- system account holding the other side of top-ups and payouts).
    floor BIGINT NULL,
    -- Credits minus debits posted, and the holds on either side.
    posted BIGINT NOT NULL DEFAULT 0,
    debits_pending BIGINT NOT NULL DEFAULT 0,
    credits_pending BIGINT NOT NULL DEFAULT 0,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    CONSTRAINT ledger_accounts_id CHECK (CHAR_LENGTH(id) >= 1 AND CHAR_LENGTH(unit) >= 1),
    CONSTRAINT ledger_accounts_pending CHECK (debits_pending >= 0 AND credits_pending >= 0),
    CONSTRAINT ledger_accounts_floor CHECK (floor IS NULL OR posted - debits_pending >= floor)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE ledger_transfers (
    id VARCHAR(255) NOT NULL PRIMARY KEY,
    debit_account VARCHAR(255) NOT NULL,
    credit_account VARCHAR(255) NOT NULL,
    unit VARCHAR(16) NOT NULL,
    amount BIGINT NOT NULL,
    -- 1 for a hold (two-phase), 0 for a transfer posted at once.
    pending BIGINT NOT NULL,
    state VARCHAR(16) NOT NULL,
    -- What moved: the amount, or a hold's posted amount once posted.
    posted_amount BIGINT NULL,
    -- A hold voids itself at this time unless posted or voided first.
    expires_at_ms BIGINT NULL,
    -- The hash of what the transfer asks, so that the same id with other
    -- content is refused.
    request_hash VARCHAR(64) NOT NULL,
    created_at_ms BIGINT NOT NULL,
    ended_at_ms BIGINT NULL,
    -- Who ended a hold: 'api', 'app', 'operation', 'expiry'.
    ended_by VARCHAR(32) NULL,
    -- 1 once the outcome of the hold's operation changed after the hold
    -- ended: the sweep checks whether the hold must follow.
    recheck TINYINT NOT NULL DEFAULT 0,
    -- When the sweep last tried and failed to end or correct it (it then
    -- goes after the holds not tried yet).
    follow_tried_at_ms BIGINT NULL,
    CONSTRAINT ledger_transfers_debit FOREIGN KEY (debit_account) REFERENCES ledger_accounts (id),
    CONSTRAINT ledger_transfers_credit FOREIGN KEY (credit_account) REFERENCES ledger_accounts (id),
    CONSTRAINT ledger_transfers_checks CHECK (amount > 0 AND pending IN (0, 1)
        AND state IN ('pending', 'posted', 'voided', 'expired') AND debit_account <> credit_account
        AND recheck IN (0, 1)),
    INDEX ledger_transfers_pending (state, created_at_ms),
    INDEX ledger_transfers_recheck (recheck),
    INDEX ledger_transfers_expiring (state, expires_at_ms)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Append-only: one row per account per change.
CREATE TABLE ledger_entries (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    account_id VARCHAR(255) NOT NULL,
    transfer_id VARCHAR(255) NOT NULL,
    event VARCHAR(16) NOT NULL,
    posted BIGINT NOT NULL,
    debits_pending BIGINT NOT NULL,
    credits_pending BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    CONSTRAINT ledger_entries_account_fk FOREIGN KEY (account_id) REFERENCES ledger_accounts (id),
    CONSTRAINT ledger_entries_transfer_fk FOREIGN KEY (transfer_id) REFERENCES ledger_transfers (id),
    CONSTRAINT ledger_entries_event CHECK (event IN ('transfer', 'hold', 'post', 'void', 'expire', 'reverse', 'repost')),
    INDEX ledger_entries_account (account_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
CREATE TRIGGER ledger_entries_no_update BEFORE UPDATE ON ledger_entries FOR EACH ROW
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'ledger_entries is append-only';
CREATE TRIGGER ledger_entries_no_delete BEFORE DELETE ON ledger_entries FOR EACH ROW
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'ledger_entries is append-only';

-- The hold an operation's outcome posts or voids.
ALTER TABLE operations ADD COLUMN hold_id VARCHAR(255) NULL,
    ADD CONSTRAINT operations_hold UNIQUE (hold_id),
    ADD CONSTRAINT operations_hold_fk FOREIGN KEY (hold_id) REFERENCES ledger_transfers (id);
