//! Every fault kind of the simulator, scripted per reference, against the
//! real binary. Each test fails if failwell retried blindly (two effects),
//! lost the operation, or left its outcome unknown.

use std::time::Duration;

use failwell_sim::Fault;
use serde_json::json;

use crate::helpers::{Gateway, SETTLE, calls, lookups, simulator};

/// Submits `key`, waits for its final status, and checks the provider's count.
async fn run(gw: &Gateway, key: &str, amount: u64) -> serde_json::Value {
    assert_eq!(gw.charge(key, amount).await.status(), 201);
    gw.settled(key, SETTLE).await
}

fn same_key_on_every_call(op: &serde_json::Value) {
    let calls = calls(op);
    let first = calls[0]["provider_key"].clone();
    assert!(first.as_str().is_some_and(|k| k.starts_with("fw_")), "{op:#}");
    assert!(calls.iter().all(|c| c["provider_key"] == first), "one intent, one key: {op:#}");
}

#[tokio::test]
async fn timeout_after_commit_is_retried_only_with_the_same_key() {
    let sim = simulator(|_| {}).await;
    let gw = Gateway::start(&sim.base_url(), "").await;
    sim.script("t1", vec![Fault::TimeoutAfterCommit, Fault::TimeoutAfterCommit]);
    let op = run(&gw, "t1", 1000).await;
    assert_eq!(op["status"], "succeeded", "{op:#}");
    assert_eq!(sim.effects().by_reference["t1"].effects, 1, "charged exactly once");
    let calls = calls(&op);
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[0]["error_kind"], "timeout");
    assert_eq!(calls[0]["classification"], "ambiguous");
    assert_eq!(calls[0]["outcome"], "unknown");
    same_key_on_every_call(&op);
    assert!(op["provider_ref"].as_str().is_some_and(|r| r.starts_with("ch_")));
}

#[tokio::test]
async fn reset_after_commit_is_ambiguous_and_charges_once() {
    let sim = simulator(|_| {}).await;
    let gw = Gateway::start(&sim.base_url(), "").await;
    sim.script("r1", vec![Fault::ResetAfterCommit]);
    let op = run(&gw, "r1", 1000).await;
    assert_eq!(op["status"], "succeeded");
    assert_eq!(sim.effects().by_reference["r1"].effects, 1);
    let calls = calls(&op);
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0]["classification"], "ambiguous");
    assert_eq!(calls[0]["status_code"], serde_json::Value::Null, "no response arrived");
    same_key_on_every_call(&op);
}

#[tokio::test]
async fn server_errors_before_commit_are_retried_to_one_effect() {
    let sim = simulator(|_| {}).await;
    let gw = Gateway::start(&sim.base_url(), "").await;
    sim.script("s1", vec![Fault::Error500, Fault::Error502, Fault::Error503]);
    let op = run(&gw, "s1", 1000).await;
    assert_eq!(op["status"], "succeeded");
    assert_eq!(sim.effects().by_reference["s1"].effects, 1);
    let calls = calls(&op);
    let classes: Vec<_> = calls.iter().map(|c| c["classification"].clone()).collect();
    let want = [json!("ambiguous"), json!("ambiguous"), json!("retryable"), json!(null)];
    assert_eq!(classes, want);
    same_key_on_every_call(&op);
}

#[tokio::test]
async fn rate_limit_retry_after_is_honoured() {
    let sim = simulator(|_| {}).await;
    let gw = Gateway::start(&sim.base_url(), "").await;
    sim.script("q1", vec![Fault::RateLimited]);
    let op = run(&gw, "q1", 1000).await;
    assert_eq!(op["status"], "succeeded");
    let calls = calls(&op);
    assert_eq!(calls[0]["status_code"], 429);
    let first_end = calls[0]["started_at_ms"].as_i64().unwrap() + calls[0]["duration_ms"].as_i64().unwrap();
    let second_start = calls[1]["started_at_ms"].as_i64().unwrap();
    assert!(
        second_start - first_end >= 1000,
        "retried {} ms after a Retry-After: 1",
        second_start - first_end
    );
    assert_eq!(sim.effects().by_reference["q1"].effects, 1);
}

#[tokio::test]
async fn declined_card_fails_once_loudly() {
    let sim = simulator(|_| {}).await;
    let gw = Gateway::start(&sim.base_url(), "").await;
    let op = run(&gw, "d1", 1302).await;
    assert_eq!(op["status"], "failed");
    assert_eq!(op["dead_letter"], false);
    assert_eq!(calls(&op).len(), 1, "a permanent error is not retried");
    assert_eq!(calls(&op)[0]["error_kind"], "card_declined");
    assert!(op["last_error"].as_str().unwrap().contains("card_declined"));
    assert_eq!(sim.effects().by_reference["d1"].effects, 0);
}

