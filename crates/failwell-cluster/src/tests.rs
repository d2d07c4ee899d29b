//! Tests against the real Redis (`REDIS_URL`) and PostgreSQL
//! (`DATABASE_URL`): each test uses a namespace of its own, and on
//! PostgreSQL a schema of its own. Several `Cluster`s in one test stand for
//! several processes (each has its own owner id, driver and connections).

use std::time::Duration;

use failwell_policy::{BreakerConfig, BreakerState, CallOutcome, CircuitBreaker, Throttle, ThrottleConfig};
use proptest::prelude::*;
use tokio::time::{Instant, sleep};

use super::*;

fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

fn database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

fn unique() -> String {
    format!("t{}", uuid::Uuid::new_v4().simple())
}

/// A PostgreSQL URL whose connections use a fresh schema of their own.
async fn postgres_schema() -> String {
    let schema = unique();
    let pool = sqlx::PgPool::connect(&database_url()).await.expect("PostgreSQL at DATABASE_URL");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&pool).await.unwrap();
    pool.close().await;
    let url = database_url();
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-csearch_path%3D{schema}")
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Redis,
    Postgres,
}

async fn url_for(kind: Kind) -> String {
    match kind {
        Kind::Redis => redis_url(),
        Kind::Postgres => postgres_schema().await,
    }
}

fn config(url: &str, namespace: &str) -> ClusterConfig {
    ClusterConfig {
        resync: Duration::from_millis(200),
        ..ClusterConfig { namespace: namespace.into(), ..ClusterConfig::new(url) }
    }
}

/// Rules whose in-process part never trips (a full window of 1000
/// failures): the tests see the cluster rule alone.
fn breaker_config() -> BreakerConfig {
    BreakerConfig {
        consecutive_failures: None,
        failure_rate: Some(1.0),
        minimum_calls: 1000,
        window: failwell_policy::SlidingWindow::Count(1000),
        open_for: Duration::from_millis(300),
        max_open_for: Duration::from_secs(2),
        probe_timeout: Duration::from_secs(2),
        ..BreakerConfig::default()
    }
}

const FAILURES: u32 = 5;

/// `n` processes of one cluster, each with breaker `p`, connected.
async fn processes(url: &str, namespace: &str, n: usize) -> Vec<(Cluster, CircuitBreaker<SharedBreaker>)> {
    processes_with(url, namespace, n, breaker_config()).await
}

/// The same with the provider's own rules `rules`.
async fn processes_with(
    url: &str,
    namespace: &str,
    n: usize,
    rules: BreakerConfig,
) -> Vec<(Cluster, CircuitBreaker<SharedBreaker>)> {
    let mut all = Vec::new();
    for _ in 0..n {
        let cluster = Cluster::start(config(url, namespace)).unwrap();
        let store = cluster.breaker("p", rules.clone(), FAILURES, Duration::from_secs(10)).unwrap();
        all.push((cluster, CircuitBreaker::with_store(store)));
    }
    for (cluster, _) in &all {
        wait_for("connected", Duration::from_secs(5), || !cluster.degraded()).await;
    }
    all
}

async fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        sleep(Duration::from_millis(2)).await;
    }
    start.elapsed()
}

fn fail(breaker: &CircuitBreaker<SharedBreaker>) -> bool {
    match breaker.try_acquire() {
        Ok(permit) => {
            permit.record(CallOutcome::Failure);
            true
        }
        Err(_) => false,
    }
}

async fn opens_everywhere_after_the_threshold(kind: Kind) {
    let url = url_for(kind).await;
    let all = processes(&url, &unique(), 4).await;
    // Failures from every process add up; the fifth opens the breaker in
    // all four (the in-process rule, 3 in a row, never fires: 2 per process).
    let mut calls = 0;
    for round in 0..2 {
        for (i, (_, breaker)) in all.iter().enumerate() {
            if round * 4 + i >= FAILURES as usize {
                break;
            }
            // One careful call at a time per process: wait for the report.
            wait_for("a permit", Duration::from_secs(2), || fail(breaker)).await;
            calls += 1;
        }
    }
    assert_eq!(calls, FAILURES);
    for (_, breaker) in &all {
        wait_for("open everywhere", Duration::from_secs(2), || breaker.state() == BreakerState::Open).await;
        let refused = breaker.try_acquire().unwrap_err();
        assert!(refused.retry_in.is_some_and(|d| d <= Duration::from_millis(300)), "{refused}");
    }
}

