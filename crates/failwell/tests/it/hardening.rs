//! One bad stored row never stops delivery for the others, and what the
//! application stored is what the provider receives: the real `failwell
//! serve` on SQLite and on PostgreSQL.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::HeaderMap;
use failwell_store::{Message, Outbox, SqliteStore, Synchronous};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::process::Command;

use crate::helpers::{Gateway, SETTLE, binary, calls, lookups, postgres_schema, problem, simulator};

const TOKEN: &str = "hardening-admin-token-0123456789abcdef";

/// Starts failwell for the provider at `provider_url` on SQLite, or on a
/// fresh PostgreSQL schema, with the dashboard on; `edit` changes single
/// config lines.
async fn start(provider_url: &str, postgres: bool, edit: fn(&str) -> String) -> Gateway {
    let url = if postgres { Some(postgres_schema().await) } else { None };
    let tail = format!("[admin]\ntoken = \"{TOKEN}\"\n");
    Gateway::start_edited(provider_url, "", &tail, move |text| {
        text.lines()
            .map(|line| match &url {
                Some(url) if line.starts_with("database_url = ") => format!("database_url = \"{url}\""),
                _ => edit(line),
            })
            .collect::<Vec<_>>()
            .join("\n")
    })
    .await
}

/// The `database_url` the gateway's config names.
fn database_url(gateway: &Gateway) -> String {
    let config = std::fs::read_to_string(&gateway.config).unwrap();
    let line = config.lines().find_map(|l| l.strip_prefix("database_url = ")).unwrap();
    line.trim_matches('"').to_string()
}

fn charge(key: &str) -> Message {
    Message {
        idempotency_key: Some(key.into()),
        reference: Some(key.into()),
        ..Message::new("payments", "charge", json!({"amount": 100, "currency": "eur", "reference": key}))
    }
}

/// Writes over a stored payload, as another program could.
const DAMAGE: &str = "UPDATE operations SET payload = $1, effect_possible = $3 WHERE idempotency_key = $2";

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Enqueues `keys` on the stopped gateway's store, then writes `text` over
/// the stored payload of each `damaged` key as another program could (and,
/// with `sent`, marks that an earlier call of it may have left).
async fn enqueue_and_damage(url: &str, keys: &[&str], damaged: &[(&str, String, bool)]) {
    if url.starts_with("sqlite:") {
        let store = SqliteStore::open(url, Synchronous::Normal).await.unwrap();
        for key in keys {
            let mut tx = store.begin().await.unwrap();
            Outbox::enqueue(&mut tx, &charge(key), now_ms()).await.unwrap();
            tx.commit().await.unwrap();
        }
        for (key, text, sent) in damaged {
            sqlx::query(DAMAGE)
                .bind(text)
                .bind(key)
                .bind(i64::from(*sent))
                .execute(store.pool())
                .await
                .unwrap();
        }
        failwell_store::Backend::close(&store).await;
    } else {
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        for key in keys {
            sqlx::query(
                "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, reference) \
                 VALUES ('payments', 'charge', json_build_object('amount', 100, 'currency', 'eur', 'reference', $1), \
                 $1, $1)",
            )
            .bind(key)
            .execute(&pool)
            .await
            .unwrap();
        }
        for (key, text, sent) in damaged {
            sqlx::query(DAMAGE).bind(text).bind(key).bind(i64::from(*sent)).execute(&pool).await.unwrap();
        }
        pool.close().await;
    }
}

/// Signs in to the dashboard; returns the session cookie.
async fn dashboard_session(gateway: &Gateway) -> String {
    let no_redirects =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r = no_redirects
        .post(format!("{}/ui/login", gateway.base))
        .header("Sec-Fetch-Site", "same-origin")
        .form(&[("token", TOKEN)])
        .send()
        .await
        .unwrap();
    let cookie = r.headers()["set-cookie"].to_str().unwrap();
    cookie.split(';').next().unwrap().to_string()
}

async fn dashboard_page(gateway: &Gateway, cookie: &str, path: &str) -> String {
    let r =
        gateway.http.get(format!("{}{path}", gateway.base)).header("Cookie", cookie).send().await.unwrap();
    assert!(r.status().is_success(), "{path}: {}", r.status());
    r.text().await.unwrap()
}

