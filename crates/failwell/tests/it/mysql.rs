//! `failwell serve` on a MySQL or MariaDB store (`MYSQL_URL`), as a real
//! process: its migrations applied at start, operations submitted over
//! HTTP and enqueued in an application's own transaction (found by the
//! relay's poll: MySQL has no `LISTEN/NOTIFY`), a webhook event applied and
//! forwarded, and a dead letter an operator replays with `failwell dlq`.

use failwell_store::{Message, MySqlStore, Outbox};
use serde_json::{Value, json};

use crate::helpers::{Gateway, SETTLE, mysql_database, on_database, simulator};
use crate::operator::cli;
use crate::processing::{app, deliver, event, forwarded, sources, steps};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failwell_serve_on_mysql_delivers_applies_a_webhook_and_replays_a_dead_letter() {
    let database = mysql_database().await;
    let sim = simulator(|_| {}).await;
    // The application takes a forwarded event at the fourth delivery: the
    // forward's three attempts are refused, and it becomes a dead letter.
    let app = app(3).await;
    let url = database.url.clone();
    let gateway =
        Gateway::start_edited(&sim.base_url(), "max_attempts = 100", &sources(Some(&app)), move |text| {
            on_database(&text, &url)
        })
        .await;

    // Submitted over HTTP, delivered once.
    assert_eq!(gateway.charge("api-1", 1010).await.status(), 201);
    let op = gateway.settled("api-1", SETTLE).await;
    assert_eq!(op["status"], "succeeded", "{op:#}");
    assert_eq!(sim.effects().by_reference["api-1"].effects, 1);

    // Enqueued in the application's own transaction beside its order; no
    // one wakes the relay: its poll finds the message.
    let store = MySqlStore::open(&database.url, 2).await.unwrap();
    sqlx::query("CREATE TABLE orders (reference VARCHAR(64) PRIMARY KEY, amount BIGINT NOT NULL)")
        .execute(store.pool())
        .await
        .unwrap();
    let mut tx = store.begin().await.unwrap();
    sqlx::query("INSERT INTO orders VALUES ('app-1', 2020)").execute(&mut *tx).await.unwrap();
    let message = Message {
        idempotency_key: Some("app-1".into()),
        reference: Some("app-1".into()),
        ..Message::new("payments", "charge", json!({"amount": 2020, "currency": "eur", "reference": "app-1"}))
    };
    Outbox::enqueue(&mut tx, &message, failwell_engine::now_ms()).await.unwrap();
    tx.commit().await.unwrap();
    let op = gateway.settled("app-1", SETTLE).await;
    assert_eq!(op["status"], "succeeded", "{op:#}");
    assert_eq!(sim.effects().by_reference["app-1"].effects, 1);

    // While the provider is down, its webhook settles a charge: applied to
    // the operation, then forwarded until the application's refusals make
    // the forward a dead letter.
    sim.set_down(true);
    let status = gateway.charge("held-1", 3030).await.status().as_u16();
    assert!(matches!(status, 201 | 202), "{status}");
    assert_eq!(deliver(&gateway, &event("evt_held", "held-1", "succeeded", 1)).await["received"], "new");
    let record = forwarded(&gateway, "evt_held").await;
    assert_eq!(steps(&record, "ledger")[0]["effect"], "resolved", "{record:#}");
    assert_eq!(record["forward"]["state"], "dead", "{record:#}");
    assert_eq!(gateway.operation("held-1").await["status"], "succeeded");

    // The operator replays it: delivered at the fourth try.
    let (code, out, err) = cli(&gateway, &["dlq", "list", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let letters: Value = serde_json::from_str(&out).unwrap();
    let letter = letters.as_array().unwrap().iter().find(|l| l["key"] == "evt_held").expect("{letters:#}");
    assert_eq!(letter["kind"], "forward", "{letter:#}");
    let id = letter["id"].as_i64().unwrap().to_string();
    let (code, _, err) = cli(&gateway, &["dlq", "replay", "forward", &id]).await;
    assert_eq!(code, 0, "{err}");
    let record = forwarded(&gateway, "evt_held").await;
    assert_eq!(record["forward"]["state"], "done", "{record:#}");
    assert_eq!(app.received.lock().await.len(), 4, "three refused, one taken");
    let (code, timeline, _) = cli(&gateway, &["ops", "show", "held-1"]).await;
    assert_eq!(code, 0);
    assert!(
        timeline.lines().any(|l| l.contains("webhook") && l.contains("operation pending -> succeeded")),
        "{timeline}"
    );

    let counts = gateway.counts().await;
    assert_eq!((counts["succeeded"].as_u64(), counts["resolved_by_events"].as_u64()), (Some(3), Some(1)));
    // The process said at start which store it opened, and what an
    // application's user needs there; it logged no error.
    let log = gateway.log();
    let opened = log.lines().find(|l| l.contains("store opened")).expect(&log);
    let name = database.url.rsplit_once('/').unwrap().1;
    assert!(opened.contains(&format!(", database {name} on 127.0.0.1:3306 as user root")), "{opened}");
    assert!(opened.contains("store=MariaDB 1") || opened.contains("store=MySQL 8"), "{opened}");
    assert!(opened.contains("failwell's store is migrated"), "{opened}");
    assert!(opened.contains("on failwell_outbox, the outbox contract's table"), "{opened}");
    assert!(!log.contains("ERROR"), "{log}");
}
