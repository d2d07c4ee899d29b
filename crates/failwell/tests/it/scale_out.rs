//! Several `failwell serve` processes on one PostgreSQL store: applications
//! in other languages enqueue in their own transactions, a commit wakes
//! every process, a slow call keeps its lease, a long transaction neither
//! stops the relay nor grows the outbox; and, on PostgreSQL and on MySQL,
//! messages enqueued while processes are killed with SIGKILL are delivered
//! exactly once per intent (`kills`).

mod kills;

use std::time::{Duration, Instant};

use failwell_sim::{Fault, Simulator};
use serde_json::json;
use sqlx::PgPool;

use crate::examples::{Database, charged_once, enqueue_with_each, settled_and_rolled_back};
use crate::helpers::{Gateway, calls, on_database, postgres_schema, simulator};

/// `failwell serve` on the PostgreSQL or MySQL store at `database_url`,
/// delivering to `sim` (at most 20 attempts over 10 minutes, so nothing
/// runs out of attempts while processes die).
pub async fn gateway_on(database_url: &str, sim: &Simulator) -> Gateway {
    gateway_edited(database_url, sim, |line| line.into()).await
}

/// [`gateway_on`], with each other line of the config passed through `edit`.
async fn gateway_edited(
    database_url: &str,
    sim: &Simulator,
    edit: impl Fn(&str) -> String + Send + 'static,
) -> Gateway {
    let url = database_url.to_owned();
    Gateway::start_edited(&sim.base_url(), "max_attempts = 20\ndeadline_ms = 600000", "", move |text| {
        on_database(&text.lines().map(edit).collect::<Vec<_>>().join("\n"), &url)
    })
    .await
}

