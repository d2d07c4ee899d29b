//! The ledger on PostgreSQL: the shared statements ([`crate::ledger::statements`]),
//! batches bound as JSON.

use super::PostgresStore;

crate::ledger::statements::ledger_statements!(
    store = PostgresStore,
    conn = sqlx::PgConnection,
    ids = "(SELECT json_array_elements_text($1::json))",
    lock_accounts = concat!(
        "SELECT ",
        crate::ledger::statements::account_columns!(),
        " FROM ledger_accounts WHERE id IN (SELECT json_array_elements_text($1::json)) ORDER BY id FOR UPDATE"
    ),
    lock_transfers = "SELECT id FROM ledger_transfers WHERE id IN (SELECT json_array_elements_text($1::json)) ORDER BY id FOR UPDATE",
    transfer_rows = "json_to_recordset($1::json) AS r(id text, debit_account text, credit_account text, unit text, \
        amount bigint, pending bigint, state text, posted_amount bigint, expires_at_ms bigint, request_hash text, \
        created_at_ms bigint)",
    entry_rows = "json_to_recordset($1::json) AS r(account_id text, transfer_id text, event text, posted bigint, \
        debits_pending bigint, credits_pending bigint, created_at_ms bigint)",
    update_accounts = "UPDATE ledger_accounts AS a SET posted = r.posted, debits_pending = r.debits_pending, \
        credits_pending = r.credits_pending, updated_at_ms = $2 FROM json_to_recordset($1::json) \
        AS r(id text, posted bigint, debits_pending bigint, credits_pending bigint) WHERE a.id = r.id",
    open = "INSERT INTO ledger_accounts (id, unit, floor, created_at_ms, updated_at_ms) VALUES ($1, $2, $3, $4, $4) \
        ON CONFLICT (id) DO NOTHING",
);
