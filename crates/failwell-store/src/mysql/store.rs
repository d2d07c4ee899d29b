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
    relay_begin = begin,
);

/// A JSON array of ids bound as `$1`, as a subquery.
const IDS: &str = "(SELECT id FROM JSON_TABLE($1, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j)";

/// The outbox messages (`x`) whose ids are the JSON array bound as `$1`:
/// the ids first (`STRAIGHT_JOIN`), each message read by primary key
/// (`FORCE INDEX`), so that InnoDB reads and locks only these rows. A
/// multi-table statement that scans the table instead waits for every
/// message an application has inserted and not committed.
const BY_IDS: &str = "JSON_TABLE($1, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j \
     STRAIGHT_JOIN outbox x FORCE INDEX (PRIMARY) ON x.id = j.id";

// The due messages a claim takes, in claim order, found by a plain read:
// it sees committed rows only and waits for no lock. A locking read would
// wait for every application transaction that has inserted a message and
// not committed yet. They are then locked by id ([`lock_due`]).
crate::outbox::statements::due_by_scope!(
    conn = MySqlConnection,
    row = MySqlRow,
    also = "",
    lock = "",
    not_in = "(SELECT p FROM JSON_TABLE($3, '$[*]' COLUMNS (p LONGTEXT PATH '$')) AS k)",
);

/// Locks the messages `due` (read without locks, in claim order) by
/// primary key, in id order as every writer locks, and returns those
/// still due once locked, read again, in claim order.
///
/// A message another claim is taking is waited for, for as long as that
/// claim's transaction lasts, then passed over once leased. Not `SKIP
/// LOCKED`: on MariaDB 10.11 it also passes over rows whose insert has
/// just committed (seen in this crate's tests, about one claim in
/// fifteen). Errors: [`StoreError::Database`].
async fn lock_due(
    tx: &mut MySqlConnection,
    now_ms: i64,
    due: Vec<MySqlRow>,
) -> Result<Vec<MySqlRow>, StoreError> {
    if due.is_empty() {
        return Ok(due);
    }
    let order: Vec<i64> =
        due.iter().map(|r| r.try_get("id")).collect::<Result<_, _>>().context("reading a claim")?;
    let mut ids = order.clone();
    ids.sort_unstable();
    // One placeholder per id, as many as the next power of two (the rest
    // bound to -1, no id): a few statement texts in all. A list of values
    // and the primary key make InnoDB read, and lock, only these rows.
    let slots = ids.len().next_power_of_two();
    let list: Vec<String> = (0..slots).map(|i| format!("${}", i + 2)).collect();
    let mut locking = sql::query(sql::AssertSqlSafe(format!(
        "SELECT {} FROM outbox x FORCE INDEX (PRIMARY) WHERE x.id IN ({}) AND {} FOR UPDATE",
        crate::outbox::CLAIMED_COLUMNS,
        list.join(", "),
        crate::outbox::DUE
    )))
    .bind(now_ms);
    for id in ids.iter().copied().chain(std::iter::repeat(-1)).take(slots) {
        locking = locking.bind(id);
    }
    let locked = locking.fetch_all(&mut *tx).await.context("locking due outbox messages")?;
    let mut by_id = std::collections::HashMap::with_capacity(locked.len());
    for row in locked {
        by_id.insert(row.try_get::<i64, _>("id").context("reading a claim")?, row);
    }
    Ok(order.iter().filter_map(|id| by_id.remove(id)).collect())
}

/// Claims up to `limit` due messages of `scope` under lease `token` until
/// `until_ms`: an attempt whose lease expired in flight (it may have
/// reached the provider) is written to the history and counted on its
/// operation, whose key counts as used from that claim; the messages are
/// leased; their operations are read back and paired with them
/// ([`claims`]).
///
/// The store is not read: InnoDB purges an updated row's old index entries by itself,
/// so a claim does not walk past delivered messages (PostgreSQL's claim
/// starts from a floor, `postgres/floors.rs`).
async fn lease_due(
    _store: &MySqlStore,
    tx: &mut MySqlConnection,
    now_ms: i64,
    limit: u32,
    until_ms: i64,
    token: i64,
    scope: &ClaimScope,
) -> Result<Vec<Claimed>, StoreError> {
    super::contract::take_over(&mut *tx, now_ms).await?;
    let found = due_messages(&mut *tx, now_ms, limit, scope).await?;
    let due = lock_due(&mut *tx, now_ms, found).await?;

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
         FROM {BY_IDS} STRAIGHT_JOIN operations o FORCE INDEX (PRIMARY) ON o.id = x.operation_id \
         WHERE x.in_flight = 1 ORDER BY x.id"
    )))
    .bind(ids.as_str())
    .bind(now_ms)
    .execute(&mut *tx)
    .await
    .context("recording interrupted attempts")?;
    sql::query(sql::AssertSqlSafe(format!(
        "UPDATE {BY_IDS} STRAIGHT_JOIN operations o FORCE INDEX (PRIMARY) ON o.id = x.operation_id \
         SET o.attempts = o.attempts + 1, o.effect_possible = 1, \
         o.key_first_sent_at_ms = COALESCE(o.key_first_sent_at_ms, x.updated_at_ms) \
         WHERE x.in_flight = 1"
    )))
    .bind(ids.as_str())
    .execute(&mut *tx)
    .await
    .context("counting interrupted attempts")?;
    sql::query(sql::AssertSqlSafe(format!(
        "UPDATE {BY_IDS} SET x.locked_until_ms = $2, x.lease_token = $3, x.in_flight = 1, x.updated_at_ms = $4, \
         x.attempts = x.attempts + (x.attempts < {})",
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
    // Locked in the array's order: in id order, as every writer locks.
    let mut leases = leases.to_vec();
    leases.sort_unstable();
    let leases = serde_json::to_string(&leases).unwrap_or_default();
    let mut tx = pool.begin().await.context("beginning a transaction")?;
    let held: Vec<i64> = sql::query_scalar(sql::AssertSqlSafe(format!(
        "SELECT x.id FROM JSON_TABLE($1, '$[*]' COLUMNS (id BIGINT PATH '$[0]', token BIGINT PATH '$[1]')) AS l \
         STRAIGHT_JOIN {table} x FORCE INDEX (PRIMARY) ON x.id = l.id AND x.lease_token = l.token \
         WHERE x.state = 'pending' FOR UPDATE"
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
