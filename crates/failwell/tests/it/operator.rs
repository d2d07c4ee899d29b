//! Operator tools against the real binary: `failwell reconcile run`
//! resolving unknowns and reporting a silently changed record to the alert
//! sink, the four numbers in `failwell status` and `/metrics` against the
//! database, the dead-letter tools, and the admin API's token.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::routing::post;
use failwell_sim::{Fault, Simulator};
use serde_json::Value;
use tokio::process::Command;

use crate::helpers::{Gateway, binary, simulator};

const TOKEN: &str = "test-admin-token-0123456789abcdef-xyz";

/// A JSON webhook that keeps every body it is sent.
struct Sink {
    url: String,
    received: Arc<Mutex<Vec<Value>>>,
}

impl Sink {
    async fn start() -> Sink {
        let received: Arc<Mutex<Vec<Value>>> = Arc::default();
        let keep = received.clone();
        let app = axum::Router::new().route(
            "/hooks/secret-path",
            post(move |Json(body): Json<Value>| async move {
                keep.lock().unwrap().push(body);
                "ok"
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks/secret-path", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Sink { url, received }
    }

    fn bodies(&self) -> Vec<Value> {
        self.received.lock().unwrap().clone()
    }
}

/// The config tail: comparison, alerts to `sink`, the admin token.
fn tail(sink: &Sink) -> String {
    format!(
        "[providers.payments.compare]\n\n[alerts]\nwebhook_url = \"{}\"\n\n[admin]\ntoken = \"{TOKEN}\"\n",
        sink.url
    )
}

/// Runs `failwell ARGS --config CONFIG`; returns exit code, stdout, stderr.
async fn cli(gateway: &Gateway, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(binary()).args(args).arg("--config").arg(&gateway.config).output().await.unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Polls `key` until its status is no longer `pending`.
async fn not_pending(gateway: &Gateway, key: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let op = gateway.operation(key).await;
        if op["status"] != "pending" {
            return op;
        }
        assert!(Instant::now() < deadline, "{key} stays pending: {op:#}\n{}", gateway.log());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The value of the metric line `name{label="value"}` in a scrape.
fn metric(scrape: &str, series: &str) -> f64 {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no {series} in\n{scrape}"))
}

async fn scrape(gateway: &Gateway) -> String {
    gateway.http.get(format!("{}/metrics", gateway.base)).send().await.unwrap().text().await.unwrap()
}

async fn charge_id(sim: &Simulator, http: &reqwest::Client, reference: &str) -> String {
    let list: Value = http
        .get(format!("{}/v1/charges?reference={reference}", sim.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    list["data"][0]["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn reconcile_run_resolves_every_unknown_and_reports_the_one_changed_record() {
    let sim = simulator(|_| {}).await;
    let sink = Sink::start().await;
    // One attempt each, so a lost answer leaves the operation unknown; the
    // background reconciler is slowed down so `reconcile run` is what
    // resolves them.
    let gateway = Gateway::start_edited(
        &sim.base_url(),
        "max_attempts = 1\nreconcile_after_ms = 300",
        &tail(&sink),
        |t| t.replace("[reconciler]\ninterval_ms = 50", "[reconciler]\ninterval_ms = 3600000"),
    )
    .await;
    let charged = ["lost-charged-1", "lost-charged-2", "lost-charged-3"];
    let not_charged = ["lost-not-charged-1", "lost-not-charged-2"];
    let fine = ["fine-1", "fine-2", "fine-3", "fine-changed"];
    for key in charged {
        sim.script(key, vec![Fault::ResetAfterCommit]);
    }
    for key in not_charged {
        sim.script(key, vec![Fault::ResetBeforeCommit]);
    }
    for key in fine {
        sim.script(key, vec![Fault::Ok]);
    }
    for (i, key) in charged.iter().chain(&not_charged).chain(&fine).enumerate() {
        assert!(gateway.charge(key, 1_000 + 100 * i as u64).await.status().is_success());
    }
    for key in charged.iter().chain(&not_charged) {
        assert_eq!(not_pending(&gateway, key).await["status"], "unknown", "{key}");
    }
    for key in fine {
        assert_eq!(not_pending(&gateway, key).await["status"], "succeeded", "{key}");
    }
    let scraped = scrape(&gateway).await;
    assert_eq!(metric(&scraped, "failwell_operations_unknown{integration=\"payments\"}"), 5.0);

    // The provider silently changes one record.
    let changed = charge_id(&sim, &gateway.http, "fine-changed").await;
    let r = gateway
        .http
        .patch(format!("{}/_sim/charges/{changed}", sim.base_url()))
        .json(&serde_json::json!({"amount": 999_999}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    let (code, out, err) = cli(&gateway, &["reconcile", "run", "--window", "1h", "--json"]).await;
    assert_eq!(code, 1, "a discrepancy was found: exit 1\n{out}\n{err}");
    let run: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(run["still_unknown"], 0, "{run:#}");
    assert!(run["looked_up"].as_u64().unwrap() >= 5, "{run:#}");
    for key in charged {
        let op = gateway.operation(key).await;
        assert_eq!(op["status"], "succeeded", "{key}: found at the provider\n{op:#}");
        assert_eq!(op["provider_ref"].as_str(), Some(charge_id(&sim, &gateway.http, key).await.as_str()));
    }
    for key in not_charged {
        let op = gateway.operation(key).await;
        assert_eq!(
            (op["status"].as_str(), op["dead_letter"].as_bool()),
            (Some("failed"), Some(true)),
            "{key}: {op:#}"
        );
    }
    let comparisons = run["comparisons"].as_array().unwrap();
    assert_eq!(comparisons.len(), 1, "{run:#}");
    assert_eq!(comparisons[0]["discrepancies"], 1, "{run:#}");
    let report_id = comparisons[0]["report_id"].as_i64().unwrap();

    // Exactly one discrepancy, in the stored report and at the sink.
    let report: Value = gateway
        .http
        .get(format!("{}/admin/v1/reports/{report_id}", gateway.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let found = report["report"]["discrepancies"].as_array().unwrap();
    assert_eq!(found.len(), 1, "{report:#}");
    assert_eq!(
        (found[0]["kind"].as_str(), found[0]["reference"].as_str(), found[0]["provider_ref"].as_str()),
        (Some("amount_mismatch"), Some("fine-changed"), Some(changed.as_str()))
    );
    assert_eq!(report["theirs"], 7, "the provider's records: 3 charged after all + 4: {report:#}");
    assert!(report["alerted_at_ms"].is_i64(), "{report:#}");
    let alerts = sink.bodies();
    assert_eq!(alerts.len(), 1, "{alerts:#?}");
    assert!(
        alerts[0]["text"].as_str().unwrap().contains("amount_mismatch reference fine-changed"),
        "{alerts:#?}"
    );
    assert_eq!(alerts[0]["failwell"]["discrepancies"].as_array().unwrap().len(), 1);
    assert_eq!(alerts[0]["failwell"]["report_id"], report_id);

    let scraped = scrape(&gateway).await;
    for (series, value) in [
        ("failwell_operations_unknown{integration=\"payments\"}", 0.0),
        ("failwell_dead_letters{integration=\"payments\"}", 2.0),
        ("failwell_dead_letters_unacknowledged{integration=\"payments\"}", 2.0),
        ("failwell_outbox_depth{integration=\"payments\"}", 0.0),
        ("failwell_comparison_discrepancies{provider=\"payments\"}", 1.0),
    ] {
        assert_eq!(metric(&scraped, series), value, "{series}");
    }

    // The history tells the story of a resolved unknown step by step.
    let (code, out, _) = cli(&gateway, &["ops", "show", "lost-charged-1"]).await;
    assert_eq!(code, 0);
    let steps: Vec<&str> = out.lines().skip(2).collect();
    assert!(steps[0].contains("api") && steps[0].contains("created"), "{out}");
    assert!(out.contains("pending -> unknown") && out.contains("unknown -> succeeded"), "{out}");
    assert!(out.lines().any(|l| l.contains("reconciler") && l.contains("lookup")), "{out}");
    // Every charge that happened happened once.
    let effects = sim.effects();
    for key in charged.iter().chain(&fine) {
        assert_eq!(effects.by_reference[*key].effects, 1, "{key}");
    }
    for key in not_charged {
        assert!(effects.by_reference.get(key).is_none_or(|e| e.effects == 0), "{key}");
    }
}