#[tokio::test]
async fn redis_opens_everywhere_after_the_threshold() {
    opens_everywhere_after_the_threshold(Kind::Redis).await;
}

#[tokio::test]
async fn postgres_opens_everywhere_after_the_threshold() {
    opens_everywhere_after_the_threshold(Kind::Postgres).await;
}

async fn one_probe_per_period_then_closed_everywhere(kind: Kind) {
    let url = url_for(kind).await;
    let all = processes(&url, &unique(), 4).await;
    all[0].1.force_open();
    all[0].1.reset();
    for _ in 0..FAILURES {
        wait_for("a permit", Duration::from_secs(2), || fail(&all[0].1)).await;
    }
    for (_, breaker) in &all {
        wait_for("open", Duration::from_secs(2), || breaker.state() == BreakerState::Open).await;
    }
    // Every process hammers the breaker through two open periods; the probe
    // fails the first time: exactly one probe per period cluster-wide.
    for period in 0..2 {
        let mut probes = Vec::new();
        let deadline = Instant::now() + Duration::from_millis(if period == 0 { 1_000 } else { 1_500 });
        while Instant::now() < deadline && probes.is_empty() {
            for (i, (_, breaker)) in all.iter().enumerate() {
                if let Ok(permit) = breaker.try_acquire() {
                    assert!(permit.is_probe(), "only a probe passes an open breaker");
                    probes.push((i, permit));
                }
            }
            sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(probes.len(), 1, "period {period}: one probe cluster-wide");
        // Nobody else gets one while it is in flight.
        for _ in 0..50 {
            for (_, breaker) in &all {
                assert!(breaker.try_acquire().is_err());
            }
            sleep(Duration::from_millis(2)).await;
        }
        let (owner, permit) = probes.pop().unwrap();
        if period == 0 {
            permit.record(CallOutcome::Failure);
            for (_, breaker) in &all {
                wait_for("open again", Duration::from_secs(2), || breaker.state() == BreakerState::Open)
                    .await;
            }
        } else {
            let closed_at = Instant::now();
            permit.record(CallOutcome::Success);
            assert_eq!(all[owner].1.state(), BreakerState::Closed, "the prober closes at once");
            for (_, breaker) in &all {
                let waited =
                    wait_for("closed", Duration::from_secs(2), || breaker.state() == BreakerState::Closed)
                        .await;
                assert!(
                    closed_at.elapsed() < Duration::from_millis(200),
                    "closed {waited:?} after the probe"
                );
            }
        }
    }
}

#[tokio::test]
async fn redis_one_probe_per_period_then_closed_everywhere() {
    one_probe_per_period_then_closed_everywhere(Kind::Redis).await;
}

#[tokio::test]
async fn postgres_one_probe_per_period_then_closed_everywhere() {
    one_probe_per_period_then_closed_everywhere(Kind::Postgres).await;
}

async fn a_pause_stops_every_process(kind: Kind) {
    let url = url_for(kind).await;
    let all = processes(&url, &unique(), 3).await;
    all[1].1.pause(Duration::from_millis(600));
    let refused = all[1].1.try_acquire().unwrap_err();
    assert!(refused.paused, "{refused}");
    assert!(refused.to_string().contains("paused"), "{refused}");
    for (_, breaker) in &all {
        wait_for("paused everywhere", Duration::from_secs(1), || {
            breaker.try_acquire().is_err_and(|e| e.paused)
        })
        .await;
        assert_eq!(breaker.state(), BreakerState::Closed, "a pause is not a trip");
    }
    for (_, breaker) in &all {
        wait_for("the pause to end", Duration::from_secs(2), || breaker.try_acquire().is_ok()).await;
    }
}

#[tokio::test]
async fn redis_a_pause_stops_every_process() {
    a_pause_stops_every_process(Kind::Redis).await;
}

#[tokio::test]
async fn postgres_a_pause_stops_every_process() {
    a_pause_stops_every_process(Kind::Postgres).await;
}

async fn a_rate_cut_in_one_process_cuts_every_process(kind: Kind) {
    let url = url_for(kind).await;
    let all: Vec<_> = processes(&url, &unique(), 3)
        .await
        .into_iter()
        .map(|(cluster, breaker)| {
            let throttle = Throttle::new("p", ThrottleConfig::default()).unwrap();
            breaker.store().follow(throttle.clone());
            (cluster, breaker, throttle)
        })
        .collect();
    // Every process has been sending; nobody limits anything yet.
    for (_, _, throttle) in &all {
        for _ in 0..50 {
            let turn = throttle.reserve().unwrap();
            throttle.observe(turn.booked_at, false);
            sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(throttle.rate(), None);
    }
    // The first is throttled and cuts its rate; it tells the others.
    let (_, breaker, throttle) = &all[0];
    let cut = (0..ThrottleConfig::default().cut_after())
        .find_map(|_| throttle.observe(throttle.reserve().unwrap().booked_at, true).cut_to)
        .expect("cut");
    breaker.share_throttle();
    let after_cut = throttle.reserve().unwrap();
    for (_, _, other) in &all[1..] {
        wait_for("the cut everywhere", Duration::from_secs(2), || other.rate().is_some()).await;
    }
    // The one that cut is not cut again by its own news.
    sleep(Duration::from_millis(300)).await;
    assert!(throttle.holds(&after_cut), "the process that cut was cut again");
    assert_eq!(throttle.rate(), Some(cut));
}

#[tokio::test]
async fn redis_a_rate_cut_in_one_process_cuts_every_process() {
    a_rate_cut_in_one_process_cuts_every_process(Kind::Redis).await;
}

#[tokio::test]
async fn postgres_a_rate_cut_in_one_process_cuts_every_process() {
    a_rate_cut_in_one_process_cuts_every_process(Kind::Postgres).await;
}

#[tokio::test]
async fn a_suspicious_process_lets_one_call_through() {
    let all = processes(&redis_url(), &unique(), 2).await;
    let (_, a) = &all[0];
    let (_, b) = &all[1];
    assert!(fail(a));
    // `a` knows at once, `b` as soon as the count is published.
    let careful = a.try_acquire().expect("the one careful call");
    assert!(a.try_acquire().is_err(), "a second call waits while the careful one is out");
    wait_for("b suspicious", Duration::from_secs(1), || {
        b.try_acquire().is_ok_and(|p| {
            let second = b.try_acquire().is_err();
            p.record(CallOutcome::Ignored);
            second
        })
    })
    .await;
    // A success clears the count everywhere: full speed again.
    careful.record(CallOutcome::Success);
    for breaker in [a, b] {
        wait_for("unsuspicious", Duration::from_secs(1), || {
            let permits: Vec<_> = (0..4).filter_map(|_| breaker.try_acquire().ok()).collect();
            permits.len() == 4
        })
        .await;
    }
}

#[tokio::test]
async fn successes_while_healthy_cost_no_round_trip() {
    // A server of the test's own: nobody else's scripts are counted.
    let redis = OwnRedis::start(free_port());
    let url = redis.url();
    let cluster =
        Cluster::start(ClusterConfig { resync: Duration::from_secs(3600), ..config(&url, &unique()) })
            .unwrap();
    let breaker = CircuitBreaker::with_store(
        cluster.breaker("p", breaker_config(), FAILURES, Duration::from_secs(10)).unwrap(),
    );
    wait_for("connected", Duration::from_secs(5), || !cluster.degraded()).await;
    let before = evalsha_calls(&url).await;
    for _ in 0..10_000 {
        breaker.try_acquire().unwrap().record(CallOutcome::Success);
    }
    sleep(Duration::from_millis(100)).await;
    assert_eq!(evalsha_calls(&url).await, before, "no script ran for healthy calls");
    // A failure is reported at once.
    assert!(fail(&breaker));
    sleep(Duration::from_millis(100)).await;
    assert!(evalsha_calls(&url).await > before);
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// EVALSHA calls served by the Redis server so far (all clients).
async fn evalsha_calls(url: &str) -> u64 {
    let client = ::redis::Client::open(url).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let info: String = ::redis::cmd("INFO").arg("commandstats").query_async(&mut connection).await.unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|l| l.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A `redis-server` of the test's own on a free port, to stop and start.
struct OwnRedis {
    port: u16,
    child: Option<std::process::Child>,
}

impl OwnRedis {
    fn start(port: u16) -> Self {
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (Debian package redis-server) must be installed");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(started.elapsed() < Duration::from_secs(5), "redis-server did not start on port {port}");
            std::thread::sleep(Duration::from_millis(10));
        }
        Self { port, child: Some(child) }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

#[tokio::test]
async fn degraded_while_redis_is_down_then_shared_again() {
    let port = free_port();
    let mut redis = OwnRedis::start(port);
    let url = redis.url();
    let in_a_row = BreakerConfig { consecutive_failures: Some(3), ..breaker_config() };
    let all = processes_with(&url, &unique(), 2, in_a_row).await;
    let (cluster, breaker) = &all[0];
    redis.kill();
    // The next report fails (or the subscription drops): degraded, and calls
    // never wait for Redis.
    let _ = fail(breaker);
    wait_for("degraded", Duration::from_secs(3), || cluster.degraded()).await;
    assert!(breaker.store().degraded());
    let started = Instant::now();
    for _ in 0..1000 {
        if let Ok(permit) = breaker.try_acquire() {
            permit.record(CallOutcome::Success);
        }
    }
    assert!(started.elapsed() < Duration::from_millis(100), "calls do not wait for Redis");
    // The in-process fallback still protects: 3 failures in a row open it.
    for _ in 0..3 {
        assert!(fail(breaker));
    }
    assert_eq!(breaker.state(), BreakerState::Open);
    // Redis comes back (empty): shared again, closed by the shared record.
    let _redis = OwnRedis::start(port);
    for (cluster, breaker) in &all {
        wait_for("recovered", Duration::from_secs(5), || !cluster.degraded()).await;
        assert!(!breaker.store().degraded());
        assert_eq!(breaker.state(), BreakerState::Closed);
    }
    // And shared again: failures from both processes add up.
    for i in 0..FAILURES as usize {
        wait_for("a permit", Duration::from_secs(2), || fail(&all[i % 2].1)).await;
    }
    for (_, breaker) in &all {
        wait_for("open everywhere", Duration::from_secs(2), || breaker.state() == BreakerState::Open).await;
    }
}

#[tokio::test]
async fn an_open_breaker_stays_open_when_the_store_goes_away() {
    let mut redis = OwnRedis::start(free_port());
    let all = processes(&redis.url(), &unique(), 1).await;
    let (cluster, breaker) = &all[0];
    for _ in 0..FAILURES {
        wait_for("a permit", Duration::from_secs(2), || fail(breaker)).await;
    }
    wait_for("open", Duration::from_secs(2), || breaker.state() == BreakerState::Open).await;
    redis.kill();
    wait_for("degraded", Duration::from_secs(3), || cluster.degraded()).await;
    // The open period the cluster decided still holds ...
    assert_eq!(breaker.state(), BreakerState::Open);
    assert!(breaker.try_acquire().is_err());
    // ... and when it is over the process's own breaker decides.
    wait_for("the fallback", Duration::from_secs(2), || breaker.try_acquire().is_ok()).await;
    assert_eq!(breaker.state(), BreakerState::Closed);
}

#[tokio::test]
async fn a_process_whose_own_rules_trip_opens_the_breaker_everywhere() {
    // 80 % failures: a success every fifth call resets the cluster's count
    // (5 in a row), but the provider's own failure-rate rule trips.
    let url = redis_url();
    let namespace = unique();
    let rate = BreakerConfig {
        consecutive_failures: None,
        failure_rate: Some(0.5),
        window: failwell_policy::SlidingWindow::Count(10),
        minimum_calls: 10,
        ..breaker_config()
    };
    let all = processes_with(&url, &namespace, 2, rate).await;
    let a = &all[0].1;
    // Twice: the process that tripped also probes and closes the breaker,
    // and its own rules still count afterwards.
    for round in 0..2 {
        for call in 0..10 {
            let permit = loop {
                if let Ok(permit) = a.try_acquire() {
                    break permit;
                }
                sleep(Duration::from_millis(2)).await;
            };
            permit.record(if call % 5 == 0 { CallOutcome::Success } else { CallOutcome::Failure });
        }
        for (_, breaker) in &all {
            wait_for("open everywhere", Duration::from_secs(2), || breaker.state() == BreakerState::Open)
                .await;
        }
        if round == 0 {
            wait_for("a probe in the tripping process", Duration::from_secs(3), || {
                a.try_acquire().is_ok_and(|permit| {
                    let probe = permit.is_probe();
                    permit.record(CallOutcome::Success);
                    probe
                })
            })
            .await;
            for (_, breaker) in &all {
                wait_for("closed everywhere", Duration::from_secs(2), || {
                    breaker.state() == BreakerState::Closed
                })
                .await;
            }
        }
    }
}

#[tokio::test]
async fn a_lease_never_used_passes_to_the_next_process_without_a_longer_open_period() {
    let all = processes(&redis_url(), &unique(), 2).await;
    for _ in 0..FAILURES {
        wait_for("a permit", Duration::from_secs(2), || fail(&all[0].1)).await;
    }
    wait_for("open", Duration::from_secs(2), || all[1].1.state() == BreakerState::Open).await;
    // Process 0 asks for the probe lease (its call is refused while it
    // asks) and then has no call to send.
    sleep(Duration::from_millis(400)).await;
    assert!(all[0].1.try_acquire().is_err(), "the call that asks for the lease waits");
    wait_for("process 0 holds the lease", Duration::from_secs(2), || {
        all[1].1.state() == BreakerState::HalfOpen
    })
    .await;
    // After the lease (2 s), process 1's call takes it over: straight to
    // its own probe, never open again in between.
    let survivor = &all[1].1;
    let started = Instant::now();
    loop {
        assert_ne!(survivor.state(), BreakerState::Open, "the unused lease counted as a failed probe");
        if let Ok(permit) = survivor.try_acquire() {
            assert!(permit.is_probe());
            permit.record(CallOutcome::Success);
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(4), "no probe after the lease ran out");
        sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(survivor.state(), BreakerState::Closed);
}

#[tokio::test]
async fn a_record_the_store_lost_is_taken_as_it_is() {
    let redis = OwnRedis::start(free_port());
    let all = processes(&redis.url(), &unique(), 2).await;
    for _ in 0..FAILURES {
        wait_for("a permit", Duration::from_secs(2), || fail(&all[0].1)).await;
    }
    for (_, breaker) in &all {
        wait_for("open", Duration::from_secs(2), || breaker.state() == BreakerState::Open).await;
    }
    // An operator (or an eviction) deletes everything.
    let client = ::redis::Client::open(redis.url()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = ::redis::cmd("FLUSHALL").query_async(&mut connection).await.unwrap();
    for (_, breaker) in &all {
        wait_for("closed again", Duration::from_secs(2), || breaker.state() == BreakerState::Closed).await;
    }
    // And the new record counts: five more failures open it again.
    for i in 0..FAILURES as usize {
        wait_for("a permit", Duration::from_secs(2), || fail(&all[i % 2].1)).await;
    }
    for (_, breaker) in &all {
        wait_for("open again", Duration::from_secs(2), || breaker.state() == BreakerState::Open).await;
    }
}

#[tokio::test]
async fn a_lease_whose_holder_died_is_claimed_by_another_process() {
    let mut all = processes(&redis_url(), &unique(), 2).await;
    for _ in 0..FAILURES {
        wait_for("a permit", Duration::from_secs(2), || fail(&all[0].1)).await;
    }
    wait_for("open", Duration::from_secs(2), || all[1].1.state() == BreakerState::Open).await;
    // Process 0 wins the probe and dies with it (the permit is never
    // recorded, its driver stops).
    let probe = loop {
        if let Ok(permit) = all[0].1.try_acquire() {
            break permit;
        }
        sleep(Duration::from_millis(5)).await;
    };
    assert!(probe.is_probe());
    std::mem::forget(probe);
    drop(all.remove(0));
    let (_, survivor) = &all[0];
    wait_for("half-open", Duration::from_secs(2), || survivor.state() == BreakerState::HalfOpen).await;
    assert!(survivor.peek().is_some(), "refused while the lease runs");
    // The lease (the probe timeout, 2 s) runs out: a call here would claim,
    // which counts the lost probe as failed; after that open period the
    // survivor probes and closes the breaker.
    wait_for("the lease to run out", Duration::from_secs(4), || survivor.peek().is_none()).await;
    wait_for("a probe here", Duration::from_secs(5), || {
        survivor.try_acquire().is_ok_and(|permit| {
            let probe = permit.is_probe();
            permit.record(CallOutcome::Success);
            probe
        })
    })
    .await;
    assert_eq!(survivor.state(), BreakerState::Closed);
}

#[tokio::test]
async fn names_that_look_like_each_others_keys_do_not_collide() {
    let namespace = unique();
    let cluster = Cluster::start(config(&redis_url(), &namespace)).unwrap();
    let p = CircuitBreaker::with_store(
        cluster.breaker("p", breaker_config(), FAILURES, Duration::from_secs(10)).unwrap(),
    );
    let q = CircuitBreaker::with_store(
        cluster.breaker("p:failures", breaker_config(), FAILURES, Duration::from_secs(10)).unwrap(),
    );
    wait_for("connected", Duration::from_secs(5), || !cluster.degraded()).await;
    for _ in 0..FAILURES {
        wait_for("a permit", Duration::from_secs(2), || fail(&p)).await;
    }
    wait_for("open", Duration::from_secs(2), || p.state() == BreakerState::Open).await;
    sleep(Duration::from_millis(500)).await;
    assert!(!cluster.degraded());
    assert_eq!(q.state(), BreakerState::Closed);
    assert!(fail(&q));
}

#[test]
fn urls_are_checked_without_connecting() {
    assert!(Cluster::check_url("redis://127.0.0.1:1").is_ok());
    assert!(Cluster::check_url("postgres://u@127.0.0.1:1/db").is_ok());
    let error = Cluster::check_url("mysql://u:secret@h/db").unwrap_err().to_string();
    assert!(error.contains("unsupported") && !error.contains("secret"), "{error}");
}

#[tokio::test]
async fn one_name_per_cluster() {
    let cluster = Cluster::start(ClusterConfig::new(&redis_url())).unwrap();
    cluster.breaker("p", breaker_config(), 5, Duration::from_secs(1)).unwrap();
    assert!(matches!(
        cluster.breaker("p", breaker_config(), 5, Duration::from_secs(1)),
        Err(ClusterError::Duplicate(_))
    ));
}

/// Events for the model comparison, with the time step before each.
fn events() -> impl Strategy<Value = Vec<(u16, Event)>> {
    let event = prop_oneof![
        Just(Event::Load),
        (0u64..6, 1u32..4).prop_map(|(generation, count)| Event::Failures { generation, count }),
        (0u64..6).prop_map(|generation| Event::Success { generation }),
        (0u64..6).prop_map(|generation| Event::Trip { generation }),
        prop_oneof![Just("a"), Just("b")].prop_map(|o| Event::Claim { owner: o.to_owned() }),
        (
            0u64..6,
            prop_oneof![
                Just(ProbeResult::Success),
                Just(ProbeResult::Failure),
                Just(ProbeResult::Release),
                Just(ProbeResult::Started)
            ]
        )
            .prop_map(|(generation, result)| Event::Probe { generation, result }),
        (0u64..500).prop_map(|ms| Event::Pause { ms }),
        prop_oneof![Just(None), Just(Some(Phase::ForcedOpen)), Just(Some(Phase::ForcedClosed))]
            .prop_map(Event::Force),
        prop_oneof![Just("a"), Just("b")].prop_map(|o| Event::Throttle { owner: o.to_owned() }),
    ];
    prop::collection::vec((0u16..400, event), 1..40)
}

fn model_rules() -> Rules {
    Rules {
        failures: 4,
        window_ms: 1_000,
        probe_timeout_ms: 700,
        open_for_ms: 300,
        open_multiplier: 2.0,
        max_open_for_ms: 2_000,
    }
}

/// The Redis script and the PostgreSQL transaction give what
/// `Record::apply` gives, step by step (generations guessed from a small
/// range, so stale and current reports both occur).
#[test]
fn the_stores_agree_with_the_model() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let postgres_url = runtime.block_on(postgres_schema());
    let config = ProptestConfig { cases: 48, ..ProptestConfig::default() };
    proptest!(config, |(steps in events())| {
        runtime.block_on(async {
            let namespace = unique();
            let mut redis = RedisBackend::new(&redis_url(), &namespace, Duration::from_secs(5)).unwrap();
            let mut postgres = PostgresBackend::new(&postgres_url, &namespace, Duration::from_secs(5)).unwrap();
            let rules = model_rules();
            let mut record = Record::default();
            let mut now = 1_700_000_000_000i64;
            for (step, (advance, event)) in steps.iter().enumerate() {
                now += i64::from(*advance);
                let expected = record.apply("m", &rules, event, now);
                let from_redis = redis.apply("m", &rules, event, Some(now)).await.unwrap();
                let from_postgres = postgres.apply("m", &rules, event, Some(now)).await.unwrap();
                prop_assert_eq!(&from_redis, &expected, "redis, step {} {:?}", step, event);
                prop_assert_eq!(&from_postgres, &expected, "postgres, step {} {:?}", step, event);
            }
            Ok(())
        })?;
    });
}

#[test]
fn open_periods_grow_and_are_capped() {
    let rules = model_rules();
    assert_eq!([1, 2, 3, 4, 9].map(|t| rules.open_ms(t)), [300, 600, 1_200, 2_000, 2_000]);
    assert_eq!(Rules { open_multiplier: 1e300, ..model_rules() }.open_ms(5), 2_000);
}
