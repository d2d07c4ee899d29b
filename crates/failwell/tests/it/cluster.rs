//! Breakers shared by four `failwell serve` processes (`[cluster]`), each
//! with 64 relay workers, against one simulator that goes dead and comes
//! back: the whole cluster stops after the threshold, one probe per open
//! period reaches the provider, every process closes within 200 ms of the
//! probe that succeeded, and no message is lost. Then the same with the
//! shared store itself going away.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use failwell_sim::Simulator;
use serde_json::Value;

use crate::helpers::{Gateway, SETTLE, free_port, postgres_schema, simulator};

/// `cluster_failures`: failures anywhere that open the breaker everywhere.
const THRESHOLD: u64 = 20;
/// The open period (fixed: `max_open_ms` is the same).
const OPEN_MS: u64 = 1_500;
const PROCESSES: usize = 4;

fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

fn provider_settings() -> String {
    format!(
        "max_attempts = 20\ndeadline_ms = 120000\n\
         breaker = {{ open_ms = {OPEN_MS}, max_open_ms = {OPEN_MS}, cluster_failures = {THRESHOLD}, \
         cluster_window_ms = 30000 }}"
    )
}

fn cluster_section(url: &str, namespace: &str) -> String {
    format!("[cluster]\nurl = \"{url}\"\nnamespace = \"{namespace}\"\nresync_ms = 300\n")
}

async fn start_cluster(sim: &Simulator, url: &str) -> Vec<Gateway> {
    start_cluster_with(sim, url, "").await
}

/// As [`start_cluster`], with `extra` lines in `[providers.payments]`.
async fn start_cluster_with(sim: &Simulator, url: &str, extra: &str) -> Vec<Gateway> {
    let namespace = format!("it-{}", free_port());
    let settings = format!("{}\n{extra}", provider_settings());
    let mut gateways = Vec::new();
    for _ in 0..PROCESSES {
        gateways
            .push(Gateway::start_with(&sim.base_url(), &settings, &cluster_section(url, &namespace)).await);
    }
    gateways
}

/// The payments breaker's state in one process.
async fn breaker_state(gateway: &Gateway) -> String {
    payments_breaker(gateway).await["state"].as_str().unwrap_or_default().to_owned()
}

/// The payments breaker as `GET /v1/providers` shows it.
async fn payments_breaker(gateway: &Gateway) -> Value {
    gateway.get_json("/v1/providers").await["providers"][0]["breaker"].clone()
}

/// Waits until every process has shown the breaker in `state` (each may
/// move on afterwards), at most `limit`.
async fn all_show(gateways: &[Gateway], state: &str, limit: Duration) {
    let started = Instant::now();
    let mut seen = vec![false; gateways.len()];
    while seen.iter().any(|s| !s) {
        for (i, gateway) in gateways.iter().enumerate() {
            seen[i] = seen[i] || breaker_state(gateway).await == state;
        }
        assert!(started.elapsed() < limit, "not every process showed {state}: {seen:?}");
    }
}

/// The time of day (s) of the last "circuit breaker closed" line of `log`
/// that contains `reason`.
fn last_close(log: &str, reason: &str) -> Option<f64> {
    let line = log.lines().rev().find(|l| l.contains("circuit breaker closed") && l.contains(reason))?;
    // `2026-11-30T06:36:07.192841Z …`, after the colour codes.
    let stamp = line.split('T').nth(1)?.split('Z').next()?;
    let mut parts = stamp.split(':').map(|p| p.parse::<f64>().ok());
    Some(parts.next()?? * 3600.0 + parts.next()?? * 60.0 + parts.next()??)
}

/// Submits charges round-robin to the processes until `stop`, about one
/// per 4 ms; returns the references.
fn submit_until(
    gateways: Arc<Vec<Gateway>>,
    stop: Arc<AtomicBool>,
    prefix: &'static str,
) -> tokio::task::JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        let mut keys = Vec::new();
        let n = AtomicUsize::new(0);
        while !stop.load(Ordering::Acquire) && keys.len() < 5_000 {
            let i = n.fetch_add(1, Ordering::Relaxed);
            let key = format!("{prefix}-{i:05}");
            let response = gateways[i % gateways.len()].charge(&key, 100 + i as u64).await;
            let status = response.status().as_u16();
            assert!(status == 201 || status == 202, "{key}: {status} {}", response.text().await.unwrap());
            keys.push(key);
            tokio::time::sleep(Duration::from_millis(4)).await;
        }
        keys
    })
}

