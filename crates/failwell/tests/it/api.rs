//! Bad input at the HTTP API: each gets a clear problem+json 4xx and leaves
//! nothing half-written.

use serde_json::{Value, json};

use crate::helpers::{Gateway, problem, simulator};

async fn nothing_written(gw: &Gateway) {
    let counts = gw.counts().await;
    for state in ["pending", "succeeded", "failed", "unknown"] {
        assert_eq!(counts[state], 0, "{counts:#}");
    }
}

#[tokio::test]
async fn bad_requests_are_refused_and_write_nothing() {
    let sim = simulator(|_| {}).await;
    let gw = Gateway::start(&sim.base_url(), "").await;
    let url = format!("{}/v1/operations", gw.base);
    let body =
        json!({"provider": "payments", "operation": "charge", "payload": {"amount": 1, "currency": "eur"}});

    let r = gw.http.post(&url).json(&body).send().await.unwrap();
    problem(r, 400, "missing-idempotency-key").await;
    let r = gw.http.post(&url).header("Idempotency-Key", "  ").json(&body).send().await.unwrap();
    problem(r, 400, "missing-idempotency-key").await;
    let r = gw.http.post(&url).header("Idempotency-Key", "k".repeat(256)).json(&body).send().await.unwrap();
    problem(r, 400, "invalid-idempotency-key").await;

    let r = gw
        .http
        .post(&url)
        .header("Idempotency-Key", "k1")
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    problem(r, 400, "malformed-json").await;
    // Not JSON from its first byte on: malformed too; JSON but not an
    // object: the wrong body.
    for (body, status, kind) in
        [("hello", 400, "malformed-json"), ("tru", 400, "malformed-json"), ("[1, 2]", 422, "invalid-body")]
    {
        let r = gw
            .http
            .post(&url)
            .header("Idempotency-Key", "k1")
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        problem(r, status, kind).await;
    }
    let r = gw.http.post(&url).header("Idempotency-Key", "k1").body("amount=1").send().await.unwrap();
    problem(r, 415, "unsupported-media-type").await;
    let r = gw
        .http
        .post(&url)
        .header("Idempotency-Key", "k1")
        .json(&json!({"provider": "payments"}))
        .send()
        .await
        .unwrap();
    problem(r, 422, "invalid-body").await;
    let r = gw
        .http
        .post(&url)
        .header("Idempotency-Key", "k1")
        .json(&json!({"provider": "payments", "operation": "charge", "payload": [1, 2]}))
        .send()
        .await
        .unwrap();
    problem(r, 422, "invalid-body").await;

    let unknown = json!({"provider": "nope", "operation": "charge", "payload": {}});
    let r = gw.http.post(&url).header("Idempotency-Key", "k1").json(&unknown).send().await.unwrap();
    problem(r, 422, "unknown-provider").await;
    let unknown = json!({"provider": "payments", "operation": "refund", "payload": {}});
    let r = gw.http.post(&url).header("Idempotency-Key", "k1").json(&unknown).send().await.unwrap();
    problem(r, 422, "unknown-operation").await;

    let huge =
        json!({"provider": "payments", "operation": "charge", "payload": {"note": "x".repeat(70_000)}});
    let r = gw.http.post(&url).header("Idempotency-Key", "k1").json(&huge).send().await.unwrap();
    problem(r, 413, "body-too-large").await;

    for reference in [json!(null), json!(""), json!(1.5), json!({"a": 1}), json!("r".repeat(256))] {
        let body = json!({"provider": "payments", "operation": "charge",
                          "payload": {"amount": 100, "currency": "eur", "reference": reference}});
        let r = gw.http.post(&url).header("Idempotency-Key", "k1").json(&body).send().await.unwrap();
        problem(r, 422, "invalid-reference").await;
    }
    let no_reference = json!({"provider": "payments", "operation": "charge", "payload": {"amount": 100}});
    let r = gw.http.post(&url).header("Idempotency-Key", "k1").json(&no_reference).send().await.unwrap();
    problem(r, 422, "invalid-reference").await;
    let top_level = json!({"provider": "payments", "operation": "charge", "reference": "x",
                           "payload": {"amount": 100, "currency": "eur", "reference": "x"}});
    let r = gw.http.post(&url).header("Idempotency-Key", "k1").json(&top_level).send().await.unwrap();
    problem(r, 422, "invalid-body").await;
    let r = gw.http.post(&url).header("Idempotency-Key", "a\tb").json(&body).send().await.unwrap();
    problem(r, 400, "invalid-idempotency-key").await;
    let r = gw.http.post(&url).header("Idempotency-Key", "a b").json(&body).send().await.unwrap();
    problem(r, 400, "invalid-idempotency-key").await;
    let r = gw
        .http
        .post(&url)
        .header("Idempotency-Key", "d1")
        .header("Idempotency-Key", "d2")
        .json(&body)
        .send()
        .await
        .unwrap();
    problem(r, 400, "invalid-idempotency-key").await;

    nothing_written(&gw).await;
    let r = gw.http.delete(format!("{}/v1/operations/k1", gw.base)).send().await.unwrap();
    problem(r, 405, "method-not-allowed").await;
    let r = gw.http.get(format!("{}/v1/operations/%FF%FE", gw.base)).send().await.unwrap();
    problem(r, 400, "invalid-path").await;
    let r = gw.http.get(format!("{}/v1/operations/k1", gw.base)).send().await.unwrap();
    problem(r, 404, "operation-not-found").await;
    let r = gw.http.get(format!("{}/nope", gw.base)).send().await.unwrap();
    problem(r, 404, "not-found").await;
}

