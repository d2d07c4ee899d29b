//! A resilience policy around a flaky service, step by step.
//!
//! Run with `cargo run -p failwell-policy --example policy`. The "provider"
//! is an in-process tower service that fails on command, so the example
//! needs no network: it shows retries with backoff, the retry budget, the
//! circuit breaker opening and letting one probe through, and the bulkhead
//! turning calls away.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use failwell_policy::{
    Backoff, BreakerConfig, Bulkhead, BulkheadConfig, CircuitBreaker, Jitter, Policy, PolicyError, Retry,
    RetryBudget, RetryBudgetConfig,
};
use tower::{Layer, Service, ServiceExt};

/// The provider's failure.
#[derive(Debug, thiserror::Error)]
#[error("HTTP 503")]
struct Unavailable;

/// The provider: answers `amount * 2`, or fails with HTTP 503 while `down`.
#[derive(Clone, Default)]
struct Provider {
    down: Arc<AtomicBool>,
    calls: Arc<AtomicU32>,
}

impl Service<u32> for Provider {
    type Response = u32;
    type Error = Unavailable;
    type Future = std::future::Ready<Result<u32, Unavailable>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Unavailable>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, amount: u32) -> Self::Future {
        self.calls.fetch_add(1, Ordering::Relaxed);
        std::future::ready(if self.down.load(Ordering::Relaxed) { Err(Unavailable) } else { Ok(amount * 2) })
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let breaker = CircuitBreaker::new(
        "payments",
        BreakerConfig {
            consecutive_failures: Some(3),
            open_for: Duration::from_millis(300),
            ..BreakerConfig::default()
        },
    )?;
    let mut events = breaker.subscribe();
    let budget = RetryBudget::new("payments", RetryBudgetConfig::default())?;
    let backoff = Backoff::try_new(Duration::from_millis(10), Duration::from_millis(100), Jitter::Full)?;
    let bulkhead = Bulkhead::new(
        "payments",
        BulkheadConfig { max_concurrent: 2, max_wait: Duration::ZERO, max_waiting: 0 },
    )?;
    let policy = Policy::new()
        .deadline(Duration::from_secs(2))
        .bulkhead(bulkhead.clone())
        .breaker(breaker.clone())
        .retry(Retry::new("payments", 3, backoff)?.budget(budget))
        .attempt_timeout(Duration::from_millis(500));

    let provider = Provider::default();
    let mut service = policy.layer(provider.clone());

    println!("1. A healthy provider: {:?}", service.ready().await?.call(21).await);

    provider.down.store(true, Ordering::Relaxed);
    for i in 2..=5 {
        let before = provider.calls.load(Ordering::Relaxed);
        let result = service.ready().await?.call(21).await;
        let attempts = provider.calls.load(Ordering::Relaxed) - before;
        println!("{i}. Provider down: {} after {attempts} attempt(s)", describe(&result));
    }
    while let Ok(change) = events.try_recv() {
        println!("   breaker: {} -> {} ({})", change.from, change.to, change.reason);
    }

    provider.down.store(false, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(300)).await;
    println!("6. After the open period, a probe: {:?}", service.ready().await?.call(21).await);
    while let Ok(change) = events.try_recv() {
        println!("   breaker: {} -> {} ({})", change.from, change.to, change.reason);
    }

    let _a = bulkhead.try_acquire();
    let _b = bulkhead.try_acquire();
    println!("7. Two calls in flight, a third: {}", describe(&service.ready().await?.call(21).await));
    Ok(())
}

fn describe(result: &Result<u32, PolicyError<Unavailable>>) -> String {
    match result {
        Ok(v) => format!("ok {v}"),
        Err(PolicyError::Inner(e)) => format!("provider error: {e}"),
        Err(PolicyError::Rejected(r)) => format!("rejected: {r}"),
    }
}
