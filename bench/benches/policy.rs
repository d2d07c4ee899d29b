//! Success-path overhead per call of failwell's resilience policies, beside
//! the closest peer crates, in the same run.
//!
//! Every candidate wraps the same trivial service (it answers at once), so
//! what is measured is the policy itself: taking a permit, calling, polling
//! the future once and recording the outcome. Futures are polled by the same
//! minimal executor for everyone (a no-op waker, polled again until ready).
//! Timers need a tokio runtime, which is entered around the measurement; the
//! success path of failwell's layers never registers one.
//!
//! "2 threads": two threads call one shared policy at once, each through its
//! own clone of the service (as tower users do); the figure is the per-call
//! time of the slower thread.
//!
//! Run: `cargo bench --manifest-path bench/Cargo.toml -- --warm-up-time 1 --measurement-time 3`

use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use criterion::{BenchmarkGroup, Criterion, criterion_group, criterion_main, measurement::WallTime};
use failwell_policy::layer::{BreakerLayer, BulkheadLayer, DeadlineLayer, RetryLayer, TimeoutLayer};
use failwell_policy::{
    Backoff, BreakerConfig, Bulkhead, BulkheadConfig, CallOutcome, CircuitBreaker, Jitter, Policy,
    PolicyError, Retry, RetryBudget, RetryBudgetConfig,
};
use tokio::runtime::Handle;
use tower::{BoxError, Layer, Service, ServiceBuilder, service_fn};

// ---------------------------------------------------------------------------
// The executor, the same for every candidate.

/// Polls `future` with a no-op waker until it is ready, yielding the CPU
/// between polls (only a contended lock in a peer ever makes it wait).
#[inline(always)]
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::yield_now();
    }
}

/// One call through a tower service: readiness, call, the response.
#[inline(always)]
fn call<S: Service<u64>>(service: &mut S, request: u64) -> Result<S::Response, S::Error> {
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        match service.poll_ready(&mut cx) {
            Poll::Ready(Ok(())) => break,
            Poll::Ready(Err(e)) => return Err(e),
            Poll::Pending => std::thread::yield_now(),
        }
    }
    block_on(service.call(request))
}

// ---------------------------------------------------------------------------
// Measurement helpers.

const ONE: &str = "1 thread";
const TWO: &str = "2 threads";

/// Measures `op` on this thread (the runtime is entered by `main`).
fn one_thread<T>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    mut state: T,
    op: impl Fn(&mut T, u64),
) {
    group.bench_function(name, |b| {
        let mut i = 0u64;
        b.iter(|| {
            i = i.wrapping_add(1);
            op(&mut state, black_box(i));
        })
    });
}

/// Measures `op` on two threads at once, each with its own state from
/// `make`; the time is the slower thread's.
fn two_threads<T: Send>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    make: impl Fn() -> T,
    op: impl Fn(&mut T, u64) + Sync,
) {
    let handle = Handle::current();
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let barrier = Barrier::new(2);
            let states = [make(), make()];
            std::thread::scope(|s| {
                let threads: Vec<_> = states
                    .into_iter()
                    .map(|mut state| {
                        let (barrier, handle, op) = (&barrier, &handle, &op);
                        s.spawn(move || {
                            let _runtime = handle.enter();
                            // Settle the state (breaker windows, lazy init) before timing.
                            for i in 0..1_000 {
                                op(&mut state, i);
                            }
                            barrier.wait();
                            let started = Instant::now();
                            for i in 0..iters {
                                op(&mut state, black_box(i));
                            }
                            started.elapsed()
                        })
                    })
                    .collect();
                threads.into_iter().map(|t| t.join().expect("bench thread")).max().unwrap_or_default()
            })
        })
    });
}

// ---------------------------------------------------------------------------
// The candidates.

type FwError = PolicyError<Infallible>;

/// The protected call: answers at once.
fn inner_fw() -> impl Service<u64, Response = u64, Error = FwError, Future: Send> + Clone + Send + 'static {
    service_fn(|x: u64| std::future::ready(Ok::<u64, FwError>(x)))
}

