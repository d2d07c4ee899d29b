//! Webhook ingest on loopback: signed deliveries to `failwell serve`'s
//! `POST /webhooks/{integration}` (verified, then committed to SQLite before
//! the answer), beside a bare axum handler that answers 200 without
//! verifying or storing anything (the upper bound), in the same run; then
//! the same with the event applied to the ledger and forwarded (the
//! forwarder delivering each event to the bare handler meanwhile).
//!
//! `cargo bench --manifest-path bench/Cargo.toml --bench webhook_ingest`
//! prints requests/s and p50/p99 latency of the answer for each. Settings:
//! `INGEST_CONCURRENCY` (default 64), `INGEST_SECONDS` (default 10) and
//! `INGEST_SYNCHRONOUS` (`full` or `normal`, default `full`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::net::TcpListener;
use tokio::sync::Mutex;

const SECRET: &str = "ingest-benchmark-secret";
/// Where the events say which charge they are about (none of them is one
/// of failwell's operations: each is recorded as such).
const LEDGER: &str = "{ provider = \"app\", reference_pointer = \"/charge/id\", status_pointer = \"/action\", \
                      version_pointer = \"/charge/amount\", succeeded = [\"completed\"] }";
/// The Standard Webhooks secret events are forwarded with.
const FORWARD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn sign(body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Drives `url` with `concurrency` clients for `seconds`, each delivery a
/// new event; returns (requests per second, histogram of latencies in µs).
async fn drive(url: String, concurrency: usize, seconds: u64) -> (f64, Histogram<u64>) {
    let client = reqwest::Client::builder().pool_max_idle_per_host(concurrency).build().unwrap();
    let histogram = Arc::new(Mutex::new(Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap()));
    let warm_up = Instant::now() + Duration::from_secs(1);
    let end = warm_up + Duration::from_secs(seconds);
    let counted = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let workers: Vec<_> = (0..concurrency)
        .map(|worker| {
            let (client, url, histogram, counted) = (client.clone(), url.clone(), histogram.clone(), counted.clone());
            tokio::spawn(async move {
                let mut local = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
                let mut n = 0u64;
                loop {
                    let now = Instant::now();
                    if now >= end {
                        break;
                    }
                    n += 1;
                    let body = format!(
                        "{{\"action\":\"completed\",\"charge\":{{\"id\":\"ch_{worker}_{n}\",\"amount\":2500,\"currency\":\"eur\"}}}}"
                    );
                    let started = Instant::now();
                    let response = client
                        .post(&url)
                        .header("X-GitHub-Delivery", format!("d-{worker}-{n}"))
                        .header("X-Hub-Signature-256", sign(body.as_bytes()))
                        .body(body)
                        .send()
                        .await
                        .expect("the server answers");
                    assert!(response.status().is_success(), "{}", response.status());
                    let _ = response.bytes().await;
                    if started >= warm_up {
                        local.record(started.elapsed().as_micros() as u64).unwrap();
                        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                histogram.lock().await.add(local).unwrap();
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    let total = counted.load(std::sync::atomic::Ordering::Relaxed);
    let histogram = Arc::try_unwrap(histogram).unwrap().into_inner();
    (total as f64 / seconds as f64, histogram)
}

fn report(label: &str, (rate, h): (f64, Histogram<u64>)) {
    println!(
        "{label:<62} {rate:>9.0} req/s   p50 {:>6.2} ms   p99 {:>6.2} ms",
        h.value_at_quantile(0.5) as f64 / 1000.0,
        h.value_at_quantile(0.99) as f64 / 1000.0
    );
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; this harness takes no arguments.
    let concurrency = env_or("INGEST_CONCURRENCY", 64usize);
    let seconds = env_or("INGEST_SECONDS", 10u64);
    let synchronous: String = env_or("INGEST_SYNCHRONOUS", "full".to_string());

    let bare = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bare_addr = bare.local_addr().unwrap();
    let bare_url = format!("http://{bare_addr}/webhooks/gh");
    let app = axum::Router::new().route("/webhooks/gh", axum::routing::post(|| async { "ok" }));
    tokio::spawn(async move { axum::serve(bare, app).await });

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("failwell.toml");
    std::fs::write(
        &config,
        format!(
            "database_url = \"sqlite://{}\"\nsqlite_synchronous = \"{synchronous}\"\nlisten = \"127.0.0.1:0\"\n\n\
             [webhooks.gh]\nscheme = \"github\"\nsecrets = [\"{SECRET}\"]\n\n\
             [providers.app]\nbase_url = \"http://{bare}\"\n\n\
             [webhooks.ledger]\nscheme = \"github\"\nsecrets = [\"{SECRET}\"]\nledger = {LEDGER}\n\n\
             [webhooks.processed]\nscheme = \"github\"\nsecrets = [\"{SECRET}\"]\nledger = {LEDGER}\n\
             forward = {{ provider = \"app\", path = \"/webhooks/gh\", secret = \"{FORWARD_SECRET}\" }}\n",
            dir.path().join("ingest.db").display(),
            bare = bare_addr,
        ),
    )
    .unwrap();
    let config = failwell::config::load(Some(&config)).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = failwell::Server::start(config, listener).await.unwrap();
    let failwell_url = format!("http://{}/webhooks/gh", server.addr());
    let ledger_url = format!("http://{}/webhooks/ledger", server.addr());
    let processed_url = format!("http://{}/webhooks/processed", server.addr());

    println!(
        "webhook ingest, {concurrency} concurrent clients, {seconds} s each (after 1 s warm-up), loopback"
    );
    report("bare axum handler (no verification, no store)", drive(bare_url, concurrency, seconds).await);
    report(
        &format!("failwell: verify + SQLite commit ({synchronous})"),
        drive(failwell_url, concurrency, seconds).await,
    );
    report(
        &format!("failwell: + ledger step ({synchronous})"),
        drive(ledger_url, concurrency, seconds).await,
    );
    report(
        &format!("failwell: + ledger step + forward queued and delivered ({synchronous})"),
        drive(processed_url, concurrency, seconds).await,
    );
    server.shutdown().await;
}