/// Counts one `SELECT count(*) …`.
async fn count(pool: &PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

/// libpq's environment variables for `url` (`postgres://USER@HOST:PORT/DB?options=…`).
fn libpq_env(url: &str) -> Vec<(&'static str, String)> {
    let url = reqwest::Url::parse(url).unwrap();
    let mut env = vec![
        ("PGHOST", url.host_str().unwrap().to_owned()),
        ("PGPORT", url.port().unwrap_or(5432).to_string()),
        ("PGUSER", url.username().to_owned()),
        ("PGDATABASE", url.path().trim_start_matches('/').to_owned()),
    ];
    if let Some((_, options)) = url.query_pairs().find(|(k, _)| k == "options") {
        env.push(("PGOPTIONS", options.into_owned()));
    }
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_node_and_php_applications_enqueue_in_their_own_transactions_and_are_delivered() {
    let sim = simulator(|_| {}).await;
    let url = postgres_schema().await;
    let gateway = gateway_on(&url, &sim).await;
    let pool = PgPool::connect(&url).await.unwrap();
    sqlx::query(
        "CREATE TABLE orders (reference text PRIMARY KEY, amount bigint NOT NULL, currency text NOT NULL)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let env = libpq_env(&url);
    let references = enqueue_with_each(Database::Postgres, |mut command| {
        command.envs(env.clone());
        command
    });
    settled_and_rolled_back(&gateway, &references).await;
    charged_once(&sim, &references);
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders").fetch_one(&pool).await.unwrap();
    assert_eq!(orders, 3, "only the committed orders");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_wakes_every_process_at_once_without_waiting_for_a_poll() {
    let sim = simulator(|_| {}).await;
    let url = postgres_schema().await;
    // Relays that poll once a minute: only a notice can wake them sooner.
    let slow_poll = |line: &str| {
        if line == "poll_interval_ms = 20" { "poll_interval_ms = 60000".into() } else { line.into() }
    };
    let gateways = [gateway_edited(&url, &sim, slow_poll).await, gateway_edited(&url, &sim, slow_poll).await];
    let pool = PgPool::connect(&url).await.unwrap();
    // Wait until both listen.
    let started = Instant::now();
    loop {
        let listeners: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%failwell_outbox%' \
             AND datname = current_database()",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if listeners >= 2 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the processes do not listen: {listeners}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // An application's plain-SQL transaction: ten charges.
    let mut tx = pool.begin().await.unwrap();
    for i in 0..10 {
        sqlx::query(
            "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, reference) \
             VALUES ('payments', 'charge', $1::jsonb, $2, $2)",
        )
        .bind(json!({"amount": 1010 + i, "currency": "eur", "reference": format!("woken-{i}")}).to_string())
        .bind(format!("woken-{i}"))
        .execute(&mut *tx)
        .await
        .unwrap();
    }
    let committed = Instant::now();
    tx.commit().await.unwrap();
    for i in 0..10 {
        let op = gateways[i % 2].settled(&format!("woken-{i}"), Duration::from_secs(10)).await;
        assert_eq!(op["status"], "succeeded", "{op:#}");
    }
    let took = committed.elapsed();
    assert!(took < Duration::from_secs(5), "delivered {took:?} after the commit: not woken by the notice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_slower_than_its_lease_keeps_its_message_and_no_other_process_starts_it() {
    // The provider takes 2.5 s to answer; the lease is 1 s.
    let sim = simulator(|c| c.hang = Duration::from_millis(2_500)).await;
    let url = postgres_schema().await;
    let short_lease = |line: &str| match line {
        "lease_ms = 3000" => "lease_ms = 1000".into(),
        "timeout_ms = 500" => "timeout_ms = 5000".into(),
        other => other.into(),
    };
    let gateways =
        [gateway_edited(&url, &sim, short_lease).await, gateway_edited(&url, &sim, short_lease).await];
    sim.script("slow-1", vec![Fault::LateCommit]);
    let status = gateways[0].charge("slow-1", 1010).await.status().as_u16();
    assert!(matches!(status, 201 | 202), "{status}");
    let op = gateways[1].settled("slow-1", Duration::from_secs(20)).await;
    assert_eq!(op["status"], "succeeded", "{op:#}");
    assert_eq!(calls(&op).len(), 1, "{op:#}");
    assert_eq!(sim.effects().by_reference["slow-1"].requests, 1, "another process started the message too");
}

/// The outbox's live rows and the dead ones a vacuum has not removed yet.
async fn outbox_rows(pool: &PgPool) -> (i64, i64) {
    let live = count(pool, "SELECT count(*) FROM outbox").await;
    let dead: i64 = sqlx::query_scalar(
        "SELECT COALESCE(n_dead_tup, 0) FROM pg_stat_user_tables WHERE relname = 'outbox' \
         AND schemaname = current_schema()",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    (live, dead)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_open_for_a_minute_neither_stops_the_relay_nor_leaves_the_outbox_growing() {
    let sim = simulator(|_| {}).await;
    let url = postgres_schema().await;
    // Delivered messages are deleted a second after delivery.
    let quick_retention = |line: &str| {
        if line == "[reconciler]" {
            "[retention]\ndelivered_ms = 1000\ninterval_ms = 500\n\n[reconciler]".into()
        } else {
            line.into()
        }
    };
    let gateway = gateway_edited(&url, &sim, quick_retention).await;
    let pool = PgPool::connect(&url).await.unwrap();
    // Another client's transaction holds back the xmin horizon: no row
    // deleted or updated from now on can be vacuumed away while it is open.
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ").execute(&mut *holder).await.unwrap();
    let _: i64 = sqlx::query_scalar("SELECT count(*) FROM operations").fetch_one(&mut *holder).await.unwrap();
    let held = Instant::now();
    let mut enqueued = 0;
    let mut delivered_by_window = Vec::new();
    while held.elapsed() < Duration::from_secs(60) {
        let window = Instant::now();
        let before = count(&pool, "SELECT count(*) FROM operations WHERE status = 'succeeded'").await;
        while window.elapsed() < Duration::from_secs(10) {
            let mut tx = pool.begin().await.unwrap();
            for _ in 0..20 {
                let reference = format!("held-{enqueued:05}");
                sqlx::query(
                    "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, reference) \
                     VALUES ('payments', 'charge', $1::jsonb, $2, $2)",
                )
                .bind(
                    json!({"amount": 1010 + enqueued % 50, "currency": "eur", "reference": reference})
                        .to_string(),
                )
                .bind(&reference)
                .execute(&mut *tx)
                .await
                .unwrap();
                enqueued += 1;
            }
            tx.commit().await.unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let after = count(&pool, "SELECT count(*) FROM operations WHERE status = 'succeeded'").await;
        delivered_by_window.push(after - before);
    }
    let during = outbox_rows(&pool).await;
    holder.commit().await.unwrap();
    // The relay never stopped: every 10 s window delivered about what was
    // enqueued in it (200 messages).
    assert!(delivered_by_window.iter().all(|d| *d >= 150), "delivered per 10 s: {delivered_by_window:?}");

    // Once the transaction ends: everything delivered, the delivered
    // messages deleted, and a vacuum can reclaim the space.
    let started = Instant::now();
    loop {
        let (live, _) = outbox_rows(&pool).await;
        let open = count(&pool, "SELECT count(*) FROM operations WHERE status <> 'succeeded'").await;
        if live == 0 && open == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{live} messages left, {open} open\n{}",
            gateway.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    sqlx::query("VACUUM outbox").execute(&pool).await.unwrap();
    let after = outbox_rows(&pool).await;
    eprintln!(
        "{enqueued} messages while a transaction held xmin for 60 s; delivered per 10 s {delivered_by_window:?}; \
         outbox (live, dead) rows at its end {during:?}, after retention and a vacuum {after:?}"
    );
    assert_eq!(after.0, 0);
    assert!(after.1 < 100, "the vacuum left {} dead rows", after.1);
    assert_eq!(count(&pool, "SELECT count(*) FROM operations").await, enqueued as i64, "none lost");
}