fn inner_box() -> impl Service<u64, Response = u64, Error = BoxError, Future: Send> + Clone + Send + 'static {
    service_fn(|x: u64| std::future::ready(Ok::<u64, BoxError>(x)))
}

fn fw_breaker() -> CircuitBreaker {
    CircuitBreaker::new("bench", BreakerConfig::default()).expect("valid breaker")
}

fn fw_bulkhead() -> Bulkhead {
    Bulkhead::new("bench", BulkheadConfig { max_concurrent: 1000, ..BulkheadConfig::default() })
        .expect("valid bulkhead")
}

fn fw_retry() -> Retry {
    let backoff = Backoff::try_new(Duration::from_millis(100), Duration::from_secs(2), Jitter::Full)
        .expect("valid backoff");
    let budget = RetryBudget::new("bench", RetryBudgetConfig::default()).expect("valid budget");
    Retry::new("bench", 3, backoff).expect("valid retry").budget(budget)
}

fn fw_policy() -> Policy {
    Policy::new()
        .deadline(Duration::from_secs(1))
        .bulkhead(fw_bulkhead())
        .breaker(fw_breaker())
        .retry(fw_retry())
        .attempt_timeout(Duration::from_secs(1))
}

fn tr_breaker() -> tower_resilience::circuitbreaker::CircuitBreakerLayer {
    tower_resilience::circuitbreaker::CircuitBreakerLayer::builder().build().expect("valid breaker")
}

fn tr_bulkhead() -> tower_resilience::bulkhead::BulkheadLayer {
    tower_resilience::bulkhead::BulkheadLayer::builder()
        .max_concurrent_calls(1000)
        .build()
        .expect("valid bulkhead")
}

fn failsafe_breaker()
-> impl failsafe::CircuitBreaker + failsafe::futures::CircuitBreaker + Clone + Send + Sync {
    let policy = failsafe::failure_policy::consecutive_failures(
        5,
        failsafe::backoff::constant(Duration::from_secs(600)),
    );
    failsafe::Config::new().failure_policy(policy).build()
}

/// tower's retry with a [`tower::retry::budget::TpsBudget`]: deposit on
/// success, withdraw before a retry.
#[derive(Clone)]
struct TpsBudgetPolicy {
    attempts_left: u32,
    budget: std::sync::Arc<tower::retry::budget::TpsBudget>,
}

impl TpsBudgetPolicy {
    fn new() -> Self {
        Self { attempts_left: 2, budget: std::sync::Arc::new(tower::retry::budget::TpsBudget::default()) }
    }
}

impl<Req: Clone, Res, E> tower::retry::Policy<Req, Res, E> for TpsBudgetPolicy {
    type Future = std::future::Ready<()>;

    fn retry(&mut self, _: &mut Req, result: &mut Result<Res, E>) -> Option<Self::Future> {
        use tower::retry::budget::Budget;
        match result {
            Ok(_) => {
                self.budget.deposit();
                None
            }
            Err(_) if self.attempts_left > 0 && self.budget.withdraw() => {
                self.attempts_left -= 1;
                Some(std::future::ready(()))
            }
            Err(_) => None,
        }
    }

    fn clone_request(&mut self, req: &Req) -> Option<Req> {
        Some(req.clone())
    }
}

/// tower's retry with the least a policy can do: a count of attempts.
#[derive(Clone)]
struct AttemptsPolicy(u32);

impl<Req: Clone, Res, E> tower::retry::Policy<Req, Res, E> for AttemptsPolicy {
    type Future = std::future::Ready<()>;

