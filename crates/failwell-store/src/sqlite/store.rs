//! [`Store`](crate::Store) on SQLite: the shared implementation
//! ([`crate::store`]) under the single writer, and the claim's first step.

use sqlx::sqlite::{SqliteConnection, SqliteRow};

use super::SqliteStore;
use crate::outbox::{CLAIMED_COLUMNS, DUE};

crate::store::store_impl!(store = SqliteStore, lock = "", ids_in = "(SELECT value FROM json_each($1))",);

/// The due messages a claim takes, in claim order (see [`ClaimScope`]).
/// One indexed query per provider for [`ClaimScope::Providers`], merged in
/// turns; the single writer holds them until the claim commits.
async fn due_messages(
    conn: &mut SqliteConnection,
    now_ms: i64,
    limit: u32,
    scope: &ClaimScope,
) -> Result<Vec<SqliteRow>, StoreError> {
    let query = |filter: &str| {
        sqlx::AssertSqlSafe(format!(
            "SELECT {CLAIMED_COLUMNS} FROM outbox x WHERE {DUE} {filter} ORDER BY x.available_at_ms, x.id LIMIT $2"
        ))
    };
    let mut rows = Vec::new();
    match scope {
        ClaimScope::All => {
            rows = sqlx::query(query(""))
                .bind(now_ms)
                .bind(i64::from(limit))
                .fetch_all(&mut *conn)
                .await
                .context("finding due outbox messages")?;
        }
        ClaimScope::Strays(known) => {
            rows = sqlx::query(query("AND x.provider NOT IN (SELECT value FROM json_each($3))"))
                .bind(now_ms)
                .bind(i64::from(limit))
                .bind(serde_json::to_string(known).unwrap_or_default())
                .fetch_all(&mut *conn)
                .await
                .context("finding due outbox messages")?;
        }
        ClaimScope::Providers(providers) => {
            let mut turns = Vec::with_capacity(providers.len());
            for provider in providers {
                let of_provider = sqlx::query(query("AND x.provider = $3"))
                    .bind(now_ms)
                    .bind(i64::from(limit))
                    .bind(provider)
                    .fetch_all(&mut *conn)
                    .await
                    .context("finding due outbox messages")?;
                turns.push(of_provider.into_iter());
            }
            while rows.len() < limit as usize {
                let before = rows.len();
                for turn in &mut turns {
                    rows.extend(turn.next());
                }
                if rows.len() == before {
                    break;
                }
            }
            rows.truncate(limit as usize);
        }
    }
    Ok(rows)
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
