//! The layers and their composition, on tokio's paused clock: every wait
//! below is exact, not a sleep in real time.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tower::{Service, ServiceExt};

use super::*;
use crate::{
    Backoff, BreakerConfig, BreakerState, BulkheadConfig, Deadline, Jitter, RetryBudget, RetryBudgetConfig,
};

#[cfg(feature = "reqwest")]
mod middleware;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// What the test service answers on each call, in order; the last entry
/// repeats. `"ok"` succeeds, `"hang"` never answers, anything else is an
/// error with that text.
#[derive(Clone)]
struct Scripted {
    script: Arc<Vec<&'static str>>,
    calls: Arc<Mutex<Vec<Instant>>>,
}

impl Scripted {
    fn new(script: &[&'static str]) -> Self {
        Self { script: Arc::new(script.to_vec()), calls: Arc::default() }
    }

    fn calls(&self) -> Vec<Duration> {
        let calls = self.calls.lock().unwrap();
        calls.iter().map(|t| *t - calls[0]).collect()
    }

    fn count(&self) -> usize {
        self.calls.lock().unwrap().len()
    }
}

impl Service<u32> for Scripted {
    type Response = u32;
    type Error = String;
    type Future = Pin<Box<dyn Future<Output = Result<u32, String>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), String>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: u32) -> Self::Future {
        let n = {
            let mut calls = self.calls.lock().unwrap();
            calls.push(Instant::now());
            calls.len() - 1
        };
        let answer = self.script[n.min(self.script.len() - 1)];
        Box::pin(async move {
            match answer {
                "ok" => Ok(req),
                "hang" => std::future::pending().await,
                other => Err(other.to_owned()),
            }
        })
    }
}

/// `"503"` is retryable, `"retry-after:N"` retryable after N s, `"422"`
/// permanent, `"502"` ambiguous; a timed-out attempt is retryable.
#[derive(Clone, Copy)]
struct TestClassifier;

impl Classify<u32, u32, PolicyError<String>> for TestClassifier {
    fn classify(&self, _: &u32, result: &Result<u32, PolicyError<String>>) -> Option<Classification> {
        let e = result.as_ref().err()?;
        Some(match e {
            PolicyError::Inner(text) if text == "422" => Classification::Permanent,
            PolicyError::Inner(text) if text == "502" => Classification::Ambiguous,
            PolicyError::Inner(text) => Classification::Retryable {
                retry_after: text
                    .strip_prefix("retry-after:")
                    .map(|s| Duration::from_secs(s.parse().unwrap())),
            },
            PolicyError::Rejected(_) => Classification::Retryable { retry_after: None },
        })
    }

    fn breaker_outcome(&self, result: &Result<u32, PolicyError<String>>) -> CallOutcome {
        match self.classify(&0, result) {
            None | Some(Classification::Permanent) => CallOutcome::Success,
            Some(_) => CallOutcome::Failure,
        }
    }
}

fn fixed(delay_ms: u64) -> Backoff {
    Backoff::try_new(ms(delay_ms), ms(delay_ms), Jitter::None).unwrap()
}

fn retry(max_attempts: u32, backoff: Backoff) -> Retry {
    Retry::new("test", max_attempts, backoff).unwrap()
}

fn policy() -> Policy<InProcess, TestClassifier> {
    Policy::new().classify(TestClassifier)
}

async fn call<S>(service: &mut S) -> Result<u32, PolicyError<String>>
where
    S: Service<u32, Response = u32, Error = PolicyError<String>>,
{
    service.ready().await?.call(7).await
}

#[tokio::test(start_paused = true)]
async fn retryable_errors_are_retried_with_backoff_up_to_max_attempts() {
    let inner = Scripted::new(&["503"]);
    let mut svc = policy().retry(retry(3, fixed(100))).layer(inner.clone());
    let err = call(&mut svc).await.unwrap_err();
    assert!(matches!(err, PolicyError::Inner(ref e) if e == "503"), "the last attempt's error: {err}");
    assert_eq!(inner.calls(), vec![ms(0), ms(100), ms(200)]);
}

#[tokio::test(start_paused = true)]
async fn permanent_and_ambiguous_results_are_not_retried() {
    for answer in ["422", "502"] {
        let inner = Scripted::new(&[answer, "ok"]);
        let mut svc = policy().retry(retry(5, fixed(10))).layer(inner.clone());
        assert!(call(&mut svc).await.is_err());
        assert_eq!(inner.count(), 1, "{answer} must not be retried");
    }
}

