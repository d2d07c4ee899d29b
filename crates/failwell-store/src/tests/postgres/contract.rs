//! The ledger's plain-SQL contract on PostgreSQL: an application's own
//! pool inserts into the view `failwell_transfers` and, with `hold_id`,
//! into `failwell_outbox` (migration 0015).

use sqlx::PgPool;

use super::{Schema, schema};
use crate::PostgresStore;

/// A store, and a pool of the application's own on the same schema, with
/// its table `orders`.
async fn store() -> (Schema, PostgresStore, PgPool) {
    let (schema, url) = schema().await;
    let s = PostgresStore::open(&url, 4).await.unwrap();
    let app = PgPool::connect(&url).await.unwrap();
    sqlx::query("CREATE TABLE orders (reference VARCHAR(64) PRIMARY KEY, amount BIGINT NOT NULL)")
        .execute(&app)
        .await
        .unwrap();
    (schema, s, app)
}

super::super::ledger_contract_cases::ledger_contract_cases!(
    clock = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
    begin = "BEGIN",
    pool = sqlx::PgPool,
    insufficient = "insufficient funds: account \"wallet\" has 10 available above its floor of 0, 30 asked",
);
