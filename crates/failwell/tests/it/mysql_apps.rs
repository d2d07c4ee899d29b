//! Applications that keep their data in MySQL or MariaDB: they insert into
//! the table `failwell_outbox` in their own transactions, in the database a
//! real `failwell serve` uses (`MYSQL_URL`, default
//! `mysql://root@127.0.0.1:3306/test`, a database of its own per test), and
//! each message reaches the provider once.

use std::time::Duration;

use sqlx::MySqlPool;

use crate::examples::{Database, charged_once, enqueue_with_each, settled_and_rolled_back};
use crate::helpers::{mysql_database, simulator};
use crate::scale_out::gateway_on;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_node_and_php_applications_on_mysql_enqueue_in_their_own_transactions() {
    let sim = simulator(|_| {}).await;
    let database = mysql_database().await;
    let mut gateway = gateway_on(&database.url, &sim).await;
    // The application's own table, next to failwell's (created at start).
    let app = MySqlPool::connect(&database.url).await.unwrap();
    sqlx::query(
        "CREATE TABLE orders (reference VARCHAR(64) PRIMARY KEY, amount BIGINT NOT NULL, currency VARCHAR(3) NOT NULL)",
    )
    .execute(&app)
    .await
    .unwrap();
    let db_url = database.url.clone();
    let references = enqueue_with_each(Database::Mysql, |mut command| {
        command.arg(&db_url);
        command
    });
    settled_and_rolled_back(&gateway, &references).await;
    charged_once(&sim, &references);
    let orders: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders").fetch_one(&app).await.unwrap();
    assert_eq!(orders, 3, "only the committed orders");
    // The status the application reads, and the rows it inserted, taken over.
    let succeeded: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM failwell_outbox_status WHERE status = 'succeeded' AND delivery = 'done'",
    )
    .fetch_one(&app)
    .await
    .unwrap();
    assert_eq!(succeeded, 3);
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM failwell_outbox").fetch_one(&app).await.unwrap();
    assert_eq!(left, 0, "failwell deletes the rows it has taken over");
    tokio::time::sleep(Duration::from_millis(200)).await;
    charged_once(&sim, &references);
    app.close().await;
    gateway.kill().await;
}
