//! What happens to a received webhook event: it is applied to the
//! operations ledger once and monotonically, and forwarded to the
//! application re-signed as Standard Webhooks, at least once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use failwell_webhook::{Scheme, Verifier, stripe_signature};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::helpers::{Gateway, simulator};

const PROVIDER_SECRET: &str = "whsec_provider";
const APP_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The application's webhook endpoint: verifies each delivery with the
/// Standard Webhooks scheme, keeps it, and answers 500 to the first
/// `refuse` deliveries (all of them with `usize::MAX`).
#[derive(Clone)]
pub(crate) struct App {
    url: String,
    /// What it was sent, refused deliveries included.
    pub(crate) received: Arc<Mutex<Vec<(HeaderMap, Bytes)>>>,
}

pub(crate) async fn app(refuse: usize) -> App {
    let received = Arc::new(Mutex::new(Vec::new()));
    let refused = Arc::new(AtomicUsize::new(0));
    let verifier =
        Verifier::new(Scheme::StandardWebhooks, &[APP_SECRET.into()], Some(Duration::from_secs(60))).unwrap();
    let kept = received.clone();
    let handler = move |headers: HeaderMap, body: Bytes| {
        let (kept, refused, verifier) = (kept.clone(), refused.clone(), verifier.clone());
        async move {
            if verifier.verify(&headers, &body, SystemTime::now()).is_err() {
                return StatusCode::BAD_REQUEST;
            }
            kept.lock().await.push((headers, body));
            if refused.fetch_add(1, Ordering::SeqCst) < refuse {
                StatusCode::INTERNAL_SERVER_ERROR
            } else {
                StatusCode::OK
            }
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let router = axum::Router::new().route("/hooks", axum::routing::post(handler));
    tokio::spawn(async move { axum::serve(listener, router).await });
    App { url, received }
}

/// `[providers.app]` and `[webhooks.sim]` (Stripe-signed, forwarded to
/// `app` when given, mapped to the `payments` ledger).
pub(crate) fn sources(app: Option<&App>) -> String {
    let mut text = String::new();
    if let Some(app) = app {
        text += &format!(
            "[providers.app]\nbase_url = \"{}\"\ntimeout_ms = 1000\nmax_attempts = 3\n\
             backoff = {{ schedule_ms = [50, 100] }}\n\n",
            app.url
        );
    }
    text += &format!("[webhooks.sim]\nscheme = \"stripe\"\nsecrets = [\"{PROVIDER_SECRET}\"]\n");
    text += "ledger = { provider = \"payments\", reference_pointer = \"/data/object/reference\", \
             status_pointer = \"/data/object/status\", version_pointer = \"/data/object/version\" }\n";
    if app.is_some() {
        text +=
            &format!("forward = {{ provider = \"app\", path = \"/hooks\", secret = \"{APP_SECRET}\" }}\n");
    }
    text
}

/// The simulator's kind of event about `reference`.
pub(crate) fn event(id: &str, reference: &str, status: &str, version: i64) -> Vec<u8> {
    let object = json!({"object": "charge", "reference": reference, "status": status, "version": version});
    // Bytes no serializer would produce, to show they are kept verbatim.
    format!("{{\"id\":\"{id}\",  \"type\":\"charge.{status}\", \"note\":\"caf\u{e9} \u{1f600}\",\"data\":{{\"object\":{object}}}}}")
        .into_bytes()
}

/// Posts `body` to `/webhooks/sim`, signed as the provider signs it; the answer (200).
pub(crate) async fn deliver(gw: &Gateway, body: &[u8]) -> Value {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let r = gw
        .http
        .post(format!("{}/webhooks/sim", gw.base))
        .header("Stripe-Signature", stripe_signature(PROVIDER_SECRET, now, body))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

async fn record(gw: &Gateway, event_id: &str) -> Value {
    let r = gw.http.get(format!("{}/v1/events/sim/{event_id}", gw.base)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

/// Polls the event until its forward is no longer pending.
pub(crate) async fn forwarded(gw: &Gateway, event_id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let record = record(gw, event_id).await;
        if record["forward"]["state"] != "pending" {
            return record;
        }
        assert!(Instant::now() < deadline, "not forwarded: {record:#}\n{}", gw.log());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The steps of `kind` (`ledger`, `forward`) in an event's record.
pub(crate) fn steps<'a>(record: &'a Value, kind: &str) -> Vec<&'a Value> {
    record["history"].as_array().unwrap().iter().filter(|s| s["kind"] == kind).collect()
}

#[tokio::test]
async fn an_event_is_forwarded_re_signed_under_its_own_id_until_the_app_takes_it() {
    let sim = simulator(|_| {}).await;
    let app = app(2).await;
    let gw = Gateway::start_with(&sim.base_url(), "", &sources(Some(&app))).await;
    let body = event("evt_1", "nobody", "succeeded", 1);
    deliver(&gw, &body).await;
    let record = forwarded(&gw, "evt_1").await;
    assert_eq!(
        (&record["forward"]["state"], &record["forward"]["attempts"], &record["forward"]["last_error"]),
        (&json!("done"), &json!(3), &Value::Null),
        "{record:#}"
    );
    let received = app.received.lock().await;
    assert_eq!(received.len(), 3, "two refusals, then taken");
    for (headers, delivered) in received.iter() {
        assert_eq!(headers["webhook-id"], "evt_1", "the provider's event id, on every attempt");
        assert_eq!(delivered.as_ref(), body.as_slice(), "the body byte for byte");
        assert_eq!(headers["content-type"], "application/json");
    }
    let forwards = steps(&record, "forward");
    assert_eq!(forwards.len(), 3, "{record:#}");
    assert_eq!(forwards[0]["status_code"], 500);
    assert!(forwards[0]["detail"].as_str().unwrap().contains("retry in 50 ms"), "{record:#}");
    assert_eq!(
        (forwards[2]["status_code"].as_u64(), forwards[2]["detail"].as_str()),
        (Some(200), Some("delivered (attempt 3)"))
    );
    // Not one of our operations: recorded as such, nothing else happens.
    assert_eq!(steps(&record, "ledger")[0]["effect"], "no_operation");
    // And counted, for Prometheus.
    let r = gw.http.get(format!("{}/metrics", gw.base)).send().await.unwrap();
    assert_eq!(r.headers()["content-type"], "text/plain; version=0.0.4");
    let metrics = r.text().await.unwrap();
    for line in [
        "failwell_webhook_received_total{integration=\"sim\",result=\"new\"} 1",
        "failwell_forwards_total{integration=\"sim\",result=\"retry\"} 2",
        "failwell_forwards_total{integration=\"sim\",result=\"delivered\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} not in:\n{metrics}");
    }
}

#[tokio::test]
async fn a_forward_the_app_keeps_refusing_becomes_a_dead_letter() {
    let sim = simulator(|_| {}).await;
    let app = app(usize::MAX).await;
    let gw = Gateway::start_with(&sim.base_url(), "", &sources(Some(&app))).await;
    deliver(&gw, &event("evt_dead", "nobody", "succeeded", 1)).await;
    let record = forwarded(&gw, "evt_dead").await;
    assert_eq!((&record["forward"]["state"], &record["forward"]["attempts"]), (&json!("dead"), &json!(3)));
    assert!(record["forward"]["last_error"].as_str().unwrap().contains("HTTP 500"), "{record:#}");
    let last = *steps(&record, "forward").last().unwrap();
    assert!(last["detail"].as_str().unwrap().starts_with("dead letter: "), "{record:#}");
    assert_eq!(gw.counts().await["forward_dead_letters"], 1);
}

#[tokio::test]
async fn sixty_four_concurrent_deliveries_take_effect_once() {
    let sim = simulator(|_| {}).await;
    sim.set_down(true);
    let app = app(0).await;
    let gw = Gateway::start_with(&sim.base_url(), "max_attempts = 100", &sources(Some(&app))).await;
    assert_eq!(gw.charge("o1", 1000).await.status(), 201);
    let body = event("evt_once", "o1", "succeeded", 2);
    let gw = Arc::new(gw);
    let deliveries: Vec<_> = (0..64)
        .map(|_| {
            let (gw, body) = (gw.clone(), body.clone());
            tokio::spawn(async move { deliver(&gw, &body).await["received"] == "new" })
        })
        .collect();
    let mut new = 0;
    for d in deliveries {
        new += usize::from(d.await.unwrap());
    }
    assert_eq!(new, 1, "one delivery stored it, 63 were duplicates");
    let record = forwarded(&gw, "evt_once").await;
    assert_eq!(record["forward"]["state"], "done");
    let ledger = steps(&record, "ledger");
    assert_eq!(ledger.len(), 1, "{record:#}");
    assert_eq!(ledger[0]["effect"], "resolved");
    let op = gw.operation("o1").await;
    assert_eq!(op["status"], "succeeded", "{op:#}");
    assert_eq!(gw.counts().await["resolved_by_events"], 1);
    // Give a second forward every chance to show up before counting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(app.received.lock().await.len(), 1, "one forward");
}

/// The value of the unlabelled series `name` in a `/metrics` scrape.
async fn metric(gw: &Gateway, name: &str) -> f64 {
    let scrape = gw.http.get(format!("{}/metrics", gw.base)).send().await.unwrap().text().await.unwrap();
    scrape
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{scrape}"))
}

#[tokio::test]
async fn deliveries_that_trickle_in_share_commits() {
    let sim = simulator(|_| {}).await;
    let gw = Arc::new(Gateway::start_with(&sim.base_url(), "", &sources(None)).await);
    assert_eq!(metric(&gw, "failwell_webhook_commits_total").await, 0.0);
    // One delivery every millisecond: each would find the writer idle and
    // cost a commit of its own without the linger.
    let mut every = tokio::time::interval(Duration::from_millis(1));
    let mut deliveries = Vec::new();
    for n in 0..60 {
        every.tick().await;
        let gw = gw.clone();
        deliveries.push(tokio::spawn(async move {
            deliver(&gw, &event(&format!("evt_trickle_{n}"), &format!("o{n}"), "succeeded", 1)).await
        }));
    }
    for d in deliveries {
        assert_eq!(d.await.unwrap()["received"], "new");
    }
    let commits = metric(&gw, "failwell_webhook_commits_total").await;
    assert!((1.0..=30.0).contains(&commits), "60 deliveries took {commits} commits\n{}", gw.log());
}

#[tokio::test]
async fn a_thousand_events_delivered_three_times_in_any_order_end_at_the_newest() {
    let sim = simulator(|_| {}).await;
    // The provider never answers: only the events can settle anything.
    sim.set_down(true);
    let extra = "max_attempts = 1000\nbackoff = { base_ms = 1000, cap_ms = 5000, jitter = \"full\" }";
    let gw = Gateway::start_with(&sim.base_url(), extra, &sources(None)).await;
    let operations = 250;
    let mut expected = Vec::new();
    let mut events = Vec::new();
    for i in 0..operations {
        let key = format!("op{i}");
        // 202 once the breaker opens: accepted, queued.
        let status = gw.charge(&key, 1000).await.status().as_u16();
        assert!(matches!(status, 201 | 202), "{status}");
        // Four events per operation, versions 1 to 4: some leave it in
        // progress, some settle it one way and then the other (a failed
        // payment retried by the provider, a payment returned later).
        let statuses = match i % 5 {
            0 => ["pending", "processing", "pending", "processing"],
            1 | 2 => ["pending", "processing", "failed", "succeeded"],
            _ => ["pending", "processing", "succeeded", "failed"],
        };
        expected.push((key.clone(), if statuses[3] == "processing" { "pending" } else { statuses[3] }));
        for (v, status) in statuses.iter().enumerate() {
            events.push(event(&format!("evt_{i}_{v}"), &key, status, v as i64 + 1));
        }
    }
    assert_eq!(events.len(), 1000);
    let mut deliveries: Vec<Vec<u8>> = events.iter().chain(&events).chain(&events).cloned().collect();
    deliveries.shuffle(&mut rand::rngs::StdRng::seed_from_u64(42));
    let deliveries = Arc::new(Mutex::new(deliveries));
    let gw = Arc::new(gw);
    let workers: Vec<_> = (0..16)
        .map(|_| {
            let (deliveries, gw) = (deliveries.clone(), gw.clone());
            tokio::spawn(async move {
                let mut new = 0;
                while let Some(body) = deliveries.lock().await.pop() {
                    new += usize::from(deliver(&gw, &body).await["received"] == "new");
                }
                new
            })
        })
        .collect();
    let mut new = 0;
    for w in workers {
        new += w.await.unwrap();
    }
    assert_eq!(new, 1000, "each event stored once, 2,000 duplicates absorbed");
    for (key, status) in &expected {
        let op = gw.operation(key).await;
        assert_eq!(op["status"], *status, "{op:#}");
    }
    let counts = gw.counts().await;
    assert_eq!(counts["inbox_events"], 1000);
    assert_eq!(
        counts["resolved_by_events"],
        (operations / 5 * 4) as u64,
        "each settled operation resolved once"
    );
}

#[tokio::test]
async fn an_event_id_that_cannot_be_a_key_is_refused_and_nothing_is_stored() {
    let sim = simulator(|_| {}).await;
    let gw = Gateway::start_with(&sim.base_url(), "", &sources(None)).await;
    for id in ["", "evt_\u{e9}t\u{e9}", "evt 1", &"e".repeat(256)] {
        let body = format!(r#"{{"id":"{id}","data":{{"object":{{}}}}}}"#).into_bytes();
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        let r = gw
            .http
            .post(format!("{}/webhooks/sim", gw.base))
            .header("Stripe-Signature", stripe_signature(PROVIDER_SECRET, now, &body))
            .body(body)
            .send()
            .await
            .unwrap();
        crate::helpers::problem(r, 400, "invalid-event-id").await;
    }
    assert_eq!(gw.counts().await["inbox_events"], 0);
}