async fn all_settled(gateways: &[Gateway], keys: &[String], sim: &Simulator) {
    let mut settled = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        settled.push(gateways[i % gateways.len()].settled(key, SETTLE).await);
    }
    let effects = sim.effects();
    assert_eq!(effects.double_effects(), 0);
    for (key, op) in keys.iter().zip(&settled) {
        // A settled charge either went through once or was declined
        // (the simulator declines some amounts): never lost, never twice.
        let expected = u64::from(op["status"] == "succeeded");
        assert_eq!(effects.by_reference[key].effects, expected, "{key}: {op:#}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_stop_together_probe_once_per_period_and_close_together() {
    four_processes(&redis_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_share_a_breaker_through_postgres() {
    four_processes(&postgres_schema().await).await;
}

async fn four_processes(url: &str) {
    let sim = simulator(|_| {}).await;
    let gateways = Arc::new(start_cluster(&sim, url).await);
    let stop = Arc::new(AtomicBool::new(false));
    let load = submit_until(gateways.clone(), stop.clone(), "c4");
    tokio::time::sleep(Duration::from_secs(1)).await;

    // The provider goes dead under load.
    let refused_before = sim.effects().refused;
    sim.set_down(true);
    all_show(&gateways, "open", Duration::from_secs(10)).await;
    // The simulator counts a refusal after its latency (1-5 ms): calls that
    // arrived before every process was open are all counted 100 ms later,
    // long before the first probe (1.5 s).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let received = sim.effects().refused - refused_before;
    assert!(
        received <= THRESHOLD + PROCESSES as u64,
        "the dead provider got {received} calls before every process had the breaker open (threshold {THRESHOLD}, \
         {PROCESSES} processes)\n{}",
        gateways[0].log()
    );
    assert!(received >= THRESHOLD, "the breaker opened after only {received} failures");

    // Dead for four more open periods: one probe per period, cluster-wide.
    let watch_from = Instant::now();
    let mut probes: Vec<Instant> = Vec::new();
    let mut seen = sim.effects().refused;
    while watch_from.elapsed() < Duration::from_millis(4 * OPEN_MS) {
        let now = sim.effects().refused;
        assert!(
            now <= seen + 1,
            "{} probes at once; {}",
            now - seen,
            gateways
                .iter()
                .map(Gateway::log)
                .filter(|l| l.contains("degraded"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        if now > seen {
            probes.push(Instant::now());
            seen = now;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(probes.len() >= 2, "the probes stopped: {}", probes.len());
    assert!(probes.len() as u64 <= 4 + 1, "{} probes in 4 open periods", probes.len());
    for pair in probes.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(gap >= Duration::from_millis(OPEN_MS - 100), "two probes {gap:?} apart");
    }

    // The provider recovers: the next probe succeeds and every process
    // closes within 200 ms of it (by the processes' own log lines, so the
    // time the API takes to answer under the backlog is not counted).
    sim.set_down(false);
    all_show(&gateways, "closed", Duration::from_secs(5)).await;
    let logs: Vec<String> = gateways.iter().map(Gateway::log).collect();
    let probed = logs.iter().filter_map(|log| last_close(log, "probe succeeded")).collect::<Vec<_>>();
    assert_eq!(probed.len(), 1, "one process closed by its own probe");
    let closes: Vec<f64> = logs.iter().map(|log| last_close(log, "closed").unwrap() - probed[0]).collect();
    eprintln!(
        "calls to the dead provider before every process opened: {received} (threshold {THRESHOLD}); probes in \
         {} ms: {}; closed after the successful probe (s): {closes:?}",
        4 * OPEN_MS,
        probes.len()
    );
    assert!(closes.iter().all(|c| (0.0..=0.2).contains(c)), "closed {closes:?} s after the probe");

    // Nothing was lost: every charge submitted, before, during and after
    // the outage, settled, with exactly one effect when it succeeded.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Release);
    let keys = load.await.unwrap();
    all_settled(&gateways, &keys, &sim).await;
}

/// A `redis-server` of the test's own, to kill and start again.
struct OwnRedis {
    port: u16,
    child: tokio::process::Child,
}

impl OwnRedis {
    async fn start(port: u16) -> Self {
        let child = tokio::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server must be installed (Debian package redis-server)");
        let started = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(started.elapsed() < Duration::from_secs(5), "redis-server did not start on {port}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Self { port, child }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

/// `failwell_cluster_degraded` of one process, from `GET /metrics`.
async fn degraded(gateway: &Gateway) -> Option<f64> {
    let text =
        gateway.http.get(format!("{}/metrics", gateway.base)).send().await.unwrap().text().await.unwrap();
    text.lines()
        .find(|l| l.starts_with("failwell_cluster_degraded"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

async fn wait_degraded(gateways: &[Gateway], value: f64) {
    let started = Instant::now();
    for gateway in gateways {
        while degraded(gateway).await != Some(value) {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "failwell_cluster_degraded never became {value}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_mid_run_degrades_and_recovers_without_losing_a_message() {
    let sim = simulator(|_| {}).await;
    let port = free_port();
    let mut redis = OwnRedis::start(port).await;
    let namespace = "it-redis-stop";
    let mut gateways = Vec::new();
    for _ in 0..2 {
        let section = cluster_section(&redis.url(), namespace);
        gateways.push(Gateway::start_with(&sim.base_url(), &provider_settings(), &section).await);
    }
    let gateways = Arc::new(gateways);
    wait_degraded(&gateways, 0.0).await;
    let stop = Arc::new(AtomicBool::new(false));
    let load = submit_until(gateways.clone(), stop.clone(), "rs");
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Redis dies (SIGKILL of the server this test started): both processes
    // notice, log it, expose it, and keep delivering on their own breakers.
    redis.child.kill().await.unwrap();
    wait_degraded(&gateways, 1.0).await;
    let delivered = sim.effects().charges;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(sim.effects().charges > delivered, "charges kept flowing while Redis was down");
    for gateway in gateways.iter() {
        assert!(gateway.log().contains("running degraded"), "{}", gateway.log());
    }

    // Redis is back (empty): both processes share again.
    let _redis = OwnRedis::start(port).await;
    wait_degraded(&gateways, 0.0).await;
    for gateway in gateways.iter() {
        assert!(gateway.log().contains("reachable again"), "{}", gateway.log());
        assert_eq!(breaker_state(gateway).await, "closed");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Release);
    let keys = load.await.unwrap();
    all_settled(&gateways, &keys, &sim).await;
    for gateway in gateways.iter() {
        let health = gateway.http.get(format!("{}/healthz", gateway.base)).send().await.unwrap();
        assert!(health.status().is_success(), "the process is alive");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_asked_for_stops_every_process_without_spending_attempts() {
    let sim = simulator(|config| config.retry_after_secs = 2).await;
    sim.script("rl-first", vec![failwell_sim::Fault::RateLimited]);
    // By default one 429 holds back only its own message; this
    // configuration asks for a pause of every call on each one.
    let gateways = start_cluster_with(&sim, &redis_url(), "pause = { when = \"always\" }").await;
    let limited = gateways[0].charge("rl-first", 100).await;
    assert!(limited.status().is_success());
    let started = Instant::now();
    while sim.effects().requests == 0 {
        assert!(started.elapsed() < Duration::from_secs(5), "the first charge never arrived");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let limited_at = Instant::now();
    // Charges submitted to every other process (once the 429's answer has
    // reached failwell and been shared) wait for the Retry-After.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let breaker = payments_breaker(&gateways[1]).await;
    let paused_ms = breaker["paused_ms"].as_u64().unwrap();
    assert!((1_000..=2_000).contains(&paused_ms), "another process shows the pause: {breaker}");
    let mut keys = Vec::new();
    for (i, gateway) in gateways.iter().enumerate().skip(1) {
        for j in 0..5 {
            let key = format!("rl-{i}-{j}");
            assert!(gateway.charge(&key, 1_000 + 10 * j).await.status().is_success());
            keys.push((i, key));
        }
    }
    while sim.effects().requests == 1 {
        assert!(limited_at.elapsed() < Duration::from_secs(5), "nothing was sent after the pause");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let paused_for = limited_at.elapsed();
    assert!(paused_for >= Duration::from_millis(1_900), "the next call came {paused_for:?} after the 429");
    assert_eq!(breaker_state(&gateways[1]).await, "closed", "a pause is not a trip");
    for (i, key) in &keys {
        let op = gateways[*i].settled(key, SETTLE).await;
        assert_eq!(op["status"], "succeeded", "{op:#}");
        assert_eq!(op["attempts"], 1, "waiting out a pause spends no attempt: {op:#}");
    }
    let first = gateways[0].settled("rl-first", SETTLE).await;
    assert_eq!(first["status"], "succeeded", "{first:#}");
}

#[tokio::test]
async fn transport_errors_in_a_row_pause_the_provider() {
    // Nothing listens at this address: every call is refused at connect.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let settings = "max_attempts = 50\npause = { after_errors = 3, for_ms = 2000 }\n\
                    breaker = { enabled = true, minimum_calls = 1000, window_calls = 1000 }";
    let gateway = Gateway::start(&dead, settings).await;
    let keys: Vec<String> = (0..10).map(|i| format!("te-{i}")).collect();
    for key in &keys {
        assert!(gateway.charge(key, 500).await.status().is_success());
    }
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let mut starts = Vec::new();
    for key in &keys {
        let op = gateway.operation(key).await;
        for call in crate::helpers::calls(&op) {
            starts.push(call["started_at_ms"].as_i64().unwrap());
        }
    }
    starts.sort();
    let first = starts[0];
    // The burst before the third refusal paused everyone, then two quiet
    // seconds (without the pause: a call every 20–200 ms per message).
    let quiet = starts.iter().filter(|s| (first + 300..first + 1_800).contains(*s)).count();
    assert_eq!(quiet, 0, "calls during the pause: {starts:?}");
    assert!(starts.iter().any(|s| *s >= first + 1_900), "calls resumed after the pause: {starts:?}");
}