    fn retry(&mut self, _: &mut Req, result: &mut Result<Res, E>) -> Option<Self::Future> {
        match result {
            Err(_) if self.0 > 0 => {
                self.0 -= 1;
                Some(std::future::ready(()))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, req: &Req) -> Option<Req> {
        Some(req.clone())
    }
}

/// A fixed amount of work touching no shared state: how much slower each
/// thread runs when both cores are busy, whatever the policy.
fn arithmetic(_: &mut (), i: u64) {
    let mut x = i;
    for k in 0..8 {
        x = black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(k));
    }
    black_box(x);
}

/// One read-modify-write of a cache line no other thread touches: the unit
/// of every reference count and permit counter.
fn atomic_add(counter: &mut AtomicU64, i: u64) {
    black_box(&*counter).fetch_add(i, Ordering::Relaxed);
}

fn svc_op<S: Service<u64>>(service: &mut S, i: u64) {
    let _ = black_box(call(service, i).is_ok());
}

// ---------------------------------------------------------------------------
// The groups.

fn breaker(c: &mut Criterion) {
    for threads in [ONE, TWO] {
        let mut group = c.benchmark_group(format!("breaker/{threads}"));
        let fw_layer = BreakerLayer::new(Some(fw_breaker())).layer(inner_fw());
        let fw_direct = fw_breaker();
        let tr = tr_breaker().layer(inner_box());
        let fs = failsafe_breaker();
        let rc = std::sync::Arc::new(recloser::Recloser::default());
        let rc_async = recloser::AsyncRecloser::from(recloser::Recloser::default());

        fn direct(cb: &mut CircuitBreaker, i: u64) {
            if let Ok(permit) = cb.try_acquire() {
                black_box(i);
                permit.record(CallOutcome::Success);
            }
        }
        fn failsafe_sync<B: failsafe::CircuitBreaker>(cb: &mut B, i: u64) {
            let _ = black_box(cb.call(|| Ok::<u64, ()>(black_box(i))).is_ok());
        }
        fn failsafe_futures<B: failsafe::futures::CircuitBreaker>(cb: &mut B, i: u64) {
            let r = block_on(cb.call(std::future::ready(Ok::<u64, ()>(black_box(i)))));
            let _ = black_box(r.is_ok());
        }
        fn recloser_sync(rc: &mut std::sync::Arc<recloser::Recloser>, i: u64) {
            let _ = black_box(rc.call(|| Ok::<u64, ()>(black_box(i))).is_ok());
        }
        fn recloser_async(rc: &mut recloser::AsyncRecloser, i: u64) {
            let r = block_on(rc.call(std::future::ready(Ok::<u64, ()>(black_box(i)))));
            let _ = black_box(r.is_ok());
        }

        if threads == ONE {
            one_thread(&mut group, "reference: no policy (the call alone)", inner_fw(), svc_op);
            one_thread(&mut group, "reference: arithmetic, no shared state", (), arithmetic);
            one_thread(&mut group, "reference: one atomic add, uncontended", AtomicU64::new(0), atomic_add);
            one_thread(&mut group, "failwell BreakerLayer", fw_layer, svc_op);
            one_thread(&mut group, "failwell CircuitBreaker (direct)", fw_direct, direct);
            one_thread(&mut group, "tower-resilience CircuitBreaker", tr, svc_op);
            one_thread(&mut group, "failsafe sync", fs.clone(), failsafe_sync);
            one_thread(&mut group, "failsafe futures", fs, failsafe_futures);
            one_thread(&mut group, "recloser sync", rc, recloser_sync);
            one_thread(&mut group, "recloser AsyncRecloser", rc_async, recloser_async);
        } else {
            two_threads(&mut group, "reference: no policy (the call alone)", inner_fw, svc_op);
            two_threads(&mut group, "reference: arithmetic, no shared state", || (), arithmetic);
            two_threads(&mut group, "failwell BreakerLayer", || fw_layer.clone(), svc_op);
            two_threads(&mut group, "failwell CircuitBreaker (direct)", || fw_direct.clone(), direct);
            two_threads(&mut group, "tower-resilience CircuitBreaker", || tr.clone(), svc_op);
            two_threads(&mut group, "failsafe sync", || fs.clone(), failsafe_sync);
            two_threads(&mut group, "failsafe futures", || fs.clone(), failsafe_futures);
            two_threads(&mut group, "recloser sync", || rc.clone(), recloser_sync);
            two_threads(&mut group, "recloser AsyncRecloser", || rc_async.clone(), recloser_async);
        }
        group.finish();
    }
}

fn breaker_open(c: &mut Criterion) {
    let mut group = c.benchmark_group("breaker/open (rejected call)");

    let fw = fw_breaker();
    fw.force_open();
    let mut fw_layer = BreakerLayer::new(Some(fw.clone())).layer(inner_fw());
    assert!(call(&mut fw_layer, 1).is_err(), "failwell breaker is open");
    fn direct(cb: &mut CircuitBreaker, i: u64) {
        let _ = black_box(cb.try_acquire().map(|p| p.record(CallOutcome::Success)).is_err());
        black_box(i);
    }
    one_thread(&mut group, "failwell BreakerLayer", fw_layer, svc_op);
    one_thread(&mut group, "failwell CircuitBreaker (direct)", fw, direct);

    let (layer, handle) = tower_resilience::circuitbreaker::CircuitBreakerLayer::builder()
        .build_with_handle()
        .expect("valid breaker");
    block_on(handle.force_open());
    let mut tr = layer.layer(inner_box());
    assert!(call(&mut tr, 1).is_err(), "tower-resilience breaker is open");
    one_thread(&mut group, "tower-resilience CircuitBreaker", tr, svc_op);

    let fs = failsafe_breaker();
    for _ in 0..5 {
        let _ = failsafe::CircuitBreaker::call(&fs, || Err::<u64, ()>(()));
    }
    assert!(!failsafe::CircuitBreaker::is_call_permitted(&fs), "failsafe breaker is open");
    fn failsafe_sync<B: failsafe::CircuitBreaker>(cb: &mut B, i: u64) {
        let _ = black_box(cb.call(|| Ok::<u64, ()>(black_box(i))).is_ok());
    }
    fn failsafe_futures<B: failsafe::futures::CircuitBreaker>(cb: &mut B, i: u64) {
        let r = block_on(cb.call(std::future::ready(Ok::<u64, ()>(black_box(i)))));
        let _ = black_box(r.is_ok());
    }
    one_thread(&mut group, "failsafe sync", fs.clone(), failsafe_sync);
    one_thread(&mut group, "failsafe futures", fs, failsafe_futures);

    let rc = recloser::Recloser::custom().closed_len(10).open_wait(Duration::from_secs(600)).build();
    for _ in 0..11 {
        let _ = rc.call(|| Err::<u64, ()>(()));
    }
    assert!(matches!(rc.call(|| Ok::<u64, ()>(1)), Err(recloser::Error::Rejected)), "recloser is open");
    let rc = std::sync::Arc::new(rc);
    fn recloser_sync(rc: &mut std::sync::Arc<recloser::Recloser>, i: u64) {
        let _ = black_box(rc.call(|| Ok::<u64, ()>(black_box(i))).is_ok());
    }
    one_thread(&mut group, "recloser sync", rc, recloser_sync);

    let rc = recloser::Recloser::custom().closed_len(10).open_wait(Duration::from_secs(600)).build();
    for _ in 0..11 {
        let _ = rc.call(|| Err::<u64, ()>(()));
    }
    let rc = recloser::AsyncRecloser::from(rc);
    fn recloser_async(rc: &mut recloser::AsyncRecloser, i: u64) {
        let r = block_on(rc.call(std::future::ready(Ok::<u64, ()>(black_box(i)))));
        let _ = black_box(r.is_ok());
    }
    one_thread(&mut group, "recloser AsyncRecloser", rc, recloser_async);
    group.finish();
}

fn bulkhead(c: &mut Criterion) {
    for threads in [ONE, TWO] {
        let mut group = c.benchmark_group(format!("bulkhead/{threads}"));
        let fw = BulkheadLayer::new(Some(fw_bulkhead())).layer(inner_fw());
        let tower_limit = tower::limit::ConcurrencyLimitLayer::new(1000).layer(inner_box());
        let tr = tr_bulkhead().layer(inner_box());
        if threads == ONE {
            one_thread(&mut group, "failwell BulkheadLayer", fw, svc_op);
            one_thread(&mut group, "tower ConcurrencyLimit", tower_limit, svc_op);
            one_thread(&mut group, "tower-resilience Bulkhead", tr, svc_op);
        } else {
            two_threads(&mut group, "reference: arithmetic, no shared state", || (), arithmetic);
            two_threads(&mut group, "failwell BulkheadLayer", || fw.clone(), svc_op);
            two_threads(&mut group, "tower ConcurrencyLimit", || tower_limit.clone(), svc_op);
            two_threads(&mut group, "tower-resilience Bulkhead", || tr.clone(), svc_op);
        }
        group.finish();
    }
}

fn retry(c: &mut Criterion) {
    let mut group = c.benchmark_group(format!("retry/{ONE}"));
    let fw = RetryLayer::new(Some(fw_retry())).layer(inner_fw());
    let tower_budget = tower::retry::RetryLayer::new(TpsBudgetPolicy::new()).layer(inner_box());
    let tower_attempts = tower::retry::RetryLayer::new(AttemptsPolicy(2)).layer(inner_box());
    one_thread(&mut group, "failwell RetryLayer (with RetryBudget)", fw, svc_op);
    one_thread(&mut group, "tower Retry (TpsBudget policy)", tower_budget, svc_op);
    one_thread(&mut group, "tower Retry (attempts-only policy)", tower_attempts, svc_op);
    group.finish();
}

fn timeout(c: &mut Criterion) {
    let mut group = c.benchmark_group(format!("timeout/{ONE}"));
    let second = Duration::from_secs(1);
    let fw_timeout = TimeoutLayer::new(Some(second)).layer(inner_fw());
    let fw_deadline = DeadlineLayer::new(Some(second)).layer(inner_fw());
    let tower_timeout = tower::timeout::TimeoutLayer::new(second).layer(inner_box());
    fn clock(_: &mut (), _: u64) {
        black_box(tokio::time::Instant::now());
    }
    one_thread(&mut group, "reference: one clock read", (), clock);
    one_thread(&mut group, "failwell TimeoutLayer", fw_timeout, svc_op);
    one_thread(&mut group, "failwell DeadlineLayer", fw_deadline, svc_op);
    one_thread(&mut group, "tower Timeout", tower_timeout, svc_op);
    group.finish();
}

fn composed(c: &mut Criterion) {
    for threads in [ONE, TWO] {
        let mut group = c.benchmark_group(format!("policy/composed/{threads}"));
        let fw = fw_policy().layer(service_fn(|x: u64| std::future::ready(Ok::<u64, Infallible>(x))));
        // The closest peer stack: an overall timeout standing for the
        // deadline, then bulkhead, breaker, retry with a budget and the
        // timeout of each attempt.
        let second = Duration::from_secs(1);
        let peers = ServiceBuilder::new()
            .layer(tower::timeout::TimeoutLayer::new(second))
            .layer(tr_bulkhead())
            .layer(tr_breaker())
            .layer(tower::retry::RetryLayer::new(TpsBudgetPolicy::new()))
            .layer(tower::timeout::TimeoutLayer::new(second))
            .service(inner_box());
        if threads == ONE {
            one_thread(&mut group, "failwell Policy (5 layers)", fw, svc_op);
            one_thread(&mut group, "tower-resilience + tower stack", peers, svc_op);
        } else {
            two_threads(&mut group, "reference: arithmetic, no shared state", || (), arithmetic);
            two_threads(&mut group, "failwell Policy (5 layers)", || fw.clone(), svc_op);
            two_threads(&mut group, "tower-resilience + tower stack", || peers.clone(), svc_op);
        }
        group.finish();
    }
}

fn all(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
    let _runtime = runtime.enter();
    breaker(c);
    breaker_open(c);
    bulkhead(c);
    retry(c);
    timeout(c);
    composed(c);
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = all
}
criterion_main!(benches);