async fn cli(gateway: &Gateway, args: &[&str]) -> String {
    let out = Command::new(binary()).args(args).arg("--config").arg(&gateway.config).output().await.unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "failwell {args:?}: {stderr}");
    stdout.into_owned()
}

/// The poison case: messages pending around two stored payloads failwell
/// cannot read (one not JSON, one nested deeper than it reads). After a
/// restart, every other message is delivered with one call each, the two
/// are dead letters with a last error that says what is wrong, and the
/// status API, `dlq list` and `show`, and the dashboard show them with
/// their stored text.
async fn a_damaged_row_is_set_aside_alone(postgres: bool) {
    let sim = simulator(|_| {}).await;
    let mut gateway = start(&sim.base_url(), postgres, str::to_string).await;
    gateway.terminate().await;
    let innocent: Vec<String> = (0..10).map(|i| format!("order-{i}")).collect();
    let deep = format!("{{\"amount\":{}1{}}}", "[".repeat(300), "]".repeat(300));
    let mut keys: Vec<&str> = innocent.iter().map(String::as_str).collect();
    keys.splice(5..5, ["damaged-text", "damaged-deep", "damaged-sent"]);
    let damaged = [
        ("damaged-text", "{\"amount\": 1,".to_string(), false),
        ("damaged-deep", deep.clone(), false),
        ("damaged-sent", "{\"amount\": ".to_string(), true),
    ];
    enqueue_and_damage(&database_url(&gateway), &keys, &damaged).await;
    gateway.spawn().await;

    // One that may have reached the provider is looked up: found nowhere,
    // it is dead-lettered, never sent again (and never looked up for ever).
    let sent = gateway.settled("damaged-sent", SETTLE).await;
    assert_eq!((&sent["status"], &sent["dead_letter"]), (&json!("failed"), &json!(true)), "{sent:#}");
    assert!(sent["last_error"].as_str().unwrap().contains("never sent again"), "{sent:#}");
    assert!(calls(&sent).is_empty() && (1..=3).contains(&lookups(&sent).len()), "{sent:#}");

    for key in &innocent {
        let op = gateway.settled(key, SETTLE).await;
        assert_eq!(op["status"], "succeeded", "{op:#}");
        assert_eq!(calls(&op).len(), 1, "{key} was called once: {op:#}");
    }
    for (key, text, _) in &damaged[..2] {
        let op = gateway.settled(key, SETTLE).await;
        assert_eq!(
            (&op["status"], &op["dead_letter"], &op["attempts"]),
            (&json!("failed"), &json!(true), &json!(0))
        );
        assert_eq!(op["payload"], json!(text), "the stored text is shown");
        let why = op["unreadable"].as_str().unwrap();
        assert!(why.starts_with("payload: "), "{why}");
        assert_eq!(op["last_error"], format!("stored {why}; set aside, not sent"));
        assert!(calls(&op).is_empty());
    }
    let deep_op = gateway.operation("damaged-deep").await;
    assert!(deep_op["unreadable"].as_str().unwrap().contains("recursion limit exceeded"), "{deep_op:#}");

    let list: Value = serde_json::from_str(&cli(&gateway, &["dlq", "list", "--json"]).await).unwrap();
    let letters = list.as_array().unwrap();
    let mut listed: Vec<&str> = letters.iter().map(|d| d["key"].as_str().unwrap()).collect();
    listed.sort();
    assert_eq!(listed, ["damaged-deep", "damaged-sent", "damaged-text"]);
    let letter = letters.iter().find(|d| d["key"] == "damaged-deep").unwrap();
    assert_eq!(letter["payload"], json!(deep));
    let shown = cli(&gateway, &["dlq", "show", "message", &letter["id"].to_string()]).await;
    assert!(shown.contains("recursion limit exceeded") && shown.contains("[[[[1]]]]"), "{shown}");

    let cookie = dashboard_session(&gateway).await;
    let page = dashboard_page(&gateway, &cookie, "/ui").await;
    assert!(page.contains("damaged-deep"), "the dashboard lists it");
    let page = dashboard_page(&gateway, &cookie, "/ui/operations/damaged-deep").await;
    assert!(page.contains("recursion limit exceeded"), "{page}");
    assert!(!gateway.log().contains("claiming outbox messages failed"), "{}", gateway.log());
}

