//! [`Store`](crate::Store) on PostgreSQL: the shared implementation
//! ([`crate::store`]) with row locks, and the claim's first step.

use sqlx::postgres::{PgConnection, PgRow};

use super::PostgresStore;
use crate::outbox::{CLAIMED_COLUMNS, DUE};

crate::store::store_impl!(
    store = PostgresStore,
    lock = " FOR UPDATE",
    ids_in = "(SELECT unnest($1::bigint[]))",
);

/// The due messages a claim takes, in claim order (see [`ClaimScope`]),
/// each locked until the claim commits; rows another process is claiming
/// are skipped, not waited for (`SKIP LOCKED`). For
/// [`ClaimScope::Providers`], one index range per provider (`LATERAL`),
/// merged in turns.
async fn due_messages(
    conn: &mut PgConnection,
    now_ms: i64,
    limit: u32,
    scope: &ClaimScope,
) -> Result<Vec<PgRow>, StoreError> {
    let sql = match scope {
        ClaimScope::All => format!(
            "SELECT {CLAIMED_COLUMNS} FROM outbox x WHERE {DUE} \
             ORDER BY x.available_at_ms, x.id LIMIT $2 FOR UPDATE SKIP LOCKED"
        ),
        ClaimScope::Strays(_) => format!(
            "SELECT {CLAIMED_COLUMNS} FROM outbox x WHERE {DUE} AND NOT (x.provider = ANY($3)) \
             ORDER BY x.available_at_ms, x.id LIMIT $2 FOR UPDATE SKIP LOCKED"
        ),
        ClaimScope::Providers(_) => format!(
            "SELECT id, operation_id, attempts, previous_delay_ms, in_flight FROM ( \
               SELECT c.*, row_number() OVER (PARTITION BY c.provider ORDER BY c.available_at_ms, c.id) AS turn \
               FROM unnest($3::text[]) AS wanted (provider) \
               CROSS JOIN LATERAL (SELECT {CLAIMED_COLUMNS} FROM outbox x \
                 WHERE x.provider = wanted.provider AND {DUE} \
                 ORDER BY x.available_at_ms, x.id LIMIT $2 FOR UPDATE SKIP LOCKED) c \
             ) due ORDER BY turn, available_at_ms, id LIMIT $2"
        ),
    };
    let query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now_ms).bind(i64::from(limit));
    let query = match scope {
        ClaimScope::All => query,
        ClaimScope::Strays(providers) | ClaimScope::Providers(providers) => query.bind(providers),
    };
    query.fetch_all(conn).await.context("finding due outbox messages")
}

/// Extends the leases `(id, token)` of `queue` still held to `until_ms`,
/// locking the rows in id order as every writer does.
async fn renew_leases(
    pool: &sqlx::PgPool,
    queue: crate::Leased,
    leases: &[(i64, i64)],
    until_ms: i64,
) -> Result<u64, crate::StoreError> {
    use crate::error::Context;
    let table = queue.table();
    let (ids, tokens): (Vec<i64>, Vec<i64>) = leases.iter().copied().unzip();
    let done = sqlx::query(sqlx::AssertSqlSafe(format!(
        "WITH held AS (SELECT x.id FROM {table} x JOIN unnest($1::bigint[], $2::bigint[]) AS l (id, token) \
           ON l.id = x.id AND l.token = x.lease_token WHERE x.state = 'pending' ORDER BY x.id FOR UPDATE OF x) \
         UPDATE {table} SET locked_until_ms = $3 WHERE id IN (SELECT id FROM held)"
    )))
    .bind(&ids)
    .bind(&tokens)
    .bind(until_ms)
    .execute(pool)
    .await
    .context("renewing leases")?;
    Ok(done.rows_affected())
}
