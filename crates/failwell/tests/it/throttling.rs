//! Throttling slows the sender down instead of stopping it: a 429 holds back
//! the message that got it, the adaptive rate settles under a provider's
//! limit, and only persistent throttling pauses every call.

use std::time::{Duration, Instant};

use failwell_sim::{Fault, RateLimit, RateScope, Simulator};
use serde_json::Value;

use crate::helpers::{Gateway, SETTLE, calls, simulator};

/// The `payments` entry of `GET /v1/providers`.
async fn payments(gw: &Gateway) -> Value {
    let r: Value =
        gw.http.get(format!("{}/v1/providers", gw.base)).send().await.unwrap().json().await.unwrap();
    r["providers"].as_array().unwrap().iter().find(|p| p["name"] == "payments").unwrap().clone()
}

fn end_ms(call: &Value) -> i64 {
    call["started_at_ms"].as_i64().unwrap() + call["duration_ms"].as_i64().unwrap()
}

/// Polls `GET /v1/providers` until the provider has been paused, failing
/// after `within`; returns how long it was paused in all, ms.
async fn paused_total_ms(gw: &Gateway, within: Duration) -> u64 {
    let deadline = Instant::now() + within;
    loop {
        let provider = payments(gw).await;
        let total = provider["breaker"]["paused_total_ms"].as_u64().unwrap();
        if total > 0 {
            return total;
        }
        assert!(Instant::now() < deadline, "never paused: {provider:#}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls until `done` holds, failing after `within`.
async fn until(within: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A simulator whose 429s ask for `retry_after_secs`, failwell with the
/// provider lines `extra`, and a charge `limited` the provider answers 429
/// once.
async fn one_429(retry_after_secs: u64, extra: &str) -> (Simulator, Gateway) {
    let sim = simulator(|c| c.retry_after_secs = retry_after_secs).await;
    let gw = Gateway::start(&sim.base_url(), extra).await;
    sim.script("limited", vec![Fault::RateLimited]);
    assert_eq!(gw.charge("limited", 1_000).await.status(), 201);
    (sim, gw)
}

#[tokio::test]
async fn a_single_429_holds_back_only_its_own_message() {
    let (sim, gw) = one_429(5, "max_retry_after_ms = 10000").await;
    until(Duration::from_secs(10), "the 429 was never answered", || sim.effects().rate_limited == 1).await;
    let keys: Vec<String> = (0..10).map(|i| format!("other-{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        // 201: the provider is not unavailable (202 would say it was).
        assert_eq!(gw.charge(key, 1_000 + 10 * i as u64).await.status(), 201);
    }
    let mut others = Vec::new();
    for key in &keys {
        let op = gw.settled(key, SETTLE).await;
        assert_eq!(op["status"], "succeeded", "{op:#}");
        assert_eq!(calls(&op).len(), 1, "{op:#}");
        others.push(op);
    }
    let provider = payments(&gw).await;
    assert_eq!(provider["breaker"]["paused_total_ms"], 0, "one 429 paused the provider: {provider:#}");
    let limited = gw.settled("limited", SETTLE).await;
    assert_eq!(limited["status"], "succeeded", "{limited:#}");
    let limited_calls = calls(&limited);
    assert_eq!(limited_calls[0]["status_code"], 429);
    let held_until = end_ms(&limited_calls[0]) + 5_000;
    assert!(
        limited_calls[1]["started_at_ms"].as_i64().unwrap() >= held_until,
        "the throttled message waited its own Retry-After: {limited:#}"
    );
    // Every other charge was made while the throttled one was held back.
    for op in &others {
        let started = calls(op)[0]["started_at_ms"].as_i64().unwrap();
        assert!(started < held_until, "a charge waited for another message's Retry-After: {op:#}");
    }
    assert_eq!(sim.effects().double_effects(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_a_rate_limit_the_calls_slow_down_and_every_charge_succeeds_once() {
    let sim =
        simulator(|c| c.rate_limit = Some(RateLimit { per_second: 50, scope: RateScope::Global })).await;
    let gw = Gateway::start(&sim.base_url(), "max_attempts = 20\nretry_budget = { ratio = 1.0 }").await;
    let keys: Vec<String> = (0..300).map(|i| format!("rl-{i:03}")).collect();
    for (i, key) in keys.iter().enumerate() {
        assert!(gw.charge(key, 1_000 + 10 * i as u64).await.status().is_success());
    }
    for key in &keys {
        let op = gw.settled(key, Duration::from_secs(60)).await;
        assert_eq!(op["status"], "succeeded", "{op:#}");
    }
    let effects = sim.effects();
    assert_eq!(effects.charges, 300);
    assert_eq!(effects.double_effects(), 0);
    // The adaptive rate found the limit: few calls were refused. Without it
    // (`throttle = { enabled = false }`, `pause = { when = "never" }`), 38 %
    // of this run's calls were. With it, the refusals are the ones that tell
    // it where the limit is: those before the first cut, and about
    // `cut_after` whenever the CUBIC curve probes above the limit again, a
    // few seconds after a cut. That was 2–6 % of the calls on an idle
    // machine and up to 8.5 % beside three busy processes a core, where the
    // charges trickle in and the first cut comes later. (How the first cut
    // is measured is tested in the policy's throttle tests.)
    let share = effects.rate_limited as f64 / effects.requests as f64;
    assert!(share < 0.15, "{} of {} requests answered 429", effects.rate_limited, effects.requests);
}

#[tokio::test]
async fn throttling_that_persists_pauses_the_provider() {
    // Every call but one a second is refused: most recent answers throttle.
    let sim = simulator(|c| c.rate_limit = Some(RateLimit { per_second: 1, scope: RateScope::Global })).await;
    let gw = Gateway::start(
        &sim.base_url(),
        "max_attempts = 50\nretry_budget = { ratio = 1.0 }\nthrottle = { min_rate_per_s = 100 }",
    )
    .await;
    for i in 0..20 {
        assert!(gw.charge(&format!("p-{i}"), 1_000 + 10 * i).await.status().is_success());
    }
    paused_total_ms(&gw, Duration::from_secs(20)).await;
}

#[tokio::test]
async fn pause_when_always_pauses_on_every_throttling_answer() {
    let (_sim, gw) = one_429(2, "pause = { when = \"always\" }").await;
    let total = paused_total_ms(&gw, Duration::from_secs(10)).await;
    assert!((1_500..=2_000).contains(&total), "paused {total} ms for a Retry-After of 2 s");
    assert_eq!(gw.settled("limited", SETTLE).await["status"], "succeeded");
}
