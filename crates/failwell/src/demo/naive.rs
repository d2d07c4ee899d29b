//! The naive client the demo compares failwell with: what an integration
//! written like a local function call does. No idempotency key, a blind retry
//! on any error or timeout (immediately, up to three tries), no record of
//! what happened beyond its own memory.
//!
//! It exists only to show the failure modes on the same faults; nothing in
//! failwell uses it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::Order;

/// How many times the naive client tries one order.
pub const NAIVE_TRIES: u32 = 3;

/// What the naive client believes happened to one order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Belief {
    /// It got a 2xx.
    Charged,
    /// It got a 402.
    Declined,
    /// It gave up after its last try failed.
    GaveUp,
}

/// One order's result.
#[derive(Clone, Debug)]
pub struct NaiveResult {
    /// The order's reference.
    pub reference: String,
    /// What the client believes.
    pub belief: Belief,
    /// HTTP calls made.
    pub attempts: u32,
    /// Time from the order's arrival to belief, including the wait for one
    /// of the `concurrency` call slots.
    pub latency: Duration,
}

/// Charges every order at `base_url` when it arrives (its offset from this
/// call, see [`super::arrival`] at `arrival_rate` orders per second),
/// with at most `concurrency` calls in flight, each with the same `timeout`
/// failwell uses.
pub async fn run(
    base_url: &str,
    orders: &[Order],
    arrival_rate: u32,
    concurrency: usize,
    timeout: Duration,
    on_done: impl Fn() + Send + Sync + 'static,
) -> Vec<NaiveResult> {
    let start = Instant::now();
    let http = reqwest::Client::builder().timeout(timeout).build().unwrap_or_default();
    let url = format!("{base_url}/v1/charges");
    let permits = Arc::new(Semaphore::new(concurrency));
    let on_done = Arc::new(on_done);
    let mut tasks = JoinSet::new();
    for (n, order) in orders.iter().enumerate() {
        let order = order.clone();
        let (http, url, permits, on_done) = (http.clone(), url.clone(), permits.clone(), on_done.clone());
        let arrives = start + super::arrival(n, arrival_rate);
        tasks.spawn(async move {
            tokio::time::sleep_until(arrives).await;
            let _permit = permits.acquire_owned().await;
            let result = charge(&http, &url, &order, arrives).await;
            on_done();
            result
        });
    }
    let mut results = Vec::with_capacity(orders.len());
    while let Some(joined) = tasks.join_next().await {
        if let Ok(result) = joined {
            results.push(result);
        }
    }
    results
}

async fn charge(http: &reqwest::Client, url: &str, order: &Order, arrived: Instant) -> NaiveResult {
    let form = [
        ("amount", order.amount.to_string()),
        ("currency", order.currency.to_string()),
        ("reference", order.reference.clone()),
    ];
    let mut belief = Belief::GaveUp;
    let mut attempts = 0;
    while attempts < NAIVE_TRIES {
        attempts += 1;
        match http.post(url).form(&form).send().await {
            Ok(r) if r.status().is_success() => {
                belief = Belief::Charged;
                break;
            }
            Ok(r) if r.status().as_u16() == 402 => {
                belief = Belief::Declined;
                break;
            }
            // 5xx, 429, timeout, reset: "just try again".
            _ => continue,
        }
    }
    NaiveResult { reference: order.reference.clone(), belief, attempts, latency: arrived.elapsed() }
}