#[tokio::test]
async fn exhausted_retries_become_a_dead_letter_with_the_last_error() {
    let sim = simulator(|_| {}).await;
    let gw = Gateway::start(&sim.base_url(), "").await;
    sim.script("x1", vec![Fault::Error503; 5]);
    let op = run(&gw, "x1", 1000).await;
    assert_eq!(op["status"], "failed");
    assert_eq!(op["dead_letter"], true);
    assert_eq!(calls(&op).len(), 5, "max_attempts bounds the calls");
    assert!(op["last_error"].as_str().unwrap().contains("HTTP 503"), "{op:#}");
    assert_eq!(sim.effects().by_reference["x1"].effects, 0);
    assert_eq!(gw.counts().await["dead_letters"], 1);
}

#[tokio::test]
async fn expired_key_is_not_retried_but_reconciled_by_lookup() {
    // The provider forgets keys after 400 ms; failwell knows it.
    let sim = simulator(|c| c.key_ttl = Duration::from_millis(400)).await;
    let gw = Gateway::start(&sim.base_url(), "idempotency_key_ttl_ms = 400").await;
    sim.script("e1", vec![Fault::TimeoutAfterCommit]);
    let op = run(&gw, "e1", 1000).await;
    assert_eq!(op["status"], "succeeded", "{op:#}");
    assert_eq!(calls(&op).len(), 1, "no retry under a key the provider no longer honours");
    assert!(!lookups(&op).is_empty());
    assert_eq!(sim.effects().by_reference["e1"].effects, 1);
}

#[tokio::test]
async fn without_idempotency_keys_an_ambiguous_call_is_looked_up_not_retried() {
    let sim = simulator(|_| {}).await;
    let gw = Gateway::start(&sim.base_url(), "idempotency_keys = false").await;
    sim.script("n1", vec![Fault::TimeoutAfterCommit]);
    let op = run(&gw, "n1", 1000).await;
    assert_eq!(op["status"], "succeeded");
    assert_eq!(calls(&op).len(), 1, "never a blind retry");
    assert_eq!(lookups(&op)[0]["decision"], "found at provider: succeeded");
    assert_eq!(sim.effects().by_reference["n1"].effects, 1);
}

#[tokio::test]
async fn a_lookup_that_finds_nothing_delivers_again() {
    let sim = simulator(|_| {}).await;
    let gw = Gateway::start(&sim.base_url(), "idempotency_keys = false").await;
    // 502 is ambiguous: without keys failwell must ask before trying again.
    sim.script("l1", vec![Fault::Error502]);
    let op = run(&gw, "l1", 1000).await;
    assert_eq!(op["status"], "succeeded", "{op:#}");
    assert_eq!(calls(&op).len(), 2);
    let lookups = lookups(&op);
    assert_eq!(lookups[0]["decision"], "not found at provider yet: look again before delivering again");
    assert!(lookups[1]["decision"].as_str().unwrap().starts_with("not found at provider: deliver again"));
    assert_eq!(sim.effects().by_reference["l1"].effects, 1);
}

