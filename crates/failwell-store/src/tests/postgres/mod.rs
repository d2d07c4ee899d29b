//! The store's behaviour on PostgreSQL, each test in a schema of its own,
//! and what only PostgreSQL has: the outbox in plain SQL and several
//! processes racing on one database.

mod backlog;
mod contract;
mod delivered;
mod enqueue_many;
mod floors;
mod inbox_races;
mod outbox;

use crate::PostgresStore;

type S = PostgresStore;

/// Statements that switch off the schema's checks of counts.
const COUNT_CHECKS_OFF: &[&str] = &["ALTER DOMAIN failwell_count DROP CONSTRAINT failwell_count_in_range"];
/// What the schema says when it refuses a count out of range.
const COUNT_CHECK_SAYS: &str = "failwell_count_in_range";
/// An application's own table, for the cases that write one.
const ORDERS_TABLE: &str = "CREATE TABLE orders (id TEXT PRIMARY KEY)";

/// A schema of its own on the test server, dropped when this is.
pub(super) struct Schema {
    url: String,
    name: String,
}

impl Drop for Schema {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        super::clean_up(move || async move {
            // A connection of the test still inside a transaction (its
            // rollback waits for the test's runtime) holds locks: the
            // schema is then left behind, not waited for.
            let options: sqlx::postgres::PgConnectOptions = url.parse()?;
            let pool = sqlx::PgPool::connect_with(options.options([("lock_timeout", "2s")])).await?;
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {name} CASCADE")))
                .execute(&pool)
                .await?;
            pool.close().await;
            Ok(())
        });
    }
}

pub(super) fn server_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A fresh schema and the URL whose connections use it.
pub(super) async fn schema() -> (Schema, String) {
    let url = server_url();
    let name = format!("store_test_{:016x}", rand::random::<u64>());
    let pool = sqlx::PgPool::connect(&url).await.expect("PostgreSQL at DATABASE_URL");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {name}"))).execute(&pool).await.unwrap();
    pool.close().await;
    let separator = if url.contains('?') { '&' } else { '?' };
    let schema_url = format!("{url}{separator}options=-csearch_path%3D{name}");
    (Schema { url, name }, schema_url)
}

/// A connection of its own to `pool`'s server, listening on the relays'
/// channel, `failwell_outbox`.
async fn listening(pool: &sqlx::PgPool) -> sqlx::postgres::PgListener {
    let mut listener = sqlx::postgres::PgListener::connect_with(pool).await.unwrap();
    listener.listen("failwell_outbox").await.unwrap();
    listener
}

/// Waits up to 5 s for a `failwell_outbox` notice naming `schema`, passing
/// over those of tests running beside this one (in schemas of their own,
/// on the same channel); panics when none comes.
async fn notice_naming(listener: &mut sqlx::postgres::PgListener, schema: &Schema) {
    let ours = async { while listener.recv().await.unwrap().payload() != schema.name {} };
    tokio::time::timeout(std::time::Duration::from_secs(5), ours)
        .await
        .expect("a failwell_outbox notice naming the schema");
}

async fn store() -> (Schema, S) {
    let (schema, url) = schema().await;
    (schema, PostgresStore::open(&url, 4).await.unwrap())
}

super::store_tests!();
super::cases::concurrent::concurrent_cases!();
