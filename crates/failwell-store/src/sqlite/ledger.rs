//! The ledger on SQLite: the shared statements ([`crate::ledger::statements`]),
//! batches bound as JSON. The writer's `BEGIN IMMEDIATE` is the lock.

use super::SqliteStore;

crate::ledger::statements::ledger_statements!(
    store = SqliteStore,
    conn = sqlx::SqliteConnection,
    ids = "(SELECT value FROM json_each($1))",
    lock_accounts = concat!(
        "SELECT ",
        crate::ledger::statements::account_columns!(),
        " FROM ledger_accounts WHERE id IN (SELECT value FROM json_each($1)) ORDER BY id"
    ),
    lock_transfers = "SELECT id FROM ledger_transfers WHERE id IN (SELECT value FROM json_each($1))",
    transfer_rows = "(SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.debit_account') AS debit_account, \
        json_extract(value, '$.credit_account') AS credit_account, json_extract(value, '$.unit') AS unit, \
        json_extract(value, '$.amount') AS amount, json_extract(value, '$.pending') AS pending, \
        json_extract(value, '$.state') AS state, json_extract(value, '$.posted_amount') AS posted_amount, \
        json_extract(value, '$.expires_at_ms') AS expires_at_ms, json_extract(value, '$.request_hash') AS request_hash, \
        json_extract(value, '$.created_at_ms') AS created_at_ms FROM json_each($1)) AS r",
    entry_rows = "(SELECT json_extract(value, '$.account_id') AS account_id, \
        json_extract(value, '$.transfer_id') AS transfer_id, json_extract(value, '$.event') AS event, \
        json_extract(value, '$.posted') AS posted, json_extract(value, '$.debits_pending') AS debits_pending, \
        json_extract(value, '$.credits_pending') AS credits_pending, \
        json_extract(value, '$.created_at_ms') AS created_at_ms FROM json_each($1)) AS r",
    update_accounts = "UPDATE ledger_accounts SET posted = r.posted, debits_pending = r.debits_pending, \
        credits_pending = r.credits_pending, updated_at_ms = $2 FROM (SELECT json_extract(value, '$.id') AS id, \
        json_extract(value, '$.posted') AS posted, json_extract(value, '$.debits_pending') AS debits_pending, \
        json_extract(value, '$.credits_pending') AS credits_pending FROM json_each($1)) AS r \
        WHERE ledger_accounts.id = r.id",
    open = "INSERT INTO ledger_accounts (id, unit, floor, created_at_ms, updated_at_ms) VALUES ($1, $2, $3, $4, $4) \
        ON CONFLICT (id) DO NOTHING",
);