#[tokio::test(start_paused = true)]
async fn retry_after_overrides_a_shorter_backoff_and_is_never_early() {
    let inner = Scripted::new(&["retry-after:3", "ok"]);
    let backoff = Backoff::try_new(ms(10), ms(100), Jitter::Full).unwrap();
    let mut svc = policy().retry(retry(3, backoff)).layer(inner.clone());
    assert_eq!(call(&mut svc).await.unwrap(), 7);
    assert_eq!(inner.calls(), vec![ms(0), ms(3_000)]);
}

#[tokio::test(start_paused = true)]
async fn a_backoff_longer_than_retry_after_wins() {
    let inner = Scripted::new(&["retry-after:1", "ok"]);
    let mut svc = policy().retry(retry(3, fixed(2_500))).layer(inner.clone());
    call(&mut svc).await.unwrap();
    assert_eq!(inner.calls(), vec![ms(0), ms(2_500)]);
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_above_the_cap_ends_the_retries() {
    let inner = Scripted::new(&["retry-after:120", "ok"]);
    let mut svc =
        policy().retry(retry(3, fixed(10)).max_retry_after(Duration::from_secs(60))).layer(inner.clone());
    let err = call(&mut svc).await.unwrap_err();
    assert!(matches!(err, PolicyError::Inner(ref e) if e == "retry-after:120"));
    assert_eq!(inner.count(), 1, "never retried earlier than the provider asked");
}

#[tokio::test(start_paused = true)]
async fn the_deadline_stops_retries_and_says_what_did_not_fit() {
    let inner = Scripted::new(&["503"]);
    let start = Instant::now();
    let mut svc = policy().deadline(ms(1_000)).retry(retry(10, fixed(400))).layer(inner.clone());
    let err = call(&mut svc).await.unwrap_err();
    assert_eq!(inner.calls(), vec![ms(0), ms(400), ms(800)]);
    assert_eq!(start.elapsed(), ms(800), "no wait that cannot end before the deadline");
    assert_eq!(
        err.to_string(),
        "deadline exceeded: the backoff before a retry needs 400 ms but 200 ms are left"
    );
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_beyond_the_deadline_is_not_waited_for() {
    let inner = Scripted::new(&["retry-after:5", "ok"]);
    let start = Instant::now();
    let mut svc = policy().deadline(ms(2_000)).retry(retry(3, fixed(10))).layer(inner.clone());
    let err = call(&mut svc).await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(
        err.to_string(),
        "deadline exceeded: the provider's Retry-After needs 5000 ms but 2000 ms are left"
    );
    assert_eq!(inner.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn each_attempt_is_bounded_by_its_timeout_and_by_the_time_left() {
    let inner = Scripted::new(&["hang", "ok"]);
    let mut svc = policy().retry(retry(3, fixed(50))).attempt_timeout(ms(300)).layer(inner.clone());
    assert_eq!(call(&mut svc).await.unwrap(), 7, "the timed-out attempt was retried");
    assert_eq!(inner.calls(), vec![ms(0), ms(350)]);

    let inner = Scripted::new(&["hang"]);
    let start = Instant::now();
    let mut svc = policy().deadline(ms(1_000)).attempt_timeout(ms(10_000)).layer(inner.clone());
    let err = call(&mut svc).await.unwrap_err();
    assert_eq!(start.elapsed(), ms(1_000), "min(attempt timeout, time left)");
    assert!(
        matches!(err, PolicyError::Rejected(Rejected::DeadlineExceeded(ref e)) if e.what == "the attempt in flight")
    );
}

#[tokio::test(start_paused = true)]
async fn an_expired_callers_deadline_refuses_the_call_before_it_starts() {
    let inner = Scripted::new(&["ok"]);
    let mut svc = policy().deadline(ms(1_000)).layer(inner.clone());
    let outer = Deadline::after(ms(10));
    tokio::time::advance(ms(20)).await;
    let err = outer.scope(call(&mut svc)).await.unwrap_err();
    assert!(matches!(err, PolicyError::Rejected(Rejected::DeadlineExceeded(_))), "{err}");
    assert_eq!(inner.count(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_failure_storm_spends_at_most_the_budget() {
    const CALLS: u32 = 1_000;
    let budget = RetryBudget::new(
        "test",
        RetryBudgetConfig { ratio: 0.2, min_per_second: 1, ttl: Duration::from_secs(10) },
    )
    .unwrap();
    let inner = Scripted::new(&["503"]);
    let svc = policy().retry(retry(5, fixed(100)).budget(budget)).layer(inner.clone());
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CALLS {
        let mut svc = svc.clone();
        tasks.spawn(async move { call(&mut svc).await });
    }
    while let Some(result) = tasks.join_next().await {
        assert!(matches!(result.unwrap(), Err(PolicyError::Inner(_))), "the original error comes back");
    }
    let attempts = inner.count() as u32;
    let extra = attempts - CALLS;
    // Without a budget this storm would make 5000 attempts.
    assert!(extra <= 200 + 10, "{extra} retries for {CALLS} calls exceed 20 % + 1/s × 10 s");
    assert!(extra >= 200, "the budget allows 20 % retries: only {extra}");
}

#[tokio::test(start_paused = true)]
async fn a_full_bulkhead_rejects_without_calling_the_service() {
    let bulkhead =
        Bulkhead::new("test", BulkheadConfig { max_concurrent: 2, max_wait: Duration::ZERO, max_waiting: 0 })
            .unwrap();
    let inner = Scripted::new(&["hang"]);
    let svc = policy().bulkhead(bulkhead.clone()).layer(inner.clone());
    let held: Vec<_> = (0..2)
        .map(|_| {
            let mut svc = svc.clone();
            tokio::spawn(async move { call(&mut svc).await })
        })
        .collect();
    tokio::task::yield_now().await;
    assert_eq!(bulkhead.in_flight(), 2);
    let err = call(&mut svc.clone()).await.unwrap_err();
    assert!(matches!(err, PolicyError::Rejected(Rejected::BulkheadFull(_))), "{err}");
    assert_eq!(inner.count(), 2);
    held.iter().for_each(|h| h.abort());
    for h in held {
        let _ = h.await;
    }
    assert_eq!(bulkhead.in_flight(), 0, "cancelled calls return their permits");
}

#[tokio::test(start_paused = true)]
async fn a_waiting_call_proceeds_when_a_permit_comes_back() {
    let bulkhead =
        Bulkhead::new("test", BulkheadConfig { max_concurrent: 1, max_wait: ms(500), max_waiting: 1 })
            .unwrap();
    let inner = Scripted::new(&["hang", "ok"]);
    let svc = policy().bulkhead(bulkhead).attempt_timeout(ms(200)).layer(inner.clone());
    let first = tokio::spawn({
        let mut svc = svc.clone();
        async move { call(&mut svc).await }
    });
    tokio::task::yield_now().await;
    assert_eq!(call(&mut svc.clone()).await.unwrap(), 7, "waited 200 ms for the first call's permit");
    assert!(first.await.unwrap().is_err());
    assert_eq!(inner.calls(), vec![ms(0), ms(200)]);
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_rejects_without_calling_and_a_hung_probe_times_out() {
    let config = BreakerConfig {
        consecutive_failures: Some(2),
        failure_rate: None,
        open_for: ms(1_000),
        probe_timeout: ms(300),
        ..BreakerConfig::default()
    };
    let breaker = CircuitBreaker::new("test", config).unwrap();
    let inner = Scripted::new(&["503", "503", "hang", "ok"]);
    let mut svc = policy().breaker(breaker.clone()).layer(inner.clone());
    call(&mut svc).await.unwrap_err();
    call(&mut svc).await.unwrap_err();
    let err = call(&mut svc).await.unwrap_err();
    assert!(
        matches!(err, PolicyError::Rejected(Rejected::BreakerOpen(ref e)) if e.retry_in == Some(ms(1_000)))
    );
    assert_eq!(inner.count(), 2);
    tokio::time::advance(ms(1_000)).await;
    let err = call(&mut svc).await.unwrap_err();
    assert!(matches!(err, PolicyError::Rejected(Rejected::TimedOut(t)) if t == ms(300)), "{err}");
    assert_eq!(breaker.state(), BreakerState::Open, "the hung probe reopened the breaker");
    tokio::time::advance(ms(2_000)).await;
    assert_eq!(call(&mut svc).await.unwrap(), 7);
    assert_eq!(breaker.state(), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn the_breaker_sees_one_outcome_per_call_after_the_retries() {
    let config =
        BreakerConfig { consecutive_failures: Some(2), failure_rate: None, ..BreakerConfig::default() };
    let breaker = CircuitBreaker::new("test", config).unwrap();
    let inner = Scripted::new(&["503", "503", "ok", "503"]);
    let mut svc = policy().breaker(breaker.clone()).retry(retry(3, fixed(10))).layer(inner.clone());
    assert_eq!(call(&mut svc).await.unwrap(), 7, "two failed attempts, then success: one successful call");
    assert_eq!(breaker.state(), BreakerState::Closed);
    call(&mut svc).await.unwrap_err();
    assert_eq!(breaker.state(), BreakerState::Closed, "one failed call of three attempts");
    call(&mut svc).await.unwrap_err();
    assert_eq!(breaker.state(), BreakerState::Open);
    assert_eq!(inner.count(), 9);
}

#[tokio::test(start_paused = true)]
async fn permanent_errors_never_open_the_breaker() {
    let config =
        BreakerConfig { consecutive_failures: Some(2), failure_rate: None, ..BreakerConfig::default() };
    let breaker = CircuitBreaker::new("test", config).unwrap();
    let inner = Scripted::new(&["422"]);
    let mut svc = policy().breaker(breaker.clone()).layer(inner.clone());
    for _ in 0..10 {
        call(&mut svc).await.unwrap_err();
    }
    assert_eq!(breaker.state(), BreakerState::Closed);
    assert_eq!(inner.count(), 10);
}

#[tokio::test(start_paused = true)]
async fn an_empty_policy_passes_calls_through() {
    let inner = Scripted::new(&["503", "ok"]);
    let mut svc = Policy::new().layer(inner.clone());
    let err = call(&mut svc).await.unwrap_err();
    assert!(matches!(err, PolicyError::Inner(ref e) if e == "503"));
    assert_eq!(call(&mut svc).await.unwrap(), 7);
    assert_eq!(inner.count(), 2);
}

#[test]
fn rejections_say_what_happened() {
    let full =
        BulkheadFull { bulkhead: Arc::from("payments"), max_concurrent: 4, waited: true, may_wait: true };
    assert_eq!(
        PolicyError::<String>::from(Rejected::from(full)).to_string(),
        "bulkhead \"payments\" is full: 4 calls in flight and no permit came free in time"
    );
    let open = BreakerOpen {
        breaker: Arc::from("payments"),
        state: BreakerState::Open,
        retry_in: Some(ms(1_500)),
        paused: false,
    };
    assert_eq!(
        Rejected::from(open).to_string(),
        "circuit breaker \"payments\" is open, next probe in 1500 ms"
    );
    assert_eq!(Rejected::TimedOut(ms(250)).to_string(), "the attempt timed out after 250 ms");
}

#[test]
fn local_handles_are_separate_per_clone() {
    let shared = Arc::new(AtomicU32::new(1));
    let local = Local::new(shared.clone());
    let other = local.clone();
    assert!(!Arc::ptr_eq(&local.share(), &other.share()), "each clone has its own handle");
    other.fetch_add(1, Ordering::Relaxed);
    assert_eq!(local.load(Ordering::Relaxed), 2, "and both reach the same state");
}

#[test]
fn every_decision_is_counted_in_metrics() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let rt =
            tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        rt.block_on(async {
            // Ten retries from the reserve (1/s over 10 s), then the budget is spent.
            let budget = RetryBudget::new(
                "m",
                RetryBudgetConfig { ratio: 0.0, min_per_second: 1, ttl: Duration::from_secs(10) },
            )
            .unwrap();
            let mut svc = policy().retry(retry(3, fixed(10)).budget(budget)).layer(Scripted::new(&["503"]));
            for _ in 0..6 {
                call(&mut svc).await.unwrap_err();
            }
            // Two failures open the breaker; the next call is rejected.
            let config = BreakerConfig {
                consecutive_failures: Some(2),
                failure_rate: None,
                ..BreakerConfig::default()
            };
            let breaker = CircuitBreaker::new("m", config).unwrap();
            let mut svc = policy().breaker(breaker).layer(Scripted::new(&["503"]));
            for _ in 0..3 {
                call(&mut svc).await.unwrap_err();
            }
            let config = BulkheadConfig { max_concurrent: 1, max_wait: Duration::ZERO, max_waiting: 0 };
            let bulkhead = Bulkhead::new("m", config).unwrap();
            let _held = bulkhead.try_acquire().unwrap();
            let mut svc = policy().bulkhead(bulkhead.clone()).layer(Scripted::new(&["ok"]));
            call(&mut svc).await.unwrap_err();
        });
    });
    let counters: Vec<(String, u64)> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| match value {
            DebugValue::Counter(n) => {
                let labels: Vec<String> =
                    key.key().labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
                Some((format!("{}{{{}}}", key.key().name(), labels.join(",")), n))
            }
            _ => None,
        })
        .collect();
    let count = |name: &str| counters.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v);
    assert_eq!(count("failwell_retries_total{policy=test}"), 10, "{counters:?}");
    assert_eq!(count("failwell_retry_budget_exhausted_total{budget=m}"), 1, "{counters:?}");
    assert_eq!(count("failwell_breaker_transitions_total{breaker=m,to=open}"), 1, "{counters:?}");
    assert_eq!(count("failwell_breaker_rejected_total{breaker=m}"), 1, "{counters:?}");
    assert_eq!(count("failwell_bulkhead_rejected_total{bulkhead=m}"), 1, "{counters:?}");
}

#[tokio::test(start_paused = true)]
async fn the_deadline_bounds_the_wait_for_a_bulkhead_permit() {
    let config = BulkheadConfig { max_concurrent: 1, max_wait: Duration::from_secs(5), max_waiting: 4 };
    let bulkhead = Bulkhead::new("test", config).unwrap();
    let held = bulkhead.try_acquire().unwrap();
    let inner = Scripted::new(&["ok"]);
    let mut svc = policy().deadline(ms(100)).bulkhead(bulkhead.clone()).layer(inner.clone());
    let start = Instant::now();
    let err = call(&mut svc).await.unwrap_err();
    assert_eq!(start.elapsed(), ms(100), "not max_wait: the deadline came first");
    assert_eq!(err.to_string(), "deadline exceeded: no time left for the wait for a bulkhead permit");
    assert_eq!(inner.count(), 0, "no attempt started after the deadline");
    drop(held);
    assert_eq!(bulkhead.in_flight(), 0);
}

/// A service whose `call` panics.
#[derive(Clone)]
struct Panics;

impl Service<u32> for Panics {
    type Response = u32;
    type Error = String;
    type Future = std::future::Ready<Result<u32, String>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), String>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: u32) -> Self::Future {
        panic!("the service failed to build its future")
    }
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_the_services_call_does_not_take_a_probe_slot_with_it() {
    let config =
        BreakerConfig { consecutive_failures: Some(1), failure_rate: None, ..BreakerConfig::default() };
    let breaker = CircuitBreaker::new("test", config).unwrap();
    breaker.try_acquire().unwrap().record(CallOutcome::Failure);
    tokio::time::advance(BreakerConfig::default().open_for).await;
    let mut svc = policy().breaker(breaker.clone()).layer(Panics);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(svc.call(7))));
    assert!(panicked.is_err());
    assert_eq!(breaker.state(), BreakerState::HalfOpen);
    assert!(breaker.try_acquire().is_ok_and(|p| p.is_probe()), "the slot came back");
}

/// A service that is ready, but whose clones are not before `until` (as a
/// clone of a buffered service may have to wait for capacity).
struct SlowReady {
    until: Option<Instant>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Clone for SlowReady {
    fn clone(&self) -> Self {
        Self { until: Some(Instant::now() + Duration::from_secs(3)), sleep: None }
    }
}

impl Service<u32> for SlowReady {
    type Response = u32;
    type Error = PolicyError<String>;
    type Future = std::future::Ready<Result<u32, PolicyError<String>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        let Some(until) = self.until else { return Poll::Ready(Ok(())) };
        let sleep = self.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(until)));
        sleep.as_mut().poll(cx).map(Ok)
    }

    fn call(&mut self, req: u32) -> Self::Future {
        std::future::ready(Ok(req))
    }
}

#[tokio::test(start_paused = true)]
async fn the_deadline_bounds_the_wait_for_a_slow_services_readiness() {
    let config = BulkheadConfig { max_concurrent: 1, max_wait: Duration::from_secs(5), max_waiting: 4 };
    let bulkhead = Bulkhead::new("test", config).unwrap();
    let held = bulkhead.try_acquire().unwrap();
    let slow = SlowReady { until: None, sleep: None };
    let svc = crate::layer::DeadlineLayer::new(Some(ms(100)))
        .layer(crate::layer::BulkheadLayer::new(Some(bulkhead.clone())).layer(slow));
    let start = Instant::now();
    let call = tokio::spawn(async move { svc.oneshot(7).await });
    tokio::time::sleep(ms(10)).await;
    drop(held);
    let err = call.await.unwrap().unwrap_err();
    assert_eq!(start.elapsed(), ms(100), "not the 3 s the service takes to become ready");
    assert_eq!(err.to_string(), "deadline exceeded: no time left for the service to become ready");
    assert_eq!(bulkhead.in_flight(), 0, "the permit came back");
}
