//! Applications that keep their data in SQLite: they insert into
//! `failwell_outbox` in their own transactions, in the file a real
//! `failwell serve` uses, and each message reaches the provider once.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use failwell_sim::Simulator;
use serde_json::Value;

use crate::examples::{Database, enqueue_with_each, repository, settled_and_rolled_back};
use crate::helpers::{Gateway, simulator};

/// `failwell serve` on its SQLite file, delivering to `sim` (at most 20
/// attempts over 10 minutes).
async fn gateway(sim: &Simulator) -> Gateway {
    Gateway::start(&sim.base_url(), "max_attempts = 20\ndeadline_ms = 600000").await
}

/// The database file the gateway uses, with the application's `orders`.
async fn application_database(gateway: &Gateway) -> PathBuf {
    let path = gateway.dir.path().join("failwell.db");
    let options =
        sqlx::sqlite::SqliteConnectOptions::new().filename(&path).busy_timeout(Duration::from_secs(5));
    let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
    sqlx::query(
        "CREATE TABLE orders (reference TEXT PRIMARY KEY, amount INTEGER NOT NULL, currency TEXT NOT NULL)",
    )
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
    path
}

/// Waits until the provider has seen `references` settle (a charge or a
/// decline each); fails on a second charge of any.
async fn delivered_once(sim: &Simulator, gateway: &Gateway, references: &[String], within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let effects = sim.effects();
        let settled = references
            .iter()
            .filter(|r| effects.by_reference.get(*r).is_some_and(|e| e.effects + e.declined >= 1))
            .count();
        assert_eq!(effects.double_effects(), 0, "a charge was made twice");
        if settled == references.len() {
            for r in references {
                let e = &effects.by_reference[r];
                assert_eq!(e.effects + e.declined, 1, "{r}: {e:?}");
            }
            return;
        }
        assert!(Instant::now() < deadline, "{settled} of {} delivered\n{}", references.len(), gateway.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_node_and_php_applications_on_sqlite_enqueue_in_their_own_transactions() {
    let sim = simulator(|_| {}).await;
    let gateway = gateway(&sim).await;
    let db = application_database(&gateway).await;
    let references = enqueue_with_each(Database::Sqlite, |mut command| {
        command.arg(&db);
        command
    });
    delivered_once(&sim, &gateway, &references, Duration::from_secs(20)).await;
    settled_and_rolled_back(&gateway, &references).await;
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(&db);
    let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders").fetch_one(&pool).await.unwrap();
    assert_eq!(orders, 3, "only the committed orders");
}

/// An application process commits 200 transactions a second into the file
/// `failwell serve` delivers from (15 s here; `SQLITE_LOAD_SECONDS` sets
/// another duration, see docs/BENCHMARKS.md): none is refused with
/// `database is locked`, and every message reaches the provider once. The
/// longest wait the application saw is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_writing_the_same_file_under_load_is_never_refused() {
    let seconds: u64 = std::env::var("SQLITE_LOAD_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(15);
    let rate = 200;
    let sim = simulator(|_| {}).await;
    let gateway = gateway(&sim).await;
    let db = application_database(&gateway).await;
    let script = repository("bench").join("sqlite_app_load.py");
    let load = tokio::process::Command::new("python3")
        .arg(&script)
        .arg(&db)
        .arg(rate.to_string())
        .arg(seconds.to_string())
        .arg("load")
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&load.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&load.stderr);
    assert!(load.status.success(), "the application was refused: {text}{stderr}");
    let report: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}{stderr}"));
    println!("application at {rate} transactions/s for {seconds} s beside failwell serve: {report}");
    let committed = report["transactions"].as_u64().unwrap();
    assert_eq!(committed, rate * seconds, "{report}");
    let references: Vec<String> = (0..committed).map(|n| format!("load-{n}")).collect();
    delivered_once(&sim, &gateway, &references, Duration::from_secs(60 + seconds)).await;
}