#[tokio::test]
async fn same_key_replays_and_a_different_request_under_it_is_refused() {
    let sim = simulator(|_| {}).await;
    let gw = Gateway::start(&sim.base_url(), "").await;
    let first = gw.charge("order-1", 2500).await;
    assert_eq!(first.status(), 201);
    assert_eq!(first.headers()["location"], "/v1/operations/order-1");
    let first: Value = first.json().await.unwrap();
    assert_eq!(first["status"], "pending");
    assert_eq!(first["status_url"], "/v1/operations/order-1");

    let again = gw.charge("order-1", 2500).await;
    assert_eq!(again.status(), 200, "a replay answers 200 with the stored operation");
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["id"], first["id"]);

    let other = gw.charge("order-1", 9900).await;
    problem(other, 422, "idempotency-key-reused").await;

    gw.settled("order-1", std::time::Duration::from_secs(10)).await;
    assert_eq!(sim.effects().by_reference["order-1"].effects, 1);
    assert_eq!(sim.effects().requests, 1, "the replays never reached the provider");
    let counts = gw.counts().await;
    assert_eq!(counts["succeeded"], 1);
}

#[tokio::test]
async fn keys_with_special_characters_round_trip() {
    let sim = simulator(|_| {}).await;
    let gw = Gateway::start(&sim.base_url(), "").await;
    let key = "order/2026#1é";
    let r = gw
        .http
        .post(format!("{}/v1/operations", gw.base))
        .header("Idempotency-Key", "order/2026#1")
        .json(&json!({"provider": "payments", "operation": "charge",
                      "payload": {"amount": 100, "currency": "eur", "reference": "ref-1"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["status_url"], "/v1/operations/order%2F2026%231");
    let r = gw.http.get(format!("{}{}", gw.base, body["status_url"].as_str().unwrap())).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // a non-ASCII header value is refused, not mangled
    let r = gw
        .http
        .post(format!("{}/v1/operations", gw.base))
        .header("Idempotency-Key", reqwest::header::HeaderValue::from_bytes(key.as_bytes()).unwrap())
        .json(&json!({"provider": "payments", "operation": "charge", "payload": {}}))
        .send()
        .await
        .unwrap();
    problem(r, 400, "invalid-idempotency-key").await;
}

#[tokio::test]
async fn a_reference_is_one_intent() {
    let sim = simulator(|_| {}).await;
    let gw = Gateway::start(&sim.base_url(), "").await;
    let charge = |key: &str, amount: u64, reference: Value| {
        let body = json!({"provider": "payments", "operation": "charge",
                          "payload": {"amount": amount, "currency": "eur", "reference": reference}});
        gw.http.post(format!("{}/v1/operations", gw.base)).header("Idempotency-Key", key).json(&body).send()
    };
    assert_eq!(charge("a-1", 1500, json!("shared")).await.unwrap().status(), 201);
    let r = charge("a-2", 900, json!("shared")).await.unwrap();
    problem(r, 422, "reference-reused").await;
    // an integer reference is a reference too
    let r = charge("a-3", 900, json!(777)).await.unwrap();
    assert_eq!(r.status(), 201);
    let op: Value = r.json().await.unwrap();
    assert_eq!(op["reference"], "777");
    gw.settled("a-3", std::time::Duration::from_secs(10)).await;
    assert_eq!(sim.effects().by_reference["777"].effects, 1);
    let counts = gw.counts().await;
    assert_eq!(counts["pending"].as_u64().unwrap() + counts["succeeded"].as_u64().unwrap(), 2, "{counts}");
}

/// The API in-process, with its bulkhead and request deadline at hand.
async fn api_with(
    bulkhead: failwell_policy::Bulkhead,
    timeout: std::time::Duration,
) -> (tempfile::TempDir, axum::Router) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("api.db").display());
    let store: failwell_store::Store =
        failwell_store::SqliteStore::open(&url, failwell_store::Synchronous::Normal).await.unwrap().into();
    let state = std::sync::Arc::new(failwell::http::AppState {
        ingest: failwell_engine::Ingest::start(store.clone()),
        transfers: failwell_engine::Transfers::start(store.clone()),
        store,
        providers: std::sync::Arc::new(failwell_engine::Providers::new()),
        wake: std::sync::Arc::default(),
        webhooks: std::sync::Arc::default(),
        forward: std::sync::Arc::default(),
        reads: Default::default(),
        metrics: None,
        admin: failwell::http::AdminState {
            token: None,
            alerts: None,
            stats_window: std::time::Duration::from_secs(300),
        },
    });
    (dir, failwell::http::router(state, 65_536, bulkhead, timeout))
}

fn get(path: &str) -> axum::http::Request<axum::body::Body> {
    axum::http::Request::get(path).body(axum::body::Body::empty()).unwrap()
}

async fn api_problem(r: axum::response::Response, type_suffix: &str) {
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let body = axum::body::to_bytes(r.into_body(), 65_536).await.unwrap();
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["type"], format!("urn:failwell:problem:{type_suffix}"), "{body:#}");
}

