//! Several `failwell serve` processes on one PostgreSQL store: messages an
//! application enqueues in its own transactions are delivered exactly once
//! per intent while processes are killed with SIGKILL and restarted.

use std::time::{Duration, Instant};

use failwell_sim::{Fault, Simulator};
use failwell_store::{Message, Outbox, PostgresStore};
use serde_json::json;
use sqlx::PgPool;

use crate::examples::{Database, charged_once, enqueue_with_each, settled_and_rolled_back};
use crate::helpers::{Gateway, calls, postgres_schema, simulator};

/// `failwell serve` on the store at `database_url` (PostgreSQL here, MySQL
/// in `mysql_apps`), delivering to `sim` (at most 20 attempts over 10
/// minutes, so nothing runs out of attempts while processes die).
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
        text.lines()
            .map(|line| {
                if line.starts_with("database_url = ") {
                    format!("database_url = \"{url}\"")
                } else {
                    edit(line)
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    })
    .await
}

fn charge(reference: &str, amount: u64) -> Message {
    Message {
        idempotency_key: Some(reference.into()),
        reference: Some(reference.into()),
        ..Message::new(
            "payments",
            "charge",
            json!({"amount": amount, "currency": "eur", "reference": reference}),
        )
    }
}

/// Counts one `SELECT count(*) …`.
async fn count(pool: &PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

const MESSAGES: usize = 20_000;
const PER_TRANSACTION: usize = 20;
const PROCESSES: usize = 3;
const KILL_EVERY: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_killed_every_two_seconds_deliver_every_message_exactly_once() {
    // Every charge's first answer comes 30 ms after the provider took it,
    // so each process always has calls in flight, and answered calls not
    // yet recorded, when a kill comes.
    let sim = simulator(|c| c.hang = Duration::from_millis(30)).await;
    for n in 0..MESSAGES {
        sim.script(&format!("order-{n:05}"), vec![Fault::TimeoutAfterCommit]);
    }
    let url = postgres_schema().await;
    let mut gateways = Vec::new();
    for _ in 0..PROCESSES {
        gateways.push(gateway_on(&url, &sim).await);
    }
    let app = PostgresStore::open(&url, 4).await.unwrap();

    // The application: an order row and its charge in one transaction,
    // PER_TRANSACTION at a time, paced over about 20 s: small transactions
    // often, so the relays always have calls in flight when a kill comes.
    let enqueue = {
        let app = app.clone();
        tokio::spawn(async move {
            sqlx::query("CREATE TABLE orders (reference text PRIMARY KEY, amount bigint NOT NULL)")
                .execute(app.pool())
                .await
                .unwrap();
            for batch in 0..MESSAGES / PER_TRANSACTION {
                let mut tx = app.begin().await.unwrap();
                for i in 0..PER_TRANSACTION {
                    let n = batch * PER_TRANSACTION + i;
                    let reference = format!("order-{n:05}");
                    let amount = 100 + n as u64;
                    sqlx::query("INSERT INTO orders VALUES ($1, $2)")
                        .bind(&reference)
                        .bind(amount as i64)
                        .execute(&mut *tx)
                        .await
                        .unwrap();
                    Outbox::enqueue(&mut tx, &charge(&reference, amount), failwell_engine::now_ms())
                        .await
                        .unwrap();
                }
                tx.commit().await.unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    // A random process dies every 2 s (SIGKILL) and is started again, for
    // as long as the application enqueues.
    let mut kills: Vec<i64> = Vec::new();
    let mut seed: u64 = 0x5eed_f00d;
    while !enqueue.is_finished() {
        tokio::time::sleep(KILL_EVERY).await;
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let victim = (seed >> 33) as usize % PROCESSES;
        kills.push(failwell_engine::now_ms());
        let restart = async {
            gateways[victim].kill().await;
            gateways[victim].spawn().await;
        };
        tokio::time::timeout(Duration::from_secs(60), restart)
            .await
            .expect("a kill and restart took over 60 s");
    }
    enqueue.await.unwrap();

    // Every message ends delivered (or declined, or dead-lettered): none
    // stays open.
    let pool = app.pool();
    let started = Instant::now();
    loop {
        let open =
            count(pool, "SELECT count(*) FROM operations WHERE status IN ('pending', 'unknown')").await;
        if open == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{open} operations still open\n{}",
            gateways.iter().map(Gateway::log).collect::<Vec<_>>().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(count(pool, "SELECT count(*) FROM operations").await, MESSAGES as i64, "none lost");
    assert_eq!(count(pool, "SELECT count(*) FROM operations WHERE status = 'needs_human'").await, 0);

    // Exactly one effect per intent at the provider: a succeeded charge
    // once, a declined one never, and every call under one key.
    let effects = sim.effects();
    assert_eq!(effects.double_effects(), 0);
    let statuses: Vec<(String, String)> =
        sqlx::query_as("SELECT reference, status FROM operations").fetch_all(pool).await.unwrap();
    for (reference, status) in &statuses {
        let at_provider = &effects.by_reference[reference];
        match status.as_str() {
            "succeeded" => assert_eq!(at_provider.effects, 1, "{reference}: {at_provider:?}"),
            "failed" => assert_eq!(at_provider.effects, 0, "{reference}: {at_provider:?}"),
            other => panic!("{reference} is {other}"),
        }
    }
    let keys_per_operation = count(
        pool,
        "SELECT count(*) FROM (SELECT operation_id FROM attempts WHERE kind = 'call' \
         GROUP BY operation_id HAVING count(DISTINCT provider_key) > 1) k",
    )
    .await;
    assert_eq!(keys_per_operation, 0, "a redelivery carried another idempotency key");

    // Kills landed between the provider's answer and the mark-done: the
    // provider had taken the charge, failwell had not recorded it, and
    // the redelivery under the same key was answered without a second
    // effect.
    let interrupted: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT o.reference, a.started_at_ms, a.started_at_ms + a.duration_ms FROM attempts a \
         JOIN operations o ON o.id = a.operation_id WHERE a.error_kind = 'interrupted'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let after_answer =
        interrupted.iter().filter(|(reference, _, _)| effects.by_reference[reference].requests >= 2).count();
    assert!(
        after_answer > 0,
        "no kill fell between a 2xx and its mark-done ({} interrupted)",
        interrupted.len()
    );
    // Redelivery: from the kill to the claim that took the message over. A
    // message is in hand for milliseconds, so the kill that interrupted it
    // is the first one after its claim.
    let mut redelivery: Vec<i64> = interrupted
        .iter()
        .filter_map(|(_, claimed, rescued)| {
            let kill = kills.iter().filter(|&&k| k >= *claimed && k <= *rescued).min()?;
            Some(rescued - kill)
        })
        .collect();
    redelivery.sort_unstable();
    assert!(!redelivery.is_empty(), "no interrupted attempt was taken over");
    let p50 = redelivery[redelivery.len() / 2];
    let max = *redelivery.last().unwrap();
    eprintln!(
        "{MESSAGES} messages, {PROCESSES} processes, {} kills: {} attempts interrupted, {after_answer} of them \
         after the provider's answer; redelivery after a kill p50 {p50} ms, max {max} ms; {} provider requests",
        kills.len(),
        interrupted.len(),
        effects.requests
    );
    // The lease (3 s in these tests, renewed every second) bounds the
    // takeover, plus a poll.
    assert!(max <= 3_000 + 1_000, "a message waited {max} ms after a kill");
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