#[tokio::test]
async fn unknown_outcome_waits_while_the_provider_is_down_and_then_resolves() {
    let sim = simulator(|_| {}).await;
    let gw = Gateway::start(&sim.base_url(), "idempotency_keys = false").await;
    sim.script("u1", vec![Fault::TimeoutAfterCommit]);
    assert_eq!(gw.charge("u1", 1000).await.status(), 201);
    // Wait until the timeout made it unknown, then take the provider down.
    let deadline = std::time::Instant::now() + SETTLE;
    while gw.operation("u1").await["status"] != "unknown" {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    sim.set_down(true);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let op = gw.operation("u1").await;
    assert_eq!(op["status"], "unknown", "a failed lookup keeps it unknown, visibly");
    // Failed lookups count against the provider: after a few, its breaker
    // opens and lookups wait for it.
    let error = op["last_error"].as_str().unwrap();
    assert!(
        error.contains("status lookup failed") || error.contains("not looked up: circuit breaker"),
        "{op:#}"
    );
    sim.set_down(false);
    let op = gw.settled("u1", SETTLE).await;
    assert_eq!(op["status"], "succeeded");
    assert_eq!(calls(&op).len(), 1);
    assert_eq!(sim.effects().by_reference["u1"].effects, 1);
}

#[tokio::test]
async fn connection_refused_is_retried_even_for_writes() {
    // Nothing listens on this port until the simulator is started on it.
    let port = crate::helpers::free_port();
    let gw = Gateway::start(&format!("http://127.0.0.1:{port}"), "max_attempts = 50").await;
    assert_eq!(gw.charge("c1", 1000).await.status(), 201);
    let deadline = std::time::Instant::now() + SETTLE;
    while calls(&gw.operation("c1").await).len() < 2 {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let op = gw.operation("c1").await;
    assert_eq!(calls(&op)[0]["error_kind"], "connect");
    assert_eq!(calls(&op)[0]["classification"], "retryable");
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let sim = failwell_sim::Simulator::start(
        failwell_sim::SimConfig::new(failwell_sim::Profile::Calm, 1),
        listener,
    )
    .await
    .unwrap();
    let op = gw.settled("c1", SETTLE).await;
    assert_eq!(op["status"], "succeeded");
    assert_eq!(sim.effects().by_reference["c1"].effects, 1);
}

#[tokio::test]
async fn a_retry_due_after_the_key_expired_is_looked_up_first_and_sent_under_a_new_key() {
    // Retry-After (1 s) outlasts the provider's key lifetime (400 ms).
    let sim = simulator(|c| c.key_ttl = Duration::from_millis(400)).await;
    let gw = Gateway::start(&sim.base_url(), "idempotency_key_ttl_ms = 400").await;
    sim.script("k1", vec![Fault::RateLimited]);
    let op = run(&gw, "k1", 1000).await;
    assert_eq!(op["status"], "succeeded", "{op:#}");
    let history = op["history"].as_array().unwrap();
    let kinds: Vec<&str> = history.iter().map(|h| h["kind"].as_str().unwrap()).collect();
    // skipped, then asked twice (no live key protects the resend), then sent anew
    assert_eq!(kinds, ["call", "skipped", "lookup", "lookup", "call"], "{op:#}");
    assert_eq!(history[1]["error_kind"], "key_expired");
    let calls = calls(&op);
    assert_ne!(calls[0]["provider_key"], calls[1]["provider_key"], "a forgotten key is not reused");
    assert_eq!(op["key_group"], 1);
    assert_eq!(op["attempts"], 2, "a skipped attempt is not a call");
    assert_eq!(sim.effects().by_reference["k1"].effects, 1);
}

#[tokio::test]
async fn a_retryable_failure_after_an_ambiguous_one_never_resends_under_an_expired_key() {
    // The reset may have charged; the 429s then push the retry past the key's life.
    let sim = simulator(|c| c.key_ttl = Duration::from_millis(1500)).await;
    let gw = Gateway::start(&sim.base_url(), "idempotency_key_ttl_ms = 1500").await;
    sim.script("a1", vec![Fault::ResetAfterCommit, Fault::RateLimited, Fault::RateLimited]);
    let op = run(&gw, "a1", 1000).await;
    assert_eq!(op["status"], "succeeded", "{op:#}");
    assert_eq!(sim.effects().by_reference["a1"].effects, 1, "{op:#}");
    assert!(lookups(&op).iter().any(|l| l["decision"] == "found at provider: succeeded"), "{op:#}");
}

#[tokio::test]
async fn running_out_of_attempts_after_an_ambiguous_one_asks_the_provider_instead_of_failing() {
    let sim = simulator(|_| {}).await;
    let gw = Gateway::start(&sim.base_url(), "max_attempts = 2").await;
    // the timeout charged; the 503 that follows must not make it "failed"
    sim.script("m1", vec![Fault::TimeoutAfterCommit, Fault::Error503]);
    let op = run(&gw, "m1", 1000).await;
    assert_eq!(op["status"], "succeeded", "{op:#}");
    assert_eq!(op["dead_letter"], false);
    assert_eq!(lookups(&op).last().unwrap()["decision"], "found at provider: succeeded");
    assert_eq!(sim.effects().by_reference["m1"].effects, 1);
}

#[tokio::test]
async fn without_keys_a_miss_is_confirmed_before_resending_so_a_late_commit_is_found() {
    // The provider commits 1.2 s after the request, long after failwell's
    // 500 ms timeout and its first lookup (at ~1 s).
    let sim = simulator(|c| c.hang = Duration::from_millis(1200)).await;
    let gw = Gateway::start(&sim.base_url(), "idempotency_keys = false\nreconcile_after_ms = 500").await;
    sim.script("late1", vec![Fault::LateCommit]);
    let op = run(&gw, "late1", 1000).await;
    assert_eq!(op["status"], "succeeded", "{op:#}");
    assert_eq!(calls(&op).len(), 1, "no resend: {op:#}");
    let lookups = lookups(&op);
    assert_eq!(lookups[0]["decision"], "not found at provider yet: look again before delivering again");
    assert_eq!(lookups.last().unwrap()["decision"], "found at provider: succeeded");
    assert_eq!(sim.effects().by_reference["late1"].effects, 1);
}

#[tokio::test]
async fn out_of_attempts_a_miss_is_confirmed_before_giving_up_so_a_late_commit_is_found() {
    let sim = simulator(|c| c.hang = Duration::from_millis(1200)).await;
    let gw = Gateway::start(&sim.base_url(), "max_attempts = 1\nreconcile_after_ms = 500").await;
    sim.script("late2", vec![Fault::LateCommit]);
    let op = run(&gw, "late2", 1000).await;
    assert_eq!(op["status"], "succeeded", "charged, so never reported failed: {op:#}");
    assert_eq!(op["dead_letter"], false);
    assert_eq!(lookups(&op).last().unwrap()["decision"], "found at provider: succeeded");
    assert_eq!(sim.effects().by_reference["late2"].effects, 1);
}

#[tokio::test]
async fn a_dead_provider_opens_the_breaker_and_messages_wait_without_spending_attempts() {
    let sim = simulator(|_| {}).await;
    sim.set_down(true);
    // Open periods longer than the second a message waits when it is
    // deferred while a probe is out: by the next probe those messages are
    // due, and the last probe's message, which waits for the period, is not.
    let breaker =
        "breaker = { consecutive_failures = 3, failure_rate = 0, open_ms = 1500, max_open_ms = 1500 }";
    let gw = Gateway::start(&sim.base_url(), breaker).await;
    let keys: Vec<String> = (0..20).map(|i| format!("b{i}")).collect();
    for key in &keys {
        // 202 once the breaker is open: accepted, queued (the manifest's default).
        let status = gw.charge(key, 1000).await.status().as_u16();
        assert!(matches!(status, 201 | 202), "{status}");
    }
    // Down for 4 s: without the breaker, 5 attempts 20-200 ms apart would
    // have dead-lettered every one of them within about a second.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let providers: serde_json::Value =
        gw.http.get(format!("{}/v1/providers", gw.base)).send().await.unwrap().json().await.unwrap();
    let state = providers["providers"][0]["breaker"]["state"].as_str().unwrap().to_owned();
    assert!(state == "open" || state == "half_open", "{providers:#}");
    let requests = sim.effects().requests;
    // The first wave went out before the breaker opened; after that only
    // probes, one per open period.
    assert!(requests <= 20 + 8, "{requests} calls reached a dead provider");
    // Only the first calls (before the breaker opened) and the probes are
    // attempts: while the breaker is open the relay does not claim the
    // provider's messages at all, and a deferral (a call the breaker
    // refused after the claim) gives its attempt back. A failed probe's
    // message waits behind the others, so no message carries two probes
    // (calls a second or more after the first wave): one would otherwise
    // spend its attempts on every probe of an outage and be dead-lettered
    // by it.
    let mut ops = Vec::new();
    for key in &keys {
        ops.push(gw.operation(key).await);
    }
    let started = |op: &serde_json::Value| -> Vec<i64> {
        calls(op).iter().map(|c| c["started_at_ms"].as_i64().unwrap()).collect()
    };
    let first_wave = ops.iter().flat_map(started).min().unwrap();
    let mut probes = 0;
    let mut single = 0;
    for op in &ops {
        assert_eq!(op["status"], "pending", "{op:#}");
        let made = calls(op).len();
        assert_eq!(op["attempts"], made, "a deferral spent an attempt: {op:#}");
        let carried = started(op).iter().filter(|&&at| at >= first_wave + 1_000).count();
        assert!(carried <= 1, "one message carried {carried} probes: {op:#}");
        probes += carried;
        if made == 0 {
            assert!(
                op["last_error"].is_null() || op["last_error"].as_str().unwrap().starts_with("deferred: "),
                "{op:#}"
            );
        }
        if made <= 1 {
            single += 1;
        }
    }
    assert!(probes >= 1, "no probe in 4 s of 1.5 s open periods");
    assert!(single >= 14, "only {single} of 20 messages waited without spending attempts");
    sim.set_down(false);
    for key in &keys {
        let op = gw.settled(key, SETTLE).await;
        assert_eq!(op["status"], "succeeded", "{op:#}");
        assert_eq!(sim.effects().by_reference[key.as_str()].effects, 1);
    }
    assert_eq!(gw.counts().await["dead_letters"], 0);
}

#[tokio::test]
async fn a_fixed_schedule_spaces_the_retries() {
    let sim = simulator(|_| {}).await;
    let gw = Gateway::start(&sim.base_url(), "backoff = { schedule_ms = [150, 400] }").await;
    sim.script("s1", vec![Fault::Error500, Fault::Error500, Fault::Ok]);
    let op = run(&gw, "s1", 1000).await;
    assert_eq!(op["status"], "succeeded", "{op:#}");
    let started: Vec<i64> = calls(&op).iter().map(|c| c["started_at_ms"].as_i64().unwrap()).collect();
    assert_eq!(started.len(), 3, "{op:#}");
    assert!(started[1] - started[0] >= 150, "{started:?}");
    assert!(started[2] - started[1] >= 400, "{started:?}");
    assert_eq!(sim.effects().by_reference["s1"].effects, 1);
}
