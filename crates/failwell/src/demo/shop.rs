//! The demo's shop: the application whose orders failwell delivers. Its
//! `orders` table sits in the same SQLite database as failwell's store, so
//! an order row and its outbox message are written in one transaction, as
//! an application writes them. This is the application's SQL, not
//! failwell's: failwell's own tables are only ever touched by
//! `failwell-store`.

use failwell_store::SqliteStore;
use sqlx::{Sqlite, Transaction};

use super::Order;

/// Creates the shop's `orders` table (reference, amount in minor units,
/// currency, placed at in ms since the Unix epoch) unless it exists.
pub(super) async fn create_orders(store: &SqliteStore) -> Result<(), sqlx::Error> {
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS orders (reference TEXT PRIMARY KEY, amount INTEGER NOT NULL, \
         currency TEXT NOT NULL, placed_at_ms INTEGER NOT NULL)",
    )
    .execute(store.pool())
    .await
    .map(drop)
}

/// Writes `order`, placed at `now_ms` (ms since the Unix epoch), in `tx`.
/// Errors: the database's, e.g. an order with the same reference exists.
pub(super) async fn insert_order(
    tx: &mut Transaction<'static, Sqlite>,
    order: &Order,
    now_ms: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO orders (reference, amount, currency, placed_at_ms) VALUES (?1, ?2, ?3, ?4)")
        .bind(&order.reference)
        .bind(order.amount as i64)
        .bind(order.currency)
        .bind(now_ms)
        .execute(&mut **tx)
        .await
        .map(drop)
}