#[tokio::test]
async fn a_damaged_row_is_set_aside_alone_on_sqlite() {
    a_damaged_row_is_set_aside_alone(false).await;
}

#[tokio::test]
async fn a_damaged_row_is_set_aside_alone_on_postgres() {
    a_damaged_row_is_set_aside_alone(true).await;
}

/// A provider that answers every request with a success and keeps the
/// bodies it received, byte for byte.
async fn echo_provider() -> (String, Arc<Mutex<Vec<(String, Bytes)>>>) {
    let received: Arc<Mutex<Vec<(String, Bytes)>>> = Arc::default();
    let kept = received.clone();
    let app = axum::Router::new().fallback(move |headers: HeaderMap, body: Bytes| {
        let kept = kept.clone();
        async move {
            let content_type = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("");
            let mut all = kept.lock().unwrap();
            all.push((content_type.to_string(), body));
            axum::Json(json!({"id": format!("ch_{}", all.len()), "status": "succeeded"}))
        }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, received)
}

/// Numbers beyond every machine type, as written, in the order written.
const EXACT: &str = r#"{"reference":"exact","amount":123456789012345678901234567890,"meta":{"tiny":1e-400,"precise":0.1000000000000000055511151231257827,"below":-9223372036854775809,"huge":1e+309,"e":"é"}}"#;

/// Waits for the provider to have received `count` bodies.
async fn bodies(received: &Mutex<Vec<(String, Bytes)>>, count: usize) -> Vec<(String, Bytes)> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let all = received.lock().unwrap().clone();
        if all.len() >= count {
            return all;
        }
        assert!(Instant::now() < deadline, "the provider received {} of {count}", all.len());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Through the HTTP API (on SQLite) the provider receives the payload's
/// bytes as accepted, as JSON, and the status API gives them back; as a
/// form, every number is written exactly as stored.
#[tokio::test]
async fn the_provider_receives_the_payload_as_the_api_accepted_it() {
    let (url, received) = echo_provider().await;
    for (encoding, expected) in [
        ("json", EXACT.to_string()),
        (
            "form",
            "reference=exact&amount=123456789012345678901234567890&meta=%7B%22tiny%22%3A1e-400%2C%22precise%22%3A0.\
             1000000000000000055511151231257827%2C%22below%22%3A-9223372036854775809%2C%22huge%22%3A1e%2B309%2C%22e%22%3A%22%C3%A9%22%7D"
                .to_string(),
        ),
    ] {
        received.lock().unwrap().clear();
        let edit = if encoding == "json" {
            |line: &str| line.replace("encoding = \"form\"", "encoding = \"json\"")
        } else {
            str::to_string
        };
        let gateway = start(&url, false, edit).await;
        let body = format!(r#"{{"provider":"payments","operation":"charge","payload":{EXACT}}}"#);
        let r = gateway
            .http
            .post(format!("{}/v1/operations", gateway.base))
            .header("Idempotency-Key", "exact")
            .header("Content-Type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
        let sent = bodies(&received, 1).await;
        assert_eq!(String::from_utf8_lossy(&sent[0].1), expected, "{encoding}");
        let op = gateway.settled("exact", SETTLE).await;
        assert_eq!(op["payload"].to_string(), EXACT, "read back as accepted");
    }
}

/// Through the outbox contract (on PostgreSQL) the provider receives the
/// payload as the application inserted it; only insignificant whitespace
/// is dropped.
#[tokio::test]
async fn the_provider_receives_the_payload_as_the_application_inserted_it() {
    let (url, received) = echo_provider().await;
    let gateway = start(&url, true, |line| line.replace("encoding = \"form\"", "encoding = \"json\"")).await;
    let pool = sqlx::PgPool::connect(&database_url(&gateway)).await.unwrap();
    let spaced = EXACT.replace(",\"", ", \"").replace("\":", "\": ");
    sqlx::query(
        "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, reference) \
         VALUES ('payments', 'charge', $1::json, 'exact', 'exact')",
    )
    .bind(&spaced)
    .execute(&pool)
    .await
    .unwrap();
    let sent = bodies(&received, 1).await;
    assert_eq!(sent[0].0, "application/json");
    assert_eq!(String::from_utf8_lossy(&sent[0].1), EXACT);
    let op = gateway.settled("exact", SETTLE).await;
    assert_eq!(op["status"], "succeeded");
    let stored: String = sqlx::query_scalar("SELECT payload FROM operations WHERE idempotency_key = 'exact'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(stored, spaced, "stored as inserted");
}

/// What failwell could not store and read back is refused at the API with
/// a 422 that says why, on both stores alike; the deepest payload it takes
/// (127 levels) is taken.
async fn the_api_refuses_only_what_it_could_not_read_back(postgres: bool) {
    let sim = simulator(|_| {}).await;
    let gateway = start(&sim.base_url(), postgres, str::to_string).await;
    let submit = |key: &str, payload: String| {
        let body = format!(r#"{{"provider":"payments","operation":"charge","payload":{payload}}}"#);
        gateway
            .http
            .post(format!("{}/v1/operations", gateway.base))
            .header("Idempotency-Key", key)
            .header("Content-Type", "application/json")
            .body(body)
            .send()
    };
    let nested = |depth: usize, key: &str| {
        format!(
            r#"{{"reference":"{key}","amount":1,"currency":"eur","d":{}{}}}"#,
            "[".repeat(depth - 1),
            "]".repeat(depth - 1)
        )
    };
    let r = submit("deepest", nested(127, "deepest")).await.unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    for (key, payload, says) in [
        ("deeper", nested(128, "deeper"), "deeper than 127 levels"),
        (
            "huge",
            r#"{"reference":"huge","amount":1e131072}"#.to_string(),
            "more than 1000 digits before or after the decimal point",
        ),
        (
            "tiny",
            r#"{"reference":"tiny","amount":1e-16384}"#.to_string(),
            "more than 1000 digits before or after the decimal point",
        ),
        ("nul", r#"{"reference":"nul","note":"a\u0000b"}"#.to_string(), "U+0000"),
        (
            "marker",
            r#"{"reference":"marker","amount":{"$serde_json::private::Number":"12"}}"#.to_string(),
            "reserves for its own keys",
        ),
        (
            "escaped",
            r#"{"reference":"escaped","amount":{"\u0024serde_json::private::Number":"12"}}"#.to_string(),
            "reserves for its own keys",
        ),
        (
            "scale",
            r#"{"reference":"scale","amount":1.0e-16383}"#.to_string(),
            "more than 1000 digits before or after the decimal point",
        ),
    ] {
        let body = problem(submit(key, payload).await.unwrap(), 422, "invalid-body").await;
        assert!(body["detail"].as_str().unwrap().contains(says), "{key}: {body}");
    }
    // U+0000 in a path or a query is refused before any store sees it.
    let nul = gateway.http.get(format!("{}/v1/operations/a%00b", gateway.base)).send().await.unwrap();
    problem(nul, 400, "invalid-path").await;
    let nul = gateway.http.get(format!("{}/v1/events?after=%00", gateway.base)).send().await.unwrap();
    problem(nul, 400, "invalid-query").await;
    // A body that is not an object is refused, though serde would read an array.
    let array = gateway
        .http
        .post(format!("{}/v1/operations", gateway.base))
        .header("Idempotency-Key", "array")
        .header("Content-Type", "application/json")
        .body(r#"["payments","charge",{"reference":"array","amount":1,"currency":"eur"}]"#)
        .send()
        .await
        .unwrap();
    problem(array, 422, "invalid-body").await;
    // (Read as text: the operation's JSON, with the payload inside, nests
    // deeper than serde_json's reader takes.)
    let deadline = Instant::now() + SETTLE;
    let url = format!("{}/v1/operations/deepest", gateway.base);
    while !gateway
        .http
        .get(&url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
        .contains(r#""status":"succeeded""#)
    {
        assert!(Instant::now() < deadline, "the deepest payload was not delivered: {}", gateway.log());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(gateway.counts().await["failed"], 0);
}

#[tokio::test]
async fn the_api_refuses_only_what_it_could_not_read_back_on_sqlite() {
    the_api_refuses_only_what_it_could_not_read_back(false).await;
}

#[tokio::test]
async fn the_api_refuses_only_what_it_could_not_read_back_on_postgres() {
    the_api_refuses_only_what_it_could_not_read_back(true).await;
}
