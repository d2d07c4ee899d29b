//! The outbox role on SQLite: the shared statements
//! ([`crate::outbox::statements`]) under the single writer, and what is SQLite's own: the
//! claim, a batch of results and lease renewal.

use sqlx::Row;
use sqlx::sqlite::{SqliteConnection, SqliteRow};

use super::SqliteStore;
use super::contract::FILLED;
use super::settle::complete_batch;
use crate::inbox::InboxBinds;

crate::outbox::statements::pair_claims!(conn = SqliteConnection, row = SqliteRow);

crate::outbox::statements::outbox_statements!(
    store = SqliteStore,
    lock = "",
    upsert_message = "ON CONFLICT (operation_id) DO UPDATE SET",
    relay_begin = begin,
);

// The due messages a claim takes, in claim order; the single writer holds
// them until the claim commits. A row an application inserted through
// `failwell_outbox` is claimed once filled (see `contract.rs`).
crate::outbox::statements::due_by_scope!(
    conn = SqliteConnection,
    row = SqliteRow,
    also = format!("AND {FILLED}"),
    lock = "",
    not_in = "(SELECT value FROM json_each($3))",
);

/// Claims up to `limit` due messages of `scope` under lease `token` until
/// `until_ms`, in claim order, after filling what the `failwell_outbox`
/// trigger could not compute (see [`super::contract`]). An attempt whose
/// lease expired in flight is written to the history (it may have reached
/// the provider) before its message is leased again.
///
/// The store is not read: SQLite removes an updated row's old index entries at once,
/// so a claim does not walk past delivered messages (PostgreSQL's claim
/// starts from a floor, `postgres/floors.rs`).
async fn lease_due(
    _store: &SqliteStore,
    tx: &mut SqliteConnection,
    now_ms: i64,
    limit: u32,
    until_ms: i64,
    token: i64,
    scope: &ClaimScope,
) -> Result<Vec<Claimed>, StoreError> {
    super::contract::fill(&mut *tx, now_ms, None).await?;
    let due = due_messages(&mut *tx, now_ms, limit, scope).await?;
    if due.is_empty() {
        return Ok(Vec::new());
    }
    // A message whose operation_id was changed behind failwell's back (to
    // something other than an id, or to no operation) is set aside below.
    let ids: Vec<i64> = due.iter().map(|r| r.get::<i64, _>("id")).collect();
    let op_ids: Vec<i64> = due.iter().filter_map(|r| r.try_get::<i64, _>("operation_id").ok()).collect();
    // An attempt whose lease expired in flight may have reached the
    // provider: it goes into the history before the message is leased again.
    // A time stored out of range (behind failwell's back, before the schema
    // checked it) reads as the claim's own.
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO attempts (operation_id, kind, attempt_no, provider_key, started_at_ms, duration_ms, \
         status_code, error_kind, classification, outcome, decision) \
         SELECT o.id, 'call', CASE WHEN {} THEN o.attempts + 1 ELSE 0 END, o.provider_key, \
         CASE WHEN x.updated_at_ms BETWEEN 0 AND $2 THEN x.updated_at_ms ELSE $2 END, \
         CASE WHEN x.updated_at_ms BETWEEN 0 AND $2 THEN $2 - x.updated_at_ms ELSE 0 END, NULL, \
         'interrupted', 'ambiguous', 'unknown', 'interrupted: the lease expired before a result was recorded' \
         FROM outbox x JOIN operations o ON o.id = x.operation_id \
         WHERE x.id IN (SELECT value FROM json_each($1)) AND x.in_flight = 1",
        countable("o.attempts")
    )))
    .bind_ids(&ids)
    .bind(now_ms)
    .execute(&mut *tx)
    .await
    .context("recording interrupted attempts")?;
    // Its key counts as used from the claim it was interrupted in (the
    // message's updated_at_ms until it is leased again below).
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE operations SET attempts = CASE WHEN {} THEN attempts + 1 ELSE attempts END, effect_possible = 1, \
         key_first_sent_at_ms = COALESCE(key_first_sent_at_ms, (SELECT CASE WHEN updated_at_ms BETWEEN 0 AND $2 \
           THEN updated_at_ms ELSE $2 END FROM outbox WHERE operation_id = operations.id)) \
         WHERE id IN (SELECT operation_id FROM outbox WHERE id IN (SELECT value FROM json_each($1)) AND in_flight = 1)",
        countable("attempts")
    )))
    .bind_ids(&ids)
    .bind(now_ms)
    .execute(&mut *tx)
    .await
    .context("counting interrupted attempts")?;
    // A count that is damage is left as it is (its row is set aside): the
    // schema refuses a damaged value written over another.
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE outbox SET locked_until_ms = $2, lease_token = $3, in_flight = 1, updated_at_ms = $4, \
         attempts = CASE WHEN {} THEN attempts + 1 ELSE attempts END WHERE id IN (SELECT value FROM json_each($1))",
        countable("attempts")
    )))
    .bind_ids(&ids)
    .bind(until_ms)
    .bind(token)
    .bind(now_ms)
    .execute(&mut *tx)
    .await
    .context("leasing outbox messages")?;
    let rows = sqlx::query(select_operation!("WHERE o.id IN (SELECT value FROM json_each($1))"))
        .bind_ids(&op_ids)
        .fetch_all(&mut *tx)
        .await
        .context("reading claimed operations")?;
    claims(&mut *tx, &due, &rows, token, now_ms).await
}

/// The test, in SQL, that `column` holds a count a claim may add to: an
/// integer below [`DAMAGED_COUNT`](crate::outbox::rows::DAMAGED_COUNT). SQLite
/// stores any value in any column; another is damage, left as it is.
fn countable(column: &str) -> String {
    format!(
        "typeof({column}) = 'integer' AND {column} BETWEEN 0 AND {}",
        crate::outbox::rows::DAMAGED_COUNT - 1
    )
}

/// Extends the leases `(id, token)` of `queue` still held to `until_ms`.
async fn renew_leases(
    pool: &sqlx::SqlitePool,
    queue: crate::Leased,
    leases: &[(i64, i64)],
    until_ms: i64,
) -> Result<u64, crate::StoreError> {
    use crate::error::Context;
    let table = queue.table();
    let done = sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE {table} SET locked_until_ms = $2 WHERE state = 'pending' AND EXISTS \
         (SELECT 1 FROM json_each($1) l WHERE l.value ->> 0 = {table}.id AND l.value ->> 1 = {table}.lease_token)"
    )))
    .bind(serde_json::to_string(leases).unwrap_or_default())
    .bind(until_ms)
    .execute(pool)
    .await
    .context("renewing leases")?;
    Ok(done.rows_affected())
}
