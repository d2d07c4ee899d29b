//! The ledger on MySQL and MariaDB: the shared statements
//! ([`crate::ledger::statements`]), batches bound as JSON. Rows are locked
//! by primary key, the batch read first (see `store.rs`): a locking read
//! that scanned would wait for rows an application has not committed.

use super::MySqlStore;

crate::ledger::statements::ledger_statements!(
    store = MySqlStore,
    conn = sqlx::MySqlConnection,
    ids = "(SELECT id FROM JSON_TABLE($1, '$[*]' COLUMNS (id VARCHAR(255) PATH '$')) AS j)",
    lock_accounts = "SELECT a.id, a.unit, a.floor, a.posted, a.debits_pending, a.credits_pending, a.created_at_ms, \
        a.updated_at_ms FROM JSON_TABLE($1, '$[*]' COLUMNS (id VARCHAR(255) PATH '$')) AS j \
        STRAIGHT_JOIN ledger_accounts a FORCE INDEX (PRIMARY) ON a.id = j.id ORDER BY a.id FOR UPDATE",
    lock_transfers = "SELECT t.id FROM JSON_TABLE($1, '$[*]' COLUMNS (id VARCHAR(255) PATH '$')) AS j \
        STRAIGHT_JOIN ledger_transfers t FORCE INDEX (PRIMARY) ON t.id = j.id ORDER BY t.id FOR UPDATE",
    transfer_rows = "JSON_TABLE($1, '$[*]' COLUMNS (id VARCHAR(255) PATH '$.id', \
        debit_account VARCHAR(255) PATH '$.debit_account', credit_account VARCHAR(255) PATH '$.credit_account', \
        unit VARCHAR(16) PATH '$.unit', amount BIGINT PATH '$.amount', pending BIGINT PATH '$.pending', \
        state VARCHAR(16) PATH '$.state', posted_amount BIGINT PATH '$.posted_amount', \
        expires_at_ms BIGINT PATH '$.expires_at_ms', request_hash VARCHAR(64) PATH '$.request_hash', \
        created_at_ms BIGINT PATH '$.created_at_ms')) AS r",
    entry_rows = "JSON_TABLE($1, '$[*]' COLUMNS (account_id VARCHAR(255) PATH '$.account_id', \
        transfer_id VARCHAR(255) PATH '$.transfer_id', event VARCHAR(16) PATH '$.event', \
        posted BIGINT PATH '$.posted', debits_pending BIGINT PATH '$.debits_pending', \
        credits_pending BIGINT PATH '$.credits_pending', created_at_ms BIGINT PATH '$.created_at_ms')) AS r",
    update_accounts = "UPDATE JSON_TABLE($1, '$[*]' COLUMNS (id VARCHAR(255) PATH '$.id', \
        posted BIGINT PATH '$.posted', debits_pending BIGINT PATH '$.debits_pending', \
        credits_pending BIGINT PATH '$.credits_pending')) AS r STRAIGHT_JOIN ledger_accounts a FORCE INDEX (PRIMARY) \
        ON a.id = r.id SET a.posted = r.posted, a.debits_pending = r.debits_pending, \
        a.credits_pending = r.credits_pending, a.updated_at_ms = $2",
    // Every value is checked first, so `IGNORE` leaves out only the
    // existing id.
    open = "INSERT IGNORE INTO ledger_accounts (id, unit, floor, created_at_ms, updated_at_ms) \
        VALUES ($1, $2, $3, $4, $4)",
);
