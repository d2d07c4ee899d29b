//! `kill -9` in the middle of deliveries: after a restart every acknowledged
//! operation is still there and ends with exactly one effect, and calls
//! interrupted by the crash are retried under the same idempotency key.

use std::time::Duration;

use failwell_sim::Fault;

use crate::helpers::{Gateway, calls, simulator};

#[tokio::test]
async fn kill_9_mid_run_loses_nothing_and_charges_once() {
    let sim = simulator(|c| c.hang = Duration::from_secs(2)).await;
    let mut gw = Gateway::start(&sim.base_url(), "").await;
    let keys: Vec<String> = (0..120).map(|i| format!("k-{i:03}")).collect();
    // Every fourth charge hangs after committing, so the crash finds calls in flight.
    for key in keys.iter().step_by(4) {
        sim.script(key, vec![Fault::TimeoutAfterCommit]);
    }
    for key in &keys {
        // 202 if the breaker opened meanwhile: accepted, queued.
        let status = gw.charge(key, 1000).await.status().as_u16();
        assert!(matches!(status, 201 | 202), "{status}");
    }
    // Kill as soon as some (not all) have settled.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let c = gw.counts().await;
        if c["succeeded"].as_u64().unwrap() >= 10 {
            break;
        }
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    gw.kill().await;
    gw.spawn().await;
    for key in &keys {
        let op = gw.settled(key, Duration::from_secs(30)).await;
        assert_eq!(op["status"], "succeeded", "{op:#}");
        assert_eq!(sim.effects().by_reference[key.as_str()].effects, 1, "{key} charged once");
        let calls = calls(&op);
        assert!(calls.iter().all(|c| c["provider_key"] == calls[0]["provider_key"]));
    }
    let counts = gw.counts().await;
    assert_eq!(counts["succeeded"], 120);
    assert_eq!(sim.effects().double_effects(), 0);
}

#[tokio::test]
async fn sigterm_lets_attempts_in_flight_finish_and_exits_cleanly() {
    let sim = simulator(|c| c.hang = Duration::from_secs(2)).await;
    let mut gw = Gateway::start(&sim.base_url(), "").await;
    sim.script("t-1", vec![Fault::TimeoutAfterCommit]);
    assert_eq!(gw.charge("t-1", 1000).await.status(), 201);
    // wait until the call is in flight at the provider
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while sim.effects().requests == 0 {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let status = gw.terminate().await;
    assert!(status.success(), "exit status {status:?}: {}", gw.log());
    gw.spawn().await;
    let op = gw.settled("t-1", Duration::from_secs(20)).await;
    assert_eq!(op["status"], "succeeded");
    // the timed-out attempt was recorded before exit, so it is not an interrupted one
    let history = op["history"].as_array().unwrap();
    assert_eq!(history[0]["error_kind"], "timeout", "{op:#}");
    assert_eq!(sim.effects().by_reference["t-1"].effects, 1);
}
