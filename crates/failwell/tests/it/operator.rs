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

const TOKEN: &str = "test-admin-token-0123456789abcdef-xyz";

/// A JSON webhook that keeps every body it is sent; while `hang` is set it
/// never answers (a request still counts in `arrived`).
struct Sink {
    url: String,
    received: Arc<Mutex<Vec<Value>>>,
    hang: Arc<AtomicBool>,
    arrived: Arc<AtomicUsize>,
}

impl Sink {
    async fn start() -> Sink {
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

/// `GET /admin/v1{path}` with the token, as JSON.
async fn admin_get(gateway: &Gateway, path: &str) -> Value {
    let url = format!("{}/admin/v1{path}", gateway.base);
    gateway.http.get(url).bearer_auth(TOKEN).send().await.unwrap().json().await.unwrap()
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
            Some(url) => text
                .lines()
                .map(|l| {
                    if l.starts_with("database_url") {
                        format!("database_url = \"{url}\"")
                    } else {
                        l.to_owned()
                    }
                })
                .collect::<Vec<_>>()
                .join("\n"),
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
async fn the_admin_api_takes_only_its_token_and_never_shows_it() {
    let sim = simulator(|_| {}).await;
    let sink = Sink::start().await;
    let gateway = Gateway::start_with(&sim.base_url(), "max_attempts = 1", &tail(&sink)).await;
    sim.script("dead", vec![Fault::Error503]);
    assert!(gateway.charge("dead", 1_000).await.status().is_success());
    assert_eq!(gateway.settled("dead", crate::helpers::SETTLE).await["status"], "failed");
    let url = |path: &str| format!("{}/admin/v1{path}", gateway.base);
    let routes = [
        ("GET", "/status"),
        ("GET", "/dead-letters"),
        ("GET", "/dead-letters/message/1"),
        ("POST", "/dead-letters/message/1/replay"),
        ("DELETE", "/dead-letters/message/1"),
        ("POST", "/dead-letters/ack"),
        ("POST", "/reconcile"),
        ("GET", "/operations/dead/history"),
        ("GET", "/reports"),
        ("GET", "/reports/1"),
        // A method a route does not take, a path no route takes.
        ("PUT", "/status"),
        ("GET", "/nope"),
    ];
    for (method, path) in routes {
        for auth in [
            None,
            Some("Bearer wrong-token"),
            Some(&*format!("Bearer {TOKEN}x")),
            Some(&*format!("Basic {TOKEN}")),
        ] {
            let mut request = gateway.http.request(method.parse().unwrap(), url(path));
            if let Some(auth) = auth {
                request = request.header("authorization", auth);
            }
            let r = request.send().await.unwrap();
            assert_eq!(r.headers()["www-authenticate"], "Bearer", "{method} {path}");
            let body = crate::helpers::problem(r, 401, "unauthorized").await;
            assert!(!body.to_string().contains(TOKEN), "{body}");
        }
    }
    for path in ["/admin", "/admin/"] {
        let r = gateway.http.get(format!("{}{path}", gateway.base)).send().await.unwrap();
        crate::helpers::problem(r, 401, "unauthorized").await;
    }
    // The dashboard cannot be framed by another page (clickjacking).
    let login = gateway.http.get(format!("{}/ui/login", gateway.base)).send().await.unwrap();
    assert_eq!(login.headers()["x-frame-options"], "DENY");
    assert!(login.headers()["content-security-policy"].to_str().unwrap().contains("frame-ancestors 'none'"));
    for query in ["?limit=0", "?kind=bogus", "?limit=x"] {
        let r =
            gateway.http.get(url(&format!("/dead-letters{query}"))).bearer_auth(TOKEN).send().await.unwrap();
        crate::helpers::problem(r, 400, "invalid-query").await;
    }
    // With the token, the same bad requests are problems too.
    let r = gateway.http.put(url("/status")).bearer_auth(TOKEN).send().await.unwrap();
    crate::helpers::problem(r, 405, "method-not-allowed").await;
    let r = gateway.http.get(url("/nope")).bearer_auth(TOKEN).send().await.unwrap();
    crate::helpers::problem(r, 404, "not-found").await;
    // Over the 64 KiB default. (A client of its own: the server answers and
    // closes the connection of a body it refused unread, so a client still
    // writing it may see the pipe break first; then it sends again.)
    let huge = vec![b' '; 96 << 10];
    let mut tries = 0;
    let r = loop {
        let sent =
            reqwest::Client::new().post(url("/reconcile")).bearer_auth(TOKEN).body(huge.clone()).send().await;
        match sent {
            Ok(r) => break r,
            Err(e) if tries < 5 && e.is_request() => tries += 1,
            Err(e) => panic!("{e:?}"),
        }
    };
    crate::helpers::problem(r, 413, "body-too-large").await;
    // Nothing happened: the dead letter is still there.
    let listed = admin_get(&gateway, "/dead-letters").await;
    let letters = listed["dead_letters"].as_array().unwrap();
    assert_eq!(letters.len(), 1, "{listed:#}");
    let id = letters[0]["id"].as_i64().unwrap();
    let r = gateway
        .http
        .post(url(&format!("/dead-letters/message/{id}/replay")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let again = gateway
        .http
        .post(url(&format!("/dead-letters/message/{id}/replay")))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    crate::helpers::problem(again, 404, "not-a-dead-letter").await;
    let bad = gateway.http.get(url("/dead-letters/letter/1")).bearer_auth(TOKEN).send().await.unwrap();
    crate::helpers::problem(bad, 404, "not-found").await;
    let bad = gateway
        .http
        .post(url("/reconcile"))
        .bearer_auth(TOKEN)
        .body("{\"window_ms\": 0}")
        .send()
        .await
        .unwrap();
    crate::helpers::problem(bad, 400, "invalid-request").await;
    let bad = gateway.http.get(url("/reports/abc")).bearer_auth(TOKEN).send().await.unwrap();
    crate::helpers::problem(bad, 400, "invalid-path").await;
    let bad = gateway
        .http
        .get(url("/dead-letters/message/99999999999999999999"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    crate::helpers::problem(bad, 400, "invalid-path").await;
    // The scheme name is case-insensitive.
    let upper = gateway
        .http
        .get(url("/status"))
        .header("authorization", format!("BEARER {TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(upper.status(), 200);
    let bad = gateway
        .http
        .post(url("/reconcile"))
        .bearer_auth(TOKEN)
        .body("{\"provider\": \"nope\"}")
        .send()
        .await
        .unwrap();
    crate::helpers::problem(bad, 400, "invalid-request").await;
    let history: Value = gateway
        .http
        .get(url("/operations/dead/history"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let changes: Vec<&str> =
        history["history"].as_array().unwrap().iter().filter_map(|h| h["change"].as_str()).collect();
    assert!(changes.contains(&"dead -> pending"), "{history:#}");
    // Neither the token nor the sink's secret URL shows up in logs or metrics.
    let scraped = scrape(&gateway).await;
    for secret in [TOKEN, "secret-path"] {
        assert!(!gateway.log().contains(secret), "{secret} logged");
        assert!(!scraped.contains(secret), "{secret} in /metrics");
    }
}

/// `chromedriver` (Debian's chromium-driver) on a free port, killed on drop.
struct ChromeDriver {
    _child: tokio::process::Child,
    url: String,
}

impl ChromeDriver {
    async fn start() -> ChromeDriver {
        let port = crate::helpers::free_port();
        let program = std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
        let child = Command::new(&program)
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {program:?} ({e}): the dashboard test needs Debian's chromium and \
                     chromium-driver (`apt-get install chromium chromium-driver`; `cargo xtask test` installs them)"
                )
            });
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while reqwest::get(format!("{url}/status")).await.is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        ChromeDriver { _child: child, url }
    }
}

#[tokio::test]
async fn the_dashboard_shows_the_numbers_and_replays_a_dead_letter_in_a_real_browser() {
    use fantoccini::{ClientBuilder, Locator};

    let sim = simulator(|_| {}).await;
    let sink = Sink::start().await;
    let gateway = Gateway::start_with(&sim.base_url(), "max_attempts = 1", &tail(&sink)).await;
    sim.script("ui-dead", vec![Fault::Error503]);
    assert!(gateway.charge("ui-dead", 1_000).await.status().is_success());
    assert_eq!(gateway.settled("ui-dead", crate::helpers::SETTLE).await["status"], "failed");

    let driver = ChromeDriver::start().await;
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1000"]}),
    );
    let browser = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&driver.url)
        .await
        .expect("a headless Chromium session");

    // Not signed in: the dashboard sends the browser to the sign-in form.
    browser.goto(&format!("{}/ui", gateway.base)).await.unwrap();
    assert_eq!(browser.current_url().await.unwrap().path(), "/ui/login");
    browser.find(Locator::Css("input[name=token]")).await.unwrap().send_keys("not-the-token").await.unwrap();
    browser.find(Locator::Css("button[type=submit]")).await.unwrap().click().await.unwrap();
    let refused = browser.wait().for_element(Locator::Css("p.error")).await.unwrap();
    assert_eq!(refused.text().await.unwrap(), "That is not the admin token.");
    browser.find(Locator::Css("input[name=token]")).await.unwrap().send_keys(TOKEN).await.unwrap();
    browser.find(Locator::Css("button[type=submit]")).await.unwrap().click().await.unwrap();

    let card = browser.wait().for_element(Locator::Id("integration-payments")).await.unwrap();
    let text = card.text().await.unwrap();
    for expected in ["payments", "breaker", "success rate", "p95 latency", "oldest open", "1 of 1"] {
        assert!(text.contains(expected), "{expected:?} not on the card: {text}");
    }
    let row = browser.find(Locator::Css("#dead-letters tr[id^=dead-message-]")).await.unwrap();
    assert!(row.text().await.unwrap().contains("ui-dead"));
    let screenshot = browser.screenshot().await.unwrap();
    assert!(screenshot.starts_with(b"\x89PNG") && screenshot.len() > 10_000, "{} bytes", screenshot.len());
    std::fs::write(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("failwell-ui.png"), &screenshot)
        .unwrap();

    // A page of another origin (another port of this host: the same site,
    // so the SameSite cookie goes along) posts the purge form as it loads:
    // refused, nothing purged.
    let id = row.attr("id").await.unwrap().unwrap().rsplit('-').next().unwrap().to_owned();
    let action = format!("{}/ui/dead-letters/message/{id}/purge", gateway.base);
    let evil = format!(
        "<form id=f method=post action=\"{action}\"></form><script>document.getElementById('f').submit()</script>"
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let evil_url = format!("http://{}/", listener.local_addr().unwrap());
    let app =
        axum::Router::new().route("/", axum::routing::get(move || async move { axum::response::Html(evil) }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    browser.goto(&evil_url).await.unwrap();
    browser.wait().for_url(&reqwest::Url::parse(&action).unwrap()).await.unwrap();
    let refused = browser.find(Locator::Css("p.error")).await.unwrap().text().await.unwrap();
    assert!(refused.contains("nothing was changed"), "{refused}");
    browser.goto(&format!("{}/ui", gateway.base)).await.unwrap();
    let row = browser.find(Locator::Css(&format!("#dead-message-{id}"))).await.expect("not purged");

    // Replay it: the script is spent, so the provider takes it now.
    row.find(Locator::Css("button.replay")).await.unwrap().click().await.unwrap();
    browser.wait().for_element(Locator::Id("no-dead-letters")).await.unwrap();
    let notice = browser.find(Locator::Id("notice")).await.unwrap().text().await.unwrap();
    assert!(notice.starts_with("Replayed"), "{notice}");
    let op = gateway.settled("ui-dead", crate::helpers::SETTLE).await;
    assert_eq!(op["status"], "succeeded", "{op:#}");
    assert_eq!(sim.effects().by_reference["ui-dead"].effects, 1);
    browser.goto(&format!("{}/ui/operations/ui-dead", gateway.base)).await.unwrap();
    let timeline = browser.find(Locator::Id("timeline")).await.unwrap().text().await.unwrap();
    assert!(
        timeline.lines().any(|l| l.contains("operator:ui") && l.contains("dead -> pending")),
        "{timeline}"
    );
    browser.close().await.unwrap();
}

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
    let count = |status: &str| sink.bodies().iter().filter(|b| b["failwell"]["status"] == status).count();
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
