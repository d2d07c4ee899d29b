//! Call overhead of a closed circuit breaker, in one run, with its state in
//! (a) this process (`InProcess`), (b) Redis with failwell's local view
//! (`failwell_cluster::SharedBreaker`: a closed, healthy breaker answers
//! from memory), and (c) Redis the textbook way: one round trip per call to
//! read the state (a `GET` of the breaker's key over one kept-open
//! connection, the cheapest such design; the outcome of a success is not
//! even written back).
//!
//! Each iteration takes a permit and records a success. Needs the Redis
//! server at `REDIS_URL` (default `redis://127.0.0.1:6379`).
//!
//! Run: `cargo bench --manifest-path bench/Cargo.toml --bench shared_breaker`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use failwell_cluster::{Cluster, ClusterConfig};
use failwell_policy::{BreakerConfig, CallOutcome, CircuitBreaker};

fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

fn closed_breaker(c: &mut Criterion) {
    let mut group = c.benchmark_group("closed_breaker");

    let in_process = CircuitBreaker::new("bench", BreakerConfig::default()).unwrap();
    group.bench_function("a_in_process", |b| {
        b.iter(|| black_box(in_process.try_acquire().unwrap()).record(CallOutcome::Success))
    });

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _entered = runtime.enter();
    let namespace = format!("bench-{}", std::process::id());
    let cluster =
        Cluster::start(ClusterConfig { namespace: namespace.clone(), ..ClusterConfig::new(&redis_url()) })
            .expect("a Redis URL");
    let store = cluster.breaker("bench", BreakerConfig::default(), 20, Duration::from_secs(10)).unwrap();
    let started = Instant::now();
    while store.degraded() {
        assert!(started.elapsed() < Duration::from_secs(5), "Redis at {} is not reachable", redis_url());
        std::thread::sleep(Duration::from_millis(5));
    }
    let shared = CircuitBreaker::with_store(store);
    group.bench_function("b_redis_local_view", |b| {
        b.iter(|| black_box(shared.try_acquire().unwrap()).record(CallOutcome::Success))
    });

    let client = redis::Client::open(redis_url()).unwrap();
    let mut connection = client.get_connection().unwrap();
    let key = format!("{namespace}:naive");
    group.bench_function("c_redis_round_trip_per_call", |b| {
        b.iter(|| {
            let state: Option<String> = redis::cmd("GET").arg(&key).query(&mut connection).unwrap();
            black_box(state.is_none())
        })
    });
    group.finish();
}

criterion_group!(benches, closed_breaker);
criterion_main!(benches);
