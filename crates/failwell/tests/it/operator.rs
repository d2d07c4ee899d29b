//! Operator tools against the real binary: `failwell reconcile run`
//! resolving unknowns and reporting a silently changed record to the alert
//! sink, the four numbers in `failwell status` and `/metrics` against the
//! database, the dead-letter tools, and the admin API's token.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::routing::post;
use failwell_sim::{Fault, Simulator};
use serde_json::Value;
use tokio::process::Command;

use crate::helpers::{Gateway, binary, simulator};

pub(crate) const TOKEN: &str = "test-admin-token-0123456789abcdef-xyz";

/// A JSON webhook that keeps every body it is sent; while `hang` is set it
/// never answers (a request still counts in `arrived`).
pub(crate) struct Sink {
    pub(crate) url: String,
    received: Arc<Mutex<Vec<Value>>>,
    pub(crate) hang: Arc<AtomicBool>,
    pub(crate) arrived: Arc<AtomicUsize>,
}

impl Sink {
    pub(crate) async fn start() -> Sink {
        let received: Arc<Mutex<Vec<Value>>> = Arc::default();
        let (hang, arrived): (Arc<AtomicBool>, Arc<AtomicUsize>) = Default::default();
        let (keep, hangs, count) = (received.clone(), hang.clone(), arrived.clone());
        let app = axum::Router::new().route(
            "/hooks/secret-path",
            post(move |Json(body): Json<Value>| async move {
                count.fetch_add(1, Ordering::SeqCst);
                if hangs.load(Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
                keep.lock().unwrap().push(body);
                "ok"
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks/secret-path", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Sink { url, received, hang, arrived }
    }

    pub(crate) fn bodies(&self) -> Vec<Value> {
        self.received.lock().unwrap().clone()
    }
}

/// The config tail: comparison, alerts to `sink`, the admin token.
pub(crate) fn tail(sink: &Sink) -> String {
    format!(
        "[providers.payments.compare]\n\n[alerts]\nwebhook_url = \"{}\"\n\n[admin]\ntoken = \"{TOKEN}\"\n",
        sink.url
    )
}

/// Runs `failwell ARGS --config CONFIG`; returns exit code, stdout, stderr.
pub(crate) async fn cli(gateway: &Gateway, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(binary()).args(args).arg("--config").arg(&gateway.config).output().await.unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Polls `key` until its status is no longer `pending`.
pub(crate) async fn not_pending(gateway: &Gateway, key: &str) -> Value {
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

/// `GET /admin/v1{path}` with the token, as JSON.
pub(crate) async fn admin_get(gateway: &Gateway, path: &str) -> Value {
    let url = format!("{}/admin/v1{path}", gateway.base);
    gateway.http.get(url).bearer_auth(TOKEN).send().await.unwrap().json().await.unwrap()
}

pub(crate) async fn scrape(gateway: &Gateway) -> String {
    gateway.http.get(format!("{}/metrics", gateway.base)).send().await.unwrap().text().await.unwrap()
}

pub(crate) async fn charge_id(sim: &Simulator, http: &reqwest::Client, reference: &str) -> String {
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
        // Pages of 3 records: the provider's 7 come in three pages.
        |t| {
            t.replace("[reconciler]\ninterval_ms = 50", "[reconciler]\ninterval_ms = 3600000")
                .replace("[providers.payments.compare]\n", "[providers.payments.compare]\npage_size = 3\n")
        },
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

    for window in ["0s", "367days", "500000000y"] {
        let (code, _, err) = cli(&gateway, &["reconcile", "run", "--window", window]).await;
        assert_eq!(code, 2, "--window {window}: {err}");
        assert!(err.contains("between 1 ms and 366 days"), "{err}");
    }
    assert_eq!(metric(&scrape(&gateway).await, "failwell_operations_unknown{integration=\"payments\"}"), 5.0);
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
    let report: Value = admin_get(&gateway, &format!("/reports/{report_id}")).await;
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

    // Every series the shipped alert rules and dashboard read is exposed.
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
    let rules = std::fs::read_to_string(deploy.join("prometheus/alerts.yml")).unwrap();
    let dashboard = std::fs::read_to_string(deploy.join("grafana/failwell.json")).unwrap();
    let parsed: Value = serde_json::from_str(&dashboard).unwrap();
    assert!(parsed["panels"].as_array().is_some_and(|p| p.len() >= 7));
    let mut names: Vec<&str> = Vec::new();
    for text in [&rules, &dashboard] {
        for (start, _) in text.match_indices("failwell_") {
            let name = &text[start..];
            let end = name.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(name.len());
            names.push(&name[..end]);
        }
    }
    assert!(names.len() >= 10, "{names:?}");
    for name in names {
        assert!(
            scraped.lines().any(|l| l.starts_with(&format!("{name}{{"))),
            "{name} is not on /metrics:\n{scraped}"
        );
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

/// `(open messages, oldest open created_at_ms, dead letters)` read straight
/// from the database.
async fn database_truth(gateway: &Gateway) -> (i64, Option<i64>, i64) {
    let url = format!("sqlite://{}", gateway.dir.path().join("failwell.db").display());
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let row: (i64, Option<i64>, i64) = sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM outbox WHERE state = 'pending'), \
         (SELECT MIN(created_at_ms) FROM outbox WHERE state = 'pending'), \
         (SELECT COUNT(*) FROM outbox WHERE state = 'dead')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    pool.close().await;
    row
}

#[tokio::test]
async fn status_and_metrics_agree_with_the_database_and_dead_letters_can_be_worked_off() {
    let sim = simulator(|_| {}).await;
    let sink = Sink::start().await;
    let mut gateway = Gateway::start_with(
        &sim.base_url(),
        "max_attempts = 1\nbackoff = { schedule_ms = [60000] }",
        &tail(&sink),
    )
    .await;
    // Three dead letters: one 503 each with a single attempt.
    for key in ["dead-1", "dead-2", "dead-3"] {
        sim.script(key, vec![Fault::Error503]);
        assert!(gateway.charge(key, 1_000).await.status().is_success());
        assert_eq!(gateway.settled(key, crate::helpers::SETTLE).await["status"], "failed");
    }
    // Four open messages: the provider is down, and a retry waits a minute.
    gateway.terminate().await;
    let text =
        std::fs::read_to_string(&gateway.config).unwrap().replace("max_attempts = 1", "max_attempts = 3");
    std::fs::write(&gateway.config, text).unwrap();
    gateway.spawn().await;
    sim.set_down(true);
    for key in ["open-1", "open-2", "open-3", "open-4"] {
        assert!(gateway.charge(key, 1_000).await.status().is_success());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let (depth, oldest, dead) = database_truth(&gateway).await;
    assert_eq!((depth, dead), (4, 3));
    let (code, out, err) = cli(&gateway, &["status", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let status: Value = serde_json::from_str(&out).unwrap();
    let payments = &status["integrations"][0];
    assert_eq!(payments["integration"], "payments");
    assert_eq!((payments["depth"].as_i64(), payments["dead_letters"].as_i64()), (Some(depth), Some(dead)));
    assert_eq!(payments["dead_letters_unacked"], 3);
    // The age is exact against the moment the numbers were taken.
    assert_eq!(
        payments["oldest_open_age_ms"].as_i64(),
        Some(status["at_ms"].as_i64().unwrap() - oldest.unwrap())
    );
    let (code, table, _) = cli(&gateway, &["status"]).await;
    assert_eq!(code, 0);
    let row = table.lines().find(|l| l.starts_with("payments")).unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    // … OPEN, OLDEST OPEN (a number and its unit), UNKNOWN, HUMAN, DEAD, DEAD UNACKED.
    let n = cells.len();
    assert_eq!(
        [cells[n - 7], cells[n - 4], cells[n - 3], cells[n - 2], cells[n - 1]],
        ["4", "0", "0", "3", "3"],
        "{table}"
    );

    let before = failwell_engine::now_ms();
    let scraped = scrape(&gateway).await;
    let after = failwell_engine::now_ms();
    assert_eq!(metric(&scraped, "failwell_outbox_depth{integration=\"payments\"}"), depth as f64);
    assert_eq!(metric(&scraped, "failwell_dead_letters{integration=\"payments\"}"), dead as f64);
    let age = metric(&scraped, "failwell_outbox_oldest_age_seconds{integration=\"payments\"}");
    let (low, high) = ((before - oldest.unwrap()) as f64 / 1e3, (after - oldest.unwrap()) as f64 / 1e3);
    assert!((low..=high).contains(&age), "{low} <= {age} <= {high}");

    // Acknowledging resets "since the last look" everywhere.
    let (code, _, _) = cli(&gateway, &["dlq", "ack"]).await;
    assert_eq!(code, 0);
    let scraped = scrape(&gateway).await;
    assert_eq!(metric(&scraped, "failwell_dead_letters_unacknowledged{integration=\"payments\"}"), 0.0);
    assert_eq!(metric(&scraped, "failwell_dead_letters{integration=\"payments\"}"), 3.0);

    // List, show, purge one, replay one (delivered once the provider is back).
    let (code, out, _) = cli(&gateway, &["dlq", "list", "--json"]).await;
    assert_eq!(code, 0);
    let letters: Value = serde_json::from_str(&out).unwrap();
    let id_of = |key: &str| {
        letters.as_array().unwrap().iter().find(|l| l["key"] == key).unwrap()["id"]
            .as_i64()
            .unwrap()
            .to_string()
    };
    let (dead1, dead2) = (id_of("dead-1"), id_of("dead-2"));
    let (code, out, _) = cli(&gateway, &["dlq", "show", "message", &dead1]).await;
    assert_eq!(code, 0);
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (shown["payload"]["reference"].as_str(), shown["attempts"].as_u64()),
        (Some("dead-1"), Some(1))
    );
    assert!(shown["last_error"].as_str().unwrap().contains("503"), "{shown:#}");
    let (code, _, _) = cli(&gateway, &["dlq", "purge", "message", &dead2]).await;
    assert_eq!(code, 0);
    let (code, _, err) = cli(&gateway, &["dlq", "purge", "message", &dead2]).await;
    assert_eq!(code, 1, "purged twice: {err}");
    assert!(err.contains("is not a dead letter"), "{err}");
    sim.set_down(false);
    let (code, _, _) = cli(&gateway, &["dlq", "replay", "message", &dead1]).await;
    assert_eq!(code, 0);
    let op = gateway.settled("dead-1", crate::helpers::SETTLE).await;
    assert_eq!(op["status"], "succeeded", "{op:#}");
    assert_eq!(sim.effects().by_reference["dead-1"].effects, 1);
    let (_, timeline, _) = cli(&gateway, &["ops", "show", "dead-1"]).await;
    assert!(
        timeline.lines().any(|l| l.contains("operator:cli")
            && l.contains("dead -> pending")
            && l.ends_with("— replayed by operator:cli")),
        "{timeline}"
    );
    let (_, timeline, _) = cli(&gateway, &["ops", "show", "dead-2"]).await;
    assert!(
        timeline.lines().any(|l| l.contains("operator:cli") && l.contains("purged — purged by operator:cli")),
        "{timeline}"
    );
    let (depth, _, dead) = database_truth(&gateway).await;
    let scraped = scrape(&gateway).await;
    assert_eq!(metric(&scraped, "failwell_dead_letters{integration=\"payments\"}"), dead as f64);
    assert_eq!(dead, 1, "dead-3 is left");
    assert_eq!(metric(&scraped, "failwell_outbox_depth{integration=\"payments\"}"), depth as f64);

    // A missing database is an error, never a new empty one.
    let elsewhere = gateway.dir.path().join("elsewhere.toml");
    let text = std::fs::read_to_string(&gateway.config).unwrap().replace("failwell.db", "missing.db");
    std::fs::write(&elsewhere, text).unwrap();
    let out = Command::new(binary()).args(["status", "--config"]).arg(&elsewhere).output().await.unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("there is no database at"));
    assert!(!gateway.dir.path().join("missing.db").exists());
    // Nor is a database failwell never used (an empty file, an empty
    // PostgreSQL schema) turned into one.
    std::fs::write(gateway.dir.path().join("other.db"), b"").unwrap();
    let schema_url = crate::helpers::postgres_schema().await;
    for (database, check) in [("other.db", None), ("", Some(&schema_url))] {
        let text = std::fs::read_to_string(&gateway.config).unwrap();
        let text = match check {
            None => text.replace("failwell.db", database),
            Some(url) => crate::helpers::on_database(&text, url),
        };
        std::fs::write(&elsewhere, text).unwrap();
        for args in [&["status"][..], &["dlq", "ack"]] {
            let out =
                Command::new(binary()).args(args).arg("--config").arg(&elsewhere).output().await.unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(err.contains("holds no failwell store"), "{err}");
        }
    }
    assert_eq!(std::fs::metadata(gateway.dir.path().join("other.db")).unwrap().len(), 0, "left as it was");
}

#[tokio::test]
async fn an_operator_resolves_what_needs_a_human_and_nothing_else() {
    let sim = simulator(|_| {}).await;
    let tail = format!(
        "duplicate_severity = \"message\"\ndisagreement = {{ reconcile = \"none\" }}\n\n[admin]\ntoken = \"{TOKEN}\"\n"
    );
    let gateway = Gateway::start_with(&sim.base_url(), "max_attempts = 1", &tail).await;
    for key in ["human-1", "human-2"] {
        sim.script(key, vec![Fault::ResetAfterCommit]);
        assert!(gateway.charge(key, 1_000).await.status().is_success());
    }
    sim.script("fine", vec![Fault::Ok]);
    assert!(gateway.charge("fine", 1_000).await.status().is_success());
    assert_eq!(gateway.settled("fine", crate::helpers::SETTLE).await["status"], "succeeded");
    for key in ["human-1", "human-2"] {
        let deadline = Instant::now() + Duration::from_secs(20);
        while gateway.operation(key).await["status"] != "needs_human" {
            assert!(Instant::now() < deadline, "{key}: {:#}", gateway.operation(key).await);
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
    let scraped = scrape(&gateway).await;
    assert_eq!(metric(&scraped, "failwell_operations_needs_human{integration=\"payments\"}"), 2.0);

    let charge = charge_id(&sim, &gateway.http, "human-1").await;
    let (code, out, err) = cli(
        &gateway,
        &[
            "ops",
            "resolve",
            "human-1",
            "--as",
            "succeeded",
            "--provider-ref",
            &charge,
            "--note",
            "seen in the dashboard",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    let op = gateway.operation("human-1").await;
    assert_eq!(
        (op["status"].as_str(), op["provider_ref"].as_str()),
        (Some("succeeded"), Some(charge.as_str()))
    );
    let (_, timeline, _) = cli(&gateway, &["ops", "show", "human-1"]).await;
    assert!(
        timeline.lines().any(|l| l.contains("operator:cli")
            && l.contains("needs_human -> succeeded")
            && l.ends_with("resolved by operator:cli: seen in the dashboard")),
        "{timeline}"
    );
    // Only what failwell could not settle is settled by hand.
    let (code, _, err) = cli(&gateway, &["ops", "resolve", "fine", "--as", "failed", "--note", "x"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("fine is succeeded"), "{err}");
    let (code, _, err) = cli(&gateway, &["ops", "resolve", "human-2", "--as", "maybe", "--note", "x"]).await;
    assert_eq!(code, 2, "{err}");
    let url = format!("{}/admin/v1/operations/human-2/resolve", gateway.base);
    let r = gateway
        .http
        .post(&url)
        .bearer_auth(TOKEN)
        .body(r#"{"status": "failed", "note": ""}"#)
        .send()
        .await
        .unwrap();
    crate::helpers::problem(r, 400, "invalid-body").await;
    let r = gateway.http.post(&url).body(r#"{"status": "failed", "note": "x"}"#).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = gateway
        .http
        .post(&url)
        .bearer_auth(TOKEN)
        .body(r#"{"status": "failed", "note": "the provider has no such charge"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(gateway.operation("human-2").await["status"], "failed");
    let again = gateway
        .http
        .post(&url)
        .bearer_auth(TOKEN)
        .body(r#"{"status": "succeeded", "note": "x"}"#)
        .send()
        .await
        .unwrap();
    crate::helpers::problem(again, 409, "operation-not-open").await;
    let scraped = scrape(&gateway).await;
    assert_eq!(metric(&scraped, "failwell_operations_needs_human{integration=\"payments\"}"), 0.0);
    // Never retried: one call each.
    assert_eq!(sim.effects().by_reference["human-2"].effects, 1);
    assert_eq!(gateway.operation("human-2").await["attempts"], 1);
}
