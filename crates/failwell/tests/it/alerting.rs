//! What failwell tells an operator on its own: the oldest-open-entry
//! alert, scheduled comparisons and their alerts, at least once across
//! restarts.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use failwell_sim::Fault;
use serde_json::Value;
use tokio::process::Command;

use crate::helpers::{Gateway, binary, simulator};
use crate::operator::{Sink, TOKEN, admin_get, charge_id, scrape, tail};

#[tokio::test]
async fn failwell_raises_the_oldest_open_entry_alert_once_and_resolves_it() {
    let sim = simulator(|_| {}).await;
    let sink = Sink::start().await;
    let alerts = format!(
        "[providers.payments.compare]\n\n[alerts]\nwebhook_url = \"{}\"\noldest_open_age_ms = 1000\ncheck_interval_ms = 100\n",
        sink.url
    );
    let gateway = Gateway::start_with(&sim.base_url(), "max_attempts = 1000", &alerts).await;
    sim.set_down(true);
    assert!(gateway.charge("stuck", 1_000).await.status().is_success());
    let firing = |bodies: &[Value], status: &str| {
        bodies
            .iter()
            .filter(|b| b["failwell"]["kind"] == "oldest_open_age" && b["failwell"]["status"] == status)
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while firing(&sink.bodies(), "firing") == 0 {
        assert!(Instant::now() < deadline, "no alert: {:#?}\n{}", sink.bodies(), gateway.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let raised = sink.bodies().into_iter().find(|b| b["failwell"]["status"] == "firing").unwrap();
    assert_eq!(raised["failwell"]["integration"], "payments");
    assert!(raised["failwell"]["oldest_open_age_seconds"].as_f64().unwrap() > 1.0, "{raised:#}");
    assert!(raised["text"].as_str().unwrap().contains("oldest open entry of payments"), "{raised:#}");
    // Still old a while later: raised once, not on every check.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(firing(&sink.bodies(), "firing"), 1);
    sim.set_down(false);
    assert_eq!(gateway.settled("stuck", crate::helpers::SETTLE).await["status"], "succeeded");
    let deadline = Instant::now() + Duration::from_secs(15);
    while firing(&sink.bodies(), "resolved") == 0 {
        assert!(Instant::now() < deadline, "not resolved: {:#?}", sink.bodies());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(firing(&sink.bodies(), "firing"), 1);
}

#[tokio::test]
async fn a_restarted_failwell_resolves_the_age_alert_an_earlier_process_raised() {
    let sim = simulator(|_| {}).await;
    let sink = Sink::start().await;
    let alerts = format!(
        "[providers.payments.compare]\n\n[alerts]\nwebhook_url = \"{}\"\noldest_open_age_ms = 1000\ncheck_interval_ms = 100\n",
        sink.url
    );
    let mut gateway = Gateway::start_with(&sim.base_url(), "max_attempts = 1000", &alerts).await;
    sim.set_down(true);
    assert!(gateway.charge("stuck", 1_000).await.status().is_success());
    // Sent at least once: a kill between the sink's answer and the record
    // of it sends the alert again, under the same `alert_id`.
    let count = |status: &str| {
        let bodies = sink.bodies();
        let ids: std::collections::BTreeSet<i64> = bodies
            .iter()
            .filter(|b| b["failwell"]["status"] == status)
            .map(|b| b["failwell"]["alert_id"].as_i64().expect("every alert names its alert_id"))
            .collect();
        ids.len()
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while count("firing") == 0 {
        assert!(Instant::now() < deadline, "no alert: {}", gateway.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The process dies while the alert fires; the next one starts after the
    // provider is back and delivers the entry.
    gateway.kill().await;
    sim.set_down(false);
    gateway.spawn().await;
    assert_eq!(gateway.settled("stuck", crate::helpers::SETTLE).await["status"], "succeeded");
    let deadline = Instant::now() + Duration::from_secs(15);
    while count("resolved") == 0 {
        assert!(Instant::now() < deadline, "never resolved: {:#?}", sink.bodies());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!((count("firing"), count("resolved")), (1, 1), "{:#?}", sink.bodies());
}

#[tokio::test]
async fn the_scheduled_comparison_reports_a_changed_record_once() {
    let sim = simulator(|_| {}).await;
    let sink = Sink::start().await;
    let tail = format!(
        "[providers.payments.compare]\nschedule = \"every 2s\"\n\n[alerts]\nwebhook_url = \"{}\"\n\n[admin]\ntoken = \"{TOKEN}\"\n",
        sink.url
    );
    let gateway = Gateway::start_with(&sim.base_url(), "", &tail).await;
    for key in ["sched-1", "sched-2", "sched-changed"] {
        sim.script(key, vec![Fault::Ok]);
        assert!(gateway.charge(key, 1_000).await.status().is_success());
        assert_eq!(gateway.settled(key, crate::helpers::SETTLE).await["status"], "succeeded");
    }
    let created = gateway.operation("sched-changed").await["created_at_ms"].as_i64().unwrap();
    let changed = charge_id(&sim, &gateway.http, "sched-changed").await;
    let r = gateway
        .http
        .patch(format!("{}/_sim/charges/{changed}", sim.base_url()))
        .json(&serde_json::json!({"status": "failed"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Wait for the window holding the charges and two windows after it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let reports = loop {
        let listed = admin_get(&gateway, "/reports?limit=200").await;
        let reports = listed["reports"].as_array().unwrap().clone();
        let after = reports.iter().filter(|r| r["window_from_ms"].as_i64().unwrap() > created).count();
        if after >= 2 {
            break reports;
        }
        assert!(Instant::now() < deadline, "{listed:#}\n{}", gateway.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(reports.iter().all(|r| r["actor"] == "schedule"), "{reports:#?}");
    let holding: Vec<&Value> = reports
        .iter()
        .filter(|r| {
            (r["window_from_ms"].as_i64().unwrap()..r["window_to_ms"].as_i64().unwrap()).contains(&created)
        })
        .collect();
    assert_eq!(holding.len(), 1, "consecutive windows: {reports:#?}");
    let found: u64 = reports.iter().map(|r| r["discrepancies"].as_u64().unwrap()).sum();
    assert_eq!(found, 1, "judged once, in its own window: {reports:#?}");
    assert_eq!(holding[0]["discrepancies"], 1);
    assert_eq!(holding[0]["report"]["discrepancies"][0]["kind"], "status_mismatch");
    let alerts = sink.bodies();
    assert_eq!(alerts.len(), 1, "{alerts:#?}");
    assert_eq!(alerts[0]["failwell"]["discrepancies"][0]["reference"], "sched-changed");
}

#[tokio::test]
async fn a_scheduled_comparison_that_cannot_read_the_provider_alerts() {
    let sim = simulator(|_| {}).await;
    let sink = Sink::start().await;
    let tail = format!(
        "[providers.payments.compare]\nschedule = \"every 1s\"\n\n[alerts]\nwebhook_url = \"{}\"\n",
        sink.url
    );
    let gateway = Gateway::start_with(&sim.base_url(), "", &tail).await;
    sim.set_down(true);
    let deadline = Instant::now() + Duration::from_secs(60);
    let failed = loop {
        if let Some(body) = sink.bodies().into_iter().find(|b| b["failwell"]["kind"] == "comparison_failed") {
            break body;
        }
        assert!(Instant::now() < deadline, "no failure alert: {:#?}\n{}", sink.bodies(), gateway.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(failed["failwell"]["provider"], "payments");
    assert!(
        failed["text"].as_str().unwrap().contains("the scheduled comparison of payments failed"),
        "{failed:#}"
    );
    // Back up: the next runs succeed and store their reports.
    sim.set_down(false);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let scraped = scrape(&gateway).await;
        if scraped.lines().any(|l| l.starts_with("failwell_comparison_last_run_timestamp_seconds{")) {
            break;
        }
        assert!(Instant::now() < deadline, "no comparison after recovery\n{}", gateway.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_report_alert_whose_sender_died_is_sent_by_a_running_failwell() {
    let sim = simulator(|_| {}).await;
    let sink = Sink::start().await;
    let tail = tail(&sink).replace("[alerts]\n", "[alerts]\ntimeout_ms = 300\n");
    let gateway = Gateway::start_with(&sim.base_url(), "", &tail).await;
    sim.script("changed", vec![Fault::Ok]);
    assert!(gateway.charge("changed", 1_000).await.status().is_success());
    assert_eq!(gateway.settled("changed", crate::helpers::SETTLE).await["status"], "succeeded");
    let id = charge_id(&sim, &gateway.http, "changed").await;
    let r = gateway
        .http
        .patch(format!("{}/_sim/charges/{id}", sim.base_url()))
        .json(&serde_json::json!({"amount": 5}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // `reconcile run` stores the report and its alert, and dies (kill -9)
    // while the sink keeps it waiting.
    sink.hang.store(true, Ordering::SeqCst);
    let mut run = Command::new(binary())
        .args(["reconcile", "run", "--window", "1h", "--config"])
        .arg(&gateway.config)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while sink.arrived.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the alert was never sent");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    run.kill().await.unwrap();
    sink.hang.store(false, Ordering::SeqCst);
    assert!(sink.bodies().is_empty());

    // The running server sends it once the dead sender's lease is over.
    let deadline = Instant::now() + Duration::from_secs(30);
    while sink.bodies().is_empty() {
        assert!(Instant::now() < deadline, "never sent again:\n{}", gateway.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let bodies = sink.bodies();
    assert_eq!(bodies.len(), 1, "{bodies:#?}");
    assert_eq!(bodies[0]["failwell"]["kind"], "comparison");
    assert!(bodies[0]["text"].as_str().unwrap().contains("amount_mismatch reference changed"), "{bodies:#?}");
    let report_id = bodies[0]["failwell"]["report_id"].as_i64().unwrap();
    let report: Value = admin_get(&gateway, &format!("/reports/{report_id}")).await;
    assert!(report["alerted_at_ms"].is_i64(), "{report:#}");
    assert_eq!(report["alert_error"], Value::Null, "{report:#}");
}

#[tokio::test]
async fn windows_whose_time_came_while_no_server_ran_are_compared_at_start() {
    let sim = simulator(|_| {}).await;
    let tail =
        format!("[providers.payments.compare]\nschedule = \"every 1s\"\n\n[admin]\ntoken = \"{TOKEN}\"\n");
    let mut gateway = Gateway::start_with(&sim.base_url(), "", &tail).await;
    let windows = |reports: &Value| -> Vec<(i64, i64)> {
        let mut w: Vec<(i64, i64)> = reports["reports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["window_from_ms"].as_i64().unwrap(), r["window_to_ms"].as_i64().unwrap()))
            .collect();
        w.sort();
        w
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while windows(&admin_get(&gateway, "/reports?limit=500").await).is_empty() {
        assert!(Instant::now() < deadline, "no scheduled comparison:\n{}", gateway.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // No server for 4 s: four runs of the schedule pass.
    gateway.kill().await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    gateway.spawn().await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let seen = windows(&admin_get(&gateway, "/reports?limit=500").await);
    // Every window from the first to the last, each once: none skipped.
    for pair in seen.windows(2) {
        assert_eq!(pair[0].1, pair[1].0, "a gap or a window twice: {seen:?}");
    }
    assert!(seen.len() >= 6, "{seen:?}");
}
