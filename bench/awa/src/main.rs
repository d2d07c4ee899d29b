//! awa (crates.io `awa` 0.6.9, a Rust job queue on PostgreSQL with leases,
//! dead letters and an HTTP worker) draining `N` jobs of one queue, each
//! POSTed to a sink by awa's own HTTP worker in sync mode (a job completes
//! on a 2xx answer). The relay benchmark runs it as a peer (`AWA_WORKERS`).
//!
//! ```sh
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres PEER_SINK_URL=http://127.0.0.1:8080/hook \
//!   N=50000 AWA_WORKERS=64 cargo run --release --manifest-path bench/awa/Cargo.toml
//! ```
//!
//! - `DATABASE_URL`: an admin URL; the run creates and drops the database
//!   `bench_awa` there.
//! - `PEER_SINK_URL`: where each job is POSTed.
//! - `N` jobs (default 50000); `AWA_WORKERS` handlers the queue runs at
//!   once (awa's `QueueConfig::max_workers`; awa's default is 50).
//!
//! The jobs are enqueued with `awa::insert_many`, 5,000 a statement (as the
//! peers' harness enqueues pgmq's), each its own transaction; each job's
//! arguments are the same JSON as failwell's messages. The drain is timed
//! from the client's start until awa counts `N` jobs completed (read every
//! 10 ms on a connection of its own, not counted below). It prints one JSON
//! line: the rates, the CPU time per job (µs) of this process and of the
//! PostgreSQL backends serving it, from `/proc/PID/stat`, and the WAL bytes
//! per job of the enqueue and of the drain (`pg_current_wal_lsn`).

use std::time::Duration;

use awa::{Client, HttpWorkerConfig, HttpWorkerMode, InsertOpts, InsertParams, JobState, QueueConfig};
use serde_json::json;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::time::Instant;

#[path = "../../benches/relay/proc_stat.rs"]
mod proc_stat;

use proc_stat::cpu_ms;

const DATABASE: &str = "bench_awa";
/// The `application_name` of the connection that polls the counts.
const WATCH: &str = "failwell-bench-watch";
const QUEUE: &str = "sink";
const KIND: &str = "sink_post";

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The arguments of job `seq`: the payload of failwell's message `seq`.
fn payload(seq: u64) -> serde_json::Value {
    json!({"order_id": "ORD-0000000001", "customer": "C-12345", "amount_cents": 129900,
           "currency": "EUR", "note": "y".repeat(40), "seq": seq})
}

/// The backends serving awa (every connection to [`DATABASE`] but the
/// watcher's), each with its CPU time so far (ms).
async fn backends(watch: &PgPool) -> Vec<(u32, u64)> {
    let pids: Vec<i32> = sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name <> $1",
    )
    .bind(WATCH)
    .fetch_all(watch)
    .await
    .unwrap();
    pids.into_iter().map(|pid| (pid as u32, cpu_ms(pid as u32))).collect()
}

async fn wal_position(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint").fetch_one(pool).await.unwrap()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let admin_url: String = env_or("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let sink_url: String = std::env::var("PEER_SINK_URL").expect("PEER_SINK_URL: where to POST each job");
    let n: u64 = env_or("N", 50_000);
    let workers: u32 = env_or("AWA_WORKERS", 50);

    let admin = PgPool::connect(&admin_url).await.unwrap();
    for sql in
        [format!("DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)"), format!("CREATE DATABASE {DATABASE}")]
    {
        sqlx::query(&sql).execute(&admin).await.unwrap();
    }
    let options: PgConnectOptions = admin_url.parse().unwrap();
    let options = options.database(DATABASE);
    let pool = PgPoolOptions::new().max_connections(16).connect_with(options.clone()).await.unwrap();
    let watch =
        PgPoolOptions::new().max_connections(1).connect_with(options.application_name(WATCH)).await.unwrap();
    awa::migrations::run(&pool).await.unwrap();

    let opts = InsertOpts { queue: QUEUE.into(), ..InsertOpts::default() };
    let wal_start = wal_position(&watch).await;
    let started = Instant::now();
    for from in (0..n).step_by(5_000) {
        let jobs: Vec<InsertParams> = (from..(from + 5_000).min(n))
            .map(|seq| InsertParams { kind: KIND.into(), args: payload(seq), opts: opts.clone() })
            .collect();
        awa::insert_many(&pool, &jobs).await.unwrap();
    }
    let enqueue = started.elapsed();
    let wal_enqueued = wal_position(&watch).await;

    let client = Client::builder(pool.clone())
        .queue(QUEUE, QueueConfig { max_workers: workers, ..QueueConfig::default() })
        .http_worker(
            KIND,
            HttpWorkerConfig {
                url: sink_url,
                mode: HttpWorkerMode::Sync { response_timeout: Duration::from_secs(10) },
                ..HttpWorkerConfig::default()
            },
        )
        .build()
        .unwrap();
    let own_start = cpu_ms(std::process::id());
    let backends_start = backends(&watch).await;
    let started = Instant::now();
    client.start().await.unwrap();
    let deadline = started + Duration::from_secs(300);
    loop {
        let counts = awa::admin::state_counts(&watch).await.unwrap();
        let count = |state: JobState| counts.get(&state).copied().unwrap_or(0);
        assert_eq!(count(JobState::Failed), 0, "failed jobs: {counts:?}");
        if count(JobState::Completed) as u64 >= n {
            break;
        }
        assert!(Instant::now() < deadline, "not drained in 300 s: {counts:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let drain = started.elapsed();
    let own_ms = cpu_ms(std::process::id()) - own_start;
    // A backend first seen at the end counts from 0.
    let backends_ms: u64 = backends(&watch)
        .await
        .into_iter()
        .map(|(pid, at_end)| {
            at_end.saturating_sub(backends_start.iter().find(|(p, _)| *p == pid).map_or(0, |(_, at)| *at))
        })
        .sum();
    let wal_end = wal_position(&watch).await;
    client.shutdown(Duration::from_secs(10)).await;
    pool.close().await;
    watch.close().await;
    sqlx::query(&format!("DROP DATABASE {DATABASE} WITH (FORCE)")).execute(&admin).await.unwrap();

    let per_job = |ms: u64| ms as f64 * 1000.0 / n as f64;
    let line = json!({
        "peer": "awa 0.6.9",
        "workers": workers,
        "n": n,
        "enqueue_jobs_s": (n as f64 / enqueue.as_secs_f64()).round(),
        "drain_jobs_s": (n as f64 / drain.as_secs_f64()).round(),
        "cpu_us_per_job": { "awa": per_job(own_ms).round(), "database": per_job(backends_ms).round() },
        "wal_bytes_per_job": {
            "enqueue": ((wal_enqueued - wal_start) as f64 / n as f64).round(),
            "drain": ((wal_end - wal_enqueued) as f64 / n as f64).round(),
        },
    });
    println!("{line}");
}
