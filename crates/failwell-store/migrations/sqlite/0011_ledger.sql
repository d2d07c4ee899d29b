-- The internal balance ledger (docs/LEDGER.md): accounts, transfers
-- between them (posted at once, or held and later posted, voided or
-- expired), and the journal, two entries per change. The rules are
-- failwell-policy's `balance` module; failwell applies them and writes the
-- result here. Amounts are integers of the unit's minor unit.

CREATE TABLE ledger_accounts (
    id              TEXT    PRIMARY KEY NOT NULL CHECK (length(CAST(id AS BLOB)) BETWEEN 1 AND 255),
    unit            TEXT    NOT NULL CHECK (length(CAST(unit AS BLOB)) BETWEEN 1 AND 16),
    -- The lowest available balance a debit may leave; NULL: no limit (a
    -- system account holding the other side of top-ups and payouts).
    floor           INTEGER,
    -- Credits minus debits posted, and the holds on either side.
    posted          INTEGER NOT NULL DEFAULT 0,
    debits_pending  INTEGER NOT NULL DEFAULT 0 CHECK (debits_pending >= 0),
    credits_pending INTEGER NOT NULL DEFAULT 0 CHECK (credits_pending >= 0),
    created_at_ms   INTEGER NOT NULL,
    updated_at_ms   INTEGER NOT NULL,
    CHECK (floor IS NULL OR posted - debits_pending >= floor)
) STRICT;

CREATE TABLE ledger_transfers (
    id              TEXT    PRIMARY KEY NOT NULL CHECK (length(CAST(id AS BLOB)) BETWEEN 1 AND 255),
    debit_account   TEXT    NOT NULL REFERENCES ledger_accounts (id),
    credit_account  TEXT    NOT NULL REFERENCES ledger_accounts (id),
    unit            TEXT    NOT NULL,
    amount          INTEGER NOT NULL CHECK (amount > 0),
    -- 1 for a hold (two-phase), 0 for a transfer posted at once.
    pending         INTEGER NOT NULL CHECK (pending IN (0, 1)),
    state           TEXT    NOT NULL CHECK (state IN ('pending', 'posted', 'voided', 'expired')),
    -- What moved: the amount, or a hold's posted amount once posted.
    posted_amount   INTEGER,
    -- A hold voids itself at this time unless posted or voided first.
    expires_at_ms   INTEGER,
    -- The hash of what the transfer asks, so that the same id with other
    -- content is refused.
    request_hash    TEXT    NOT NULL,
    created_at_ms   INTEGER NOT NULL,
    ended_at_ms     INTEGER,
    -- Who ended a hold: 'api', 'app', 'operation', 'expiry'.
    ended_by        TEXT,
    -- 1 once the outcome of the hold's operation changed after the hold
    -- ended: the sweep checks whether the hold must follow.
    recheck         INTEGER NOT NULL DEFAULT 0 CHECK (recheck IN (0, 1)),
    -- When the sweep last tried and failed to end or correct it (it then
    -- goes after the holds not tried yet).
    follow_tried_at_ms INTEGER,
    CHECK (debit_account <> credit_account)
) STRICT;
CREATE INDEX ledger_transfers_pending ON ledger_transfers (created_at_ms) WHERE state = 'pending';
CREATE INDEX ledger_transfers_expiring ON ledger_transfers (expires_at_ms)
    WHERE state = 'pending' AND expires_at_ms IS NOT NULL;
CREATE INDEX ledger_transfers_recheck ON ledger_transfers (id) WHERE recheck = 1;

-- Append-only: one row per account per change.
CREATE TABLE ledger_entries (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    account_id      TEXT    NOT NULL REFERENCES ledger_accounts (id),
    transfer_id     TEXT    NOT NULL REFERENCES ledger_transfers (id),
    event           TEXT    NOT NULL CHECK (event IN ('transfer', 'hold', 'post', 'void', 'expire', 'reverse', 'repost')),
    posted          INTEGER NOT NULL,
    debits_pending  INTEGER NOT NULL,
    credits_pending INTEGER NOT NULL,
    created_at_ms   INTEGER NOT NULL
) STRICT;
CREATE INDEX ledger_entries_account ON ledger_entries (account_id, id);
CREATE TRIGGER ledger_entries_no_update BEFORE UPDATE ON ledger_entries
BEGIN SELECT RAISE(ABORT, 'ledger_entries is append-only'); END;
CREATE TRIGGER ledger_entries_no_delete BEFORE DELETE ON ledger_entries
BEGIN SELECT RAISE(ABORT, 'ledger_entries is append-only'); END;

-- The hold an operation's outcome posts or voids.
ALTER TABLE operations ADD COLUMN hold_id TEXT REFERENCES ledger_transfers (id);
CREATE UNIQUE INDEX operations_hold ON operations (hold_id) WHERE hold_id IS NOT NULL;
