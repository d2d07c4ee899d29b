//! The outbox role on MySQL: the shared statements
//! ([`crate::outbox::statements`]) with row locks, and what is MySQL's own:
//! the claim and lease renewal (a batch of results is in `settle.rs`).

use sqlx::Row;
use sqlx::mysql::{MySqlConnection, MySqlRow};

use super::MySqlStore;
use super::settle::complete_batch;

crate::outbox::statements::pair_claims!(conn = MySqlConnection, row = MySqlRow);

crate::outbox::statements::outbox_statements!(
    store = MySqlStore,
    lock = " FOR UPDATE",
    upsert_message = "ON DUPLICATE KEY UPDATE",
);

/// A JSON array of ids bound as `$1`, as a subquery.
const IDS: &str = "(SELECT id FROM JSON_TABLE($1, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j)";

// The due messages a claim takes, in claim order, each locked until the
// claim commits. A row another process is claiming is waited for, then
// read again, leased, and passed over: not skipped with `SKIP LOCKED`,
// which on MariaDB 10.11 also passes over rows whose insert has just
// committed (seen in this crate's tests, about one claim in fifteen).
crate::outbox::statements::due_by_scope!(
    conn = MySqlConnection,
    row = MySqlRow,
    also = "",
    lock = " FOR UPDATE",
    not_in = "(SELECT p FROM JSON_TABLE($3, '$[*]' COLUMNS (p LONGTEXT PATH '$')) AS k)",
);

/// Claims up to `limit` due messages of `scope` under lease `token` until
/// `until_ms`: an attempt whose lease expired in flight (it may have
/// reached the provider) is written to the history and counted on its
/// operation, whose key counts as used from that claim; the messages are
/// leased; their operations are read back and paired with them
/// ([`claims`]).
async fn lease_due(
    tx: &mut MySqlConnection,
    now_ms: i64,
    limit: u32,
    until_ms: i64,
    token: i64,
    scope: &ClaimScope,
) -> Result<Vec<Claimed>, StoreError> {
    super::contract::take_over(&mut *tx, now_ms).await?;
    let due = due_messages(&mut *tx, now_ms, limit, scope).await?;

    if due.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> =
        due.iter().map(|r| r.try_get("id")).collect::<Result<_, _>>().context("reading a claim")?;
    let ids = serde_json::to_string(&ids).unwrap_or_default();
    sql::query(sql::AssertSqlSafe(format!(
        "INSERT INTO attempts (operation_id, kind, attempt_no, provider_key, started_at_ms, duration_ms, \
         status_code, error_kind, classification, outcome, decision) \
         SELECT o.id, 'call', o.attempts + 1, o.provider_key, x.updated_at_ms, $2 - x.updated_at_ms, NULL, \
         'interrupted', 'ambiguous', 'unknown', 'interrupted: the lease expired before a result was recorded' \
         FROM outbox x JOIN operations o ON o.id = x.operation_id WHERE x.id IN {IDS} AND x.in_flight = 1 \
         ORDER BY x.id"
    )))
    .bind(ids.as_str())
    .bind(now_ms)
    .execute(&mut *tx)
    .await
    .context("recording interrupted attempts")?;
    sql::query(sql::AssertSqlSafe(format!(
        "UPDATE operations o JOIN outbox x ON x.operation_id = o.id \
         SET o.attempts = o.attempts + 1, o.effect_possible = 1, \
         o.key_first_sent_at_ms = COALESCE(o.key_first_sent_at_ms, x.updated_at_ms) \
         WHERE x.id IN {IDS} AND x.in_flight = 1"
    )))
    .bind(ids.as_str())
    .execute(&mut *tx)
    .await
    .context("counting interrupted attempts")?;
    sql::query(sql::AssertSqlSafe(format!(
        "UPDATE outbox SET locked_until_ms = $2, lease_token = $3, in_flight = 1, updated_at_ms = $4, \
         attempts = attempts + (attempts < {}) WHERE id IN {IDS}",
        crate::outbox::rows::DAMAGED_COUNT
    )))
    .bind(ids.as_str())
    .bind(until_ms)
    .bind(token)
    .bind(now_ms)
    .execute(&mut *tx)
    .await
    .context("leasing outbox messages")?;
    let rows = sql::query(select_operation!(
        "WHERE o.id IN (SELECT x.operation_id FROM outbox x WHERE x.id IN ",
        "(SELECT id FROM JSON_TABLE($1, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j))"
    ))
    .bind(ids.as_str())
    .fetch_all(&mut *tx)
    .await
    .context("reading claimed operations")?;
    claims(&mut *tx, &due, &rows, token, now_ms).await
}

/// Extends the leases `(id, token)` of `queue` still held to `until_ms`,
/// locking the rows in id order as every writer does.
async fn renew_leases(
    pool: &sqlx::MySqlPool,
    queue: crate::Leased,
    leases: &[(i64, i64)],
    until_ms: i64,
) -> Result<u64, StoreError> {
    let table = queue.table();
    let leases = serde_json::to_string(leases).unwrap_or_default();
    let mut tx = pool.begin().await.context("beginning a transaction")?;
    let held: Vec<i64> = sql::query_scalar(sql::AssertSqlSafe(format!(
        "SELECT x.id FROM {table} x JOIN JSON_TABLE($1, '$[*]' COLUMNS (id BIGINT PATH '$[0]', \
         token BIGINT PATH '$[1]')) AS l ON l.id = x.id AND l.token = x.lease_token \
         WHERE x.state = 'pending' ORDER BY x.id FOR UPDATE"
    )))
    .bind(leases.as_str())
    .fetch_all(&mut *tx)
    .await
    .context("renewing leases")?;
    if !held.is_empty() {
        sql::query(sql::AssertSqlSafe(format!("UPDATE {table} SET locked_until_ms = $2 WHERE id IN {IDS}")))
            .bind(serde_json::to_string(&held).unwrap_or_default())
            .bind(until_ms)
            .execute(&mut *tx)
            .await
            .context("renewing leases")?;
    }
    tx.commit().await.context("committing lease renewals")?;
    Ok(held.len() as u64)
}
