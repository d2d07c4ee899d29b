//! The integration manifest at work: what a user action meets while the
//! provider is unavailable, per operation, and `failwell check`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use failwell_sim::Profile;

use crate::helpers::{Gateway, SETTLE, binary, problem, simulator};

/// A gateway whose charge is declared `on_unavailable = answer`, with a
/// breaker that opens for `open_ms` after 3 failures in a row, against the
/// simulator in its outage profile (503 to everything for `outage`);
/// returns once the breaker is open.
async fn unavailable(answer: &str, open_ms: u64, outage: Duration) -> (failwell_sim::Simulator, Gateway) {
    let sim = simulator(|c| (c.profile, c.outage) = (Profile::Outage, outage)).await;
    let breaker = format!(
        "breaker = {{ consecutive_failures = 3, failure_rate = 0, open_ms = {open_ms}, max_open_ms = {open_ms} }}"
    );
    let tail = format!("on_unavailable = \"{answer}\"\n");
    let gw = Gateway::start_with(&sim.base_url(), &breaker, &tail).await;
    for key in ["trip-1", "trip-2", "trip-3"] {
        assert_eq!(gw.charge(key, 1000).await.status(), 201, "accepted while the breaker was closed");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let providers: Value =
            gw.http.get(format!("{}/v1/providers", gw.base)).send().await.unwrap().json().await.unwrap();
        if providers["providers"][0]["breaker"]["state"] == "open" {
            break;
        }
        assert!(Instant::now() < deadline, "the breaker did not open: {providers:#}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (sim, gw)
}

#[tokio::test]
async fn reject_answers_503_at_once_and_records_nothing() {
    let (sim, gw) = unavailable("reject", 60_000, Duration::from_secs(600)).await;
    let calls = sim.effects().requests;
    let r = gw.charge("new-1", 1000).await;
    assert_eq!(r.headers()["retry-after"], "60", "the breaker's open period");
    let body = problem(r, 503, "provider-unavailable").await;
    assert!(body["detail"].as_str().unwrap().contains("nothing was recorded"), "{body:#}");
    let missing = gw.http.get(format!("{}/v1/operations/new-1", gw.base)).send().await.unwrap();
    assert_eq!(missing.status(), 404, "nothing recorded");
    // An operation recorded before is still answered as a replay.
    assert_eq!(gw.charge("trip-1", 1000).await.status(), 200);
    assert_eq!(sim.effects().requests, calls, "no provider call");
    // The breaker's own counters reach /metrics (created before the server).
    let metrics = gw.http.get(format!("{}/metrics", gw.base)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("failwell_breaker_transitions_total"), "{metrics}");
    assert!(metrics.contains("failwell_breaker_rejected_total{breaker=\"payments\"}"), "{metrics}");
    // `degrade` has no cache to answer a write from: it rejects the same way.
    let (_sim, degrade) = unavailable("degrade", 60_000, Duration::from_secs(600)).await;
    problem(degrade.charge("new-2", 1000).await, 503, "provider-unavailable").await;
}

#[tokio::test]
async fn queue_accepts_with_202_and_delivers_after_recovery() {
    let (sim, gw) = unavailable("queue", 1_000, Duration::from_secs(3)).await;
    let r = gw.charge("queued-1", 1000).await;
    assert_eq!(r.status(), 202);
    assert_eq!(r.headers()["location"], "/v1/operations/queued-1");
    // The outage ends: the next probe finds the provider back, and
    // everything waiting is delivered.
    for key in ["trip-1", "trip-2", "trip-3", "queued-1"] {
        let op = gw.settled(key, SETTLE).await;
        assert_eq!(op["status"], "succeeded", "{op:#}");
        assert_eq!(sim.effects().by_reference[key].effects, 1);
    }
}

#[test]
fn check_prints_the_four_answers_and_refuses_a_rule_breaker() {
    let out = std::process::Command::new(binary())
        .args(["check", "--config", concat!(env!("CARGO_MANIFEST_DIR"), "/../../failwell.toml")])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&out.stderr));
    for line in [
        "payments.charge: POST http://127.0.0.1:9090/v1/charges",
        "1. when unavailable   queue: accepted (202)",
        "2. a duplicate costs  money",
        "3. disagreement       list_by_reference: GET /v1/charges?reference=REFERENCE",
        "4. retries            failwell: up to 8 attempts",
        "worst case         a hanging provider holds 32 calls for 2000 ms each: at most 16 calls/s reach it",
    ] {
        assert!(text.contains(line), "{line:?} not in:\n{text}");
    }
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    let example =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../failwell.toml")).unwrap();
    let refused = example.replace(
        "disagreement = { reconcile = \"list_by_reference\" }",
        "disagreement = { reconcile = \"none\" }",
    );
    assert_ne!(refused, example);
    std::fs::write(&bad, refused).unwrap();
    let out = std::process::Command::new(binary()).args(["check", "--config"]).arg(&bad).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("rule money-needs-reconciliation"), "{stderr}");
}

