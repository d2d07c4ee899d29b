//! The store's behaviour on MySQL (`MYSQL_URL`, default
//! `mysql://root@127.0.0.1:3306/test`; MariaDB 10.6+ too), each test in a
//! database of its own, dropped afterwards.

use crate::MySqlStore;
// The shared cases write `$N` parameters, as the store's own statements do.
use crate::mysql::sql as sqlx;

type S = MySqlStore;

/// Statements that switch off the schema's checks of counts.
const COUNT_CHECKS_OFF: &[&str] = &["ALTER TABLE outbox DROP CONSTRAINT outbox_numbers_in_range"];
/// What the schema says when it refuses a count out of range.
const COUNT_CHECK_SAYS: &str = "outbox_numbers_in_range";
/// An application's own table, for the cases that write one.
const ORDERS_TABLE: &str = "CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY)";

/// A database of its own on the test server, dropped when this is.
pub(super) struct Database {
    url: String,
    name: String,
}

impl Drop for Database {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        super::clean_up(move || async move {
            let pool = ::sqlx::MySqlPool::connect(&url).await?;
            // The test's connections may still be open, inside a
            // transaction whose rollback waits for the test's runtime:
            // they would hold the tables' metadata locks.
            let open: Vec<i64> =
                ::sqlx::query_scalar("SELECT id FROM information_schema.processlist WHERE db = ?")
                    .bind(&name)
                    .fetch_all(&pool)
                    .await?;
            for id in open {
                let _ = ::sqlx::query(::sqlx::AssertSqlSafe(format!("KILL {id}"))).execute(&pool).await;
            }
            ::sqlx::query(::sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name}")))
                .execute(&pool)
                .await?;
            pool.close().await;
            Ok(())
        });
    }
}

/// The test server's URL.
pub(super) fn server_url() -> String {
    std::env::var("MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into())
}

/// A fresh database and the URL whose connections use it.
pub(super) async fn database() -> (Database, String) {
    let url = server_url();
    let name = format!("store_test_{:016x}", rand::random::<u64>());
    let pool = ::sqlx::MySqlPool::connect(&url).await.expect("MySQL at MYSQL_URL");
    ::sqlx::query(::sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&pool).await.unwrap();
    pool.close().await;
    let (base, query) = url.split_once('?').map_or((url.as_str(), ""), |(b, q)| (b, q));
    let server = base.rsplit_once('/').map_or(base, |(server, _)| server);
    let separator = if query.is_empty() { "" } else { "?" };
    (Database { url: url.clone(), name: name.clone() }, format!("{server}/{name}{separator}{query}"))
}

async fn store() -> (Database, S) {
    let (database, url) = database().await;
    (database, MySqlStore::open(&url, 4).await.unwrap())
}

super::store_tests!();
super::cases::concurrent::concurrent_cases!();

/// Two transactions that lock two rows in opposite orders: MySQL rolls one
/// back, and its error is a conflict, which the store's transactions run
/// again (`retry_conflicts!`).
#[tokio::test]
async fn a_deadlock_is_a_conflict_to_run_again() {
    use crate::error::Context as _;
    let (_d, url) = database().await;
    let pool = ::sqlx::MySqlPool::connect(&url).await.unwrap();
    ::sqlx::query("CREATE TABLE t (id INT PRIMARY KEY)").execute(&pool).await.unwrap();
    ::sqlx::query("INSERT INTO t VALUES (1), (2)").execute(&pool).await.unwrap();
    let (mut a, mut b) = (pool.begin().await.unwrap(), pool.begin().await.unwrap());
    let lock = |id: i32| ::sqlx::query("SELECT id FROM t WHERE id = ? FOR UPDATE").bind(id);
    lock(1).execute(&mut *a).await.unwrap();
    lock(2).execute(&mut *b).await.unwrap();
    let (first, second) = tokio::join!(lock(2).execute(&mut *a), async {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        lock(1).execute(&mut *b).await
    });
    let failed = first.err().or(second.err()).expect("one of the two was rolled back");
    let error = Err::<(), _>(failed).context("locking").unwrap_err();
    assert!(error.is_conflict(), "{error:?}");
    assert!(!Err::<(), _>(::sqlx::Error::RowNotFound).context("reading").unwrap_err().is_conflict());
}

/// A URL that names no database is refused before anything is written,
/// with an error that says so.
#[tokio::test]
async fn a_url_without_a_database_is_refused_saying_so() {
    let server = server_url();
    let (base, _) = server.split_once('?').unwrap_or((&server, ""));
    let root = base.rsplit_once('/').map_or(base, |(root, _)| root);
    for url in [format!("{root}/"), root.to_owned()] {
        let error = MySqlStore::open(&url, 2).await.expect_err("refused");
        assert!(matches!(error, crate::StoreError::NoDatabase), "{url}: {error:?}");
        assert!(error.to_string().contains("names no database"), "{error}");
    }
}