#[tokio::test]
async fn a_full_api_bulkhead_answers_503_with_retry_after() {
    use tower::ServiceExt;
    let config = failwell_policy::BulkheadConfig {
        max_concurrent: 1,
        max_wait: std::time::Duration::ZERO,
        max_waiting: 0,
    };
    let bulkhead = failwell_policy::Bulkhead::new("api", config).unwrap();
    let (_dir, app) = api_with(bulkhead.clone(), std::time::Duration::from_secs(5)).await;
    let held = bulkhead.try_acquire().unwrap();
    api_problem(app.clone().oneshot(get("/healthz")).await.unwrap(), "overloaded").await;
    drop(held);
    assert_eq!(app.oneshot(get("/healthz")).await.unwrap().status(), 200);
    assert_eq!(bulkhead.in_flight(), 0, "the request returned its permit");
}

#[tokio::test]
async fn a_request_past_its_deadline_answers_503() {
    use tower::ServiceExt;
    let bulkhead = failwell_policy::Bulkhead::new("api", failwell_policy::BulkheadConfig::default()).unwrap();
    let (_dir, app) = api_with(bulkhead, std::time::Duration::ZERO).await;
    api_problem(app.oneshot(get("/healthz")).await.unwrap(), "request-timeout").await;
}

#[tokio::test]
async fn providers_show_their_breaker_bulkhead_and_budget() {
    let sim = simulator(|_| {}).await;
    let gw = Gateway::start(&sim.base_url(), "bulkhead = { max_concurrent = 7 }").await;
    let body: Value =
        gw.http.get(format!("{}/v1/providers", gw.base)).send().await.unwrap().json().await.unwrap();
    assert_eq!(
        body,
        json!({"providers": [{
            "name": "payments",
            "breaker": {"state": "closed", "paused_ms": 0, "paused_total_ms": 0},
            "throttle": {"rate_per_s": null},
            "bulkhead": {"in_flight": 0, "max_concurrent": 7},
            "retry_budget": {"available": 100},
        }]})
    );
}