/// Read operations of the simulator's charges: `find` degrades to a stale
/// answer up to 1.5 s old, `find_strict` rejects.
const READS: &str = r#"
[providers.payments.operations.find]
method = "GET"
path = "/v1/charges"
encoding = "json"
reference_field = "reference"
on_unavailable = "degrade"
max_stale_ms = 1500

[providers.payments.operations.find_strict]
method = "GET"
path = "/v1/charges"
encoding = "json"
reference_field = "reference"
"#;

#[tokio::test]
async fn degrade_serves_a_stale_answer_marked_stale_then_rejects_past_its_age() {
    let sim = simulator(|_| {}).await;
    let gw = Gateway::start_with(&sim.base_url(), "", READS).await;
    assert_eq!(gw.charge("d1", 1000).await.status(), 201);
    gw.settled("d1", SETTLE).await;
    let read = |operation: &'static str| {
        let (http, base) = (gw.http.clone(), gw.base.clone());
        async move { http.get(format!("{base}/v1/read/payments/{operation}?reference=d1")).send().await.unwrap() }
    };
    let fresh = read("find").await;
    assert_eq!(fresh.status(), 200);
    assert!(fresh.headers().get("warning").is_none());
    let fresh: Value = fresh.json().await.unwrap();
    assert_eq!(
        (&fresh["stale"], &fresh["response"]["data"][0]["status"]),
        (&json!(false), &json!("succeeded"))
    );
    sim.set_down(true);
    let stale = read("find").await;
    assert_eq!(stale.status(), 200);
    assert_eq!(stale.headers()["warning"], "110 - \"Response is Stale\"");
    assert!(stale.headers().contains_key("age"));
    let stale: Value = stale.json().await.unwrap();
    assert_eq!(stale["stale"], true);
    assert_eq!(stale["response"], fresh["response"], "the last-known-good answer");
    // A read declared `reject` gets no stale answer.
    problem(read("find_strict").await, 503, "provider-unavailable").await;
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let too_old = read("find").await;
    assert!(too_old.headers().contains_key("retry-after"));
    let body = problem(too_old, 503, "provider-unavailable").await;
    assert!(body["detail"].as_str().unwrap().contains("no answer young enough"), "{body:#}");
    // Reads are never queued.
    let queued = gw
        .http
        .post(format!("{}/v1/operations", gw.base))
        .header("Idempotency-Key", "r1")
        .json(&json!({"provider": "payments", "operation": "find", "payload": {"reference": "d1"}}))
        .send()
        .await
        .unwrap();
    problem(queued, 422, "read-operation").await;
}

#[tokio::test]
async fn reconcile_none_hands_an_unknown_outcome_to_a_human() {
    let sim = simulator(|_| {}).await;
    let tail = "duplicate_severity = \"message\"\ndisagreement = { reconcile = \"none\" }\n";
    let gw = Gateway::start_with(&sim.base_url(), "max_attempts = 1", tail).await;
    sim.script("n1", vec![failwell_sim::Fault::ResetAfterCommit]);
    assert_eq!(gw.charge("n1", 1000).await.status(), 201);
    let deadline = Instant::now() + SETTLE;
    let op = loop {
        let op = gw.operation("n1").await;
        if op["last_error"].as_str().is_some_and(|e| e.contains("reconcile = \"none\"")) {
            break op;
        }
        assert!(Instant::now() < deadline, "{op:#}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert_eq!(op["status"], "needs_human", "{op:#}");
    let lookups = op["history"].as_array().unwrap().iter().filter(|a| a["kind"] == "lookup").count();
    assert_eq!(lookups, 0, "never looked up: {op:#}");
    // Never retried either: one call, however long it stays there.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let op = gw.operation("n1").await;
    assert_eq!((op["status"].as_str(), op["attempts"].as_u64()), (Some("needs_human"), Some(1)), "{op:#}");
    assert_eq!(sim.effects().by_reference["n1"].effects, 1);
}
