//! Webhooks: signed events for every commit (also when the answer is lost),
//! the purity and distributions of [`planned_webhooks`], duplicates and
//! reordering in stormy mode, redelivery of refused copies, giving up, and
//! silence without a target. Deliveries are awaited with
//! [`crate::Simulator::wait_webhooks`], never timed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use failwell_webhook::{Scheme, Verifier};
use serde_json::Value;
use tokio::net::TcpListener;

use super::helpers::{client, parts, poll, post_charge, start};
use crate::{
    Fault, Profile, SimConfig, Simulator, WebhookPlan, WebhookStats, WebhookTarget, planned_webhooks,
};

const SECRET: &str = "whsec_sim_test_secret";
/// Far more than any plan here needs (a few seconds), for a loaded machine.
const WAIT: Duration = Duration::from_secs(90);

/// One received delivery: its headers and body.
type Delivery = (HeaderMap, Bytes);

/// A webhook endpoint at `/webhooks/sim` on 127.0.0.1:0 recording every
/// delivery; the n-th is answered `answers[n]`, 200 past the end.
struct Receiver {
    url: String,
    received: Arc<Mutex<Vec<Delivery>>>,
}

impl Receiver {
    async fn start(answers: Vec<StatusCode>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/webhooks/sim", listener.local_addr().unwrap());
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&received);
        let endpoint = post(move |headers: HeaderMap, body: Bytes| {
            let log = Arc::clone(&log);
            let answers = answers.clone();
            async move {
                let mut log = log.lock().unwrap();
                let answer = answers.get(log.len()).copied().unwrap_or(StatusCode::OK);
                log.push((headers, body));
                answer
            }
        });
        let app = axum::Router::new().route("/webhooks/sim", endpoint);
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver { url, received }
    }

    fn target(&self) -> WebhookTarget {
        WebhookTarget { url: self.url.clone(), secret: SECRET.to_owned() }
    }

    fn received(&self) -> Vec<Delivery> {
        self.received.lock().unwrap().clone()
    }
}

/// An event as received: its parsed JSON, its bytes and how many times it came.
struct Received {
    event: Value,
    body: Bytes,
    copies: usize,
}

/// Verifies every delivery (Stripe scheme, [`SECRET`], 300 s tolerance) and
/// its content type, and groups them by event id, checking that every
/// delivery of an event carries the same bytes.
fn verified_events(received: &[Delivery]) -> BTreeMap<String, Received> {
    let verifier =
        Verifier::new(Scheme::Stripe, &[SECRET.to_owned()], Some(Duration::from_secs(300))).unwrap();
    let mut events: BTreeMap<String, Received> = BTreeMap::new();
    for (headers, body) in received {
        verifier.verify(headers, body, crate::clock::wall()).unwrap();
        assert_eq!(headers["content-type"], "application/json");
        let event: Value = serde_json::from_slice(body).unwrap();
        let id = event["id"].as_str().unwrap().to_owned();
        let entry = events.entry(id).or_insert_with(|| Received { event, body: body.clone(), copies: 0 });
        assert_eq!(&entry.body, body, "every delivery of an event carries the same bytes");
        entry.copies += 1;
    }
    events
}

async fn start_with(mut config: SimConfig, target: Option<WebhookTarget>) -> Simulator {
    config.webhooks = target;
    start(config).await
}

#[tokio::test]
async fn every_commit_sends_signed_events_even_when_the_answer_is_lost() {
    let receiver = Receiver::start(vec![]).await;
    let sim = start_with(SimConfig::new(Profile::Calm, 5), Some(receiver.target())).await;
    sim.script("resets", vec![Fault::ResetAfterCommit]);
    sim.script("hangs", vec![Fault::TimeoutAfterCommit]);
    let client = client();
    let mut charge_ids = BTreeMap::new();
    for i in 0..5 {
        let reference = format!("ok-{i}");
        let (status, _, body) =
            parts(post_charge(&client, &sim, None, 1000, &reference).await.unwrap()).await;
        assert_eq!(status, 200);
        charge_ids.insert(reference, body["id"].as_str().unwrap().to_owned());
    }
    let (status, _, body) = parts(post_charge(&client, &sim, None, 1002, "declined").await.unwrap()).await;
    assert_eq!(status, 402);
    let declined_id = body["error"]["charge"].as_str().unwrap().to_owned();
    assert!(post_charge(&client, &sim, None, 1000, "resets").await.is_err());
    // Its answer is held back for 30 s; only the webhooks tell it committed.
    let hanging = {
        let (client, url) = (client.clone(), sim.base_url());
        tokio::spawn(async move {
            let form = [("amount", "1000"), ("currency", "usd"), ("reference", "hangs")];
            client.post(format!("{url}/v1/charges")).form(&form).send().await
        })
    };
    poll("the hanging charge to commit", || async {
        sim.effects().by_reference.get("hangs").is_some_and(|r| r.effects == 1).then_some(())
    })
    .await;
    assert!(sim.wait_webhooks(WAIT).await, "deliveries still in flight");

    let received = receiver.received();
    let events = verified_events(&received);
    let of = |reference: &str| -> Vec<&Received> {
        let mut found: Vec<_> =
            events.values().filter(|r| r.event["data"]["object"]["reference"] == reference).collect();
        found.sort_by_key(|r| r.event["data"]["object"]["version"].as_u64());
        found
    };
    for reference in ["ok-0", "ok-1", "ok-2", "ok-3", "ok-4", "resets", "hangs"] {
        let found = of(reference);
        let kinds: Vec<_> = found
            .iter()
            .map(|r| {
                (r.event["type"].as_str().unwrap(), r.event["data"]["object"]["status"].as_str().unwrap())
            })
            .collect();
        assert_eq!(kinds, [("charge.pending", "pending"), ("charge.succeeded", "succeeded")], "{reference}");
        assert_eq!(found[0].event["data"]["object"]["id"], found[1].event["data"]["object"]["id"]);
        if let Some(id) = charge_ids.get(reference) {
            assert_eq!(found[1].event["data"]["object"]["id"], id.as_str());
        }
    }
    let failed = of("declined");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].event["type"], "charge.failed");
    assert_eq!(failed[0].event["data"]["object"]["status"], "failed");
    assert_eq!(failed[0].event["data"]["object"]["version"], 2);
    assert_eq!(failed[0].event["data"]["object"]["id"], declined_id.as_str());

    // The bytes as sent, in field order.
    let succeeded = of("ok-0")[1];
    let (id, created) = (succeeded.event["id"].as_str().unwrap(), &succeeded.event["created"]);
    assert!(id.len() == 28 && id.starts_with("evt_"), "{id}");
    let expected = format!(
        r#"{{"id":"{id}","object":"event","type":"charge.succeeded","created":{created},"data":{{"object":{{"id":"{}","object":"charge","status":"succeeded","reference":"ok-0","amount":1000,"currency":"usd","version":2}}}}}}"#,
        charge_ids["ok-0"]
    );
    assert_eq!(std::str::from_utf8(&succeeded.body).unwrap(), expected);

    let stats = sim.effects().webhooks;
    assert_eq!(stats.events, 15);
    assert_eq!(events.len(), 15, "event ids are unique per event");
    assert_eq!((stats.in_flight, stats.refused, stats.undelivered), (0, 0, 0));
    assert_eq!(stats.deliveries, stats.events + stats.duplicates);
    assert_eq!(received.len() as u64, stats.deliveries);
    let served: Value =
        client.get(format!("{}/_sim/effects", sim.base_url())).send().await.unwrap().json().await.unwrap();
    assert_eq!(served["webhooks"], serde_json::to_value(&stats).unwrap());
    hanging.abort();
}

fn stormy(seed: u64) -> SimConfig {
    let mut config = SimConfig::new(Profile::Stormy, seed);
    config.hang = Duration::from_millis(10);
    config
}

fn plans(config: &SimConfig) -> Vec<WebhookPlan> {
    (0..200).map(|i| planned_webhooks(config, &format!("ref-{i}"))).collect()
}

#[test]
fn planned_webhooks_is_pure_and_seed_dependent() {
    let a = plans(&stormy(42));
    assert_eq!(a, plans(&stormy(42)));
    assert_ne!(a, plans(&stormy(43)));
    assert_ne!(a, plans(&SimConfig::new(Profile::Outage, 42)));
    assert_ne!(planned_webhooks(&stormy(42), "a"), planned_webhooks(&stormy(42), "b"));
}

#[test]
fn planned_webhooks_follows_the_documented_distributions() {
    let ms = Duration::from_millis;
    let total = 20_000;
    for (config, max_delay, max_copies, duplicated) in [
        (SimConfig::new(Profile::Calm, 9), ms(50), 2, 5.0),
        (stormy(9), ms(1500), 3, 25.0),
        (SimConfig::new(Profile::Outage, 9), ms(1500), 3, 25.0),
    ] {
        let (mut events, mut copied, mut reordered, mut together, mut later) = (0, 0, 0, 0, 0);
        for n in 0..total {
            let plan = planned_webhooks(&config, &format!("r{n}"));
            reordered += u32::from(plan.reordered());
            for offsets in [&plan.pending, &plan.outcome] {
                events += 1;
                assert!((1..=max_copies).contains(&offsets.len()), "{offsets:?}");
                assert!(offsets[0] <= max_delay, "{offsets:?}");
                copied += u32::from(offsets.len() > 1);
                for &copy in &offsets[1..] {
                    assert!(copy >= offsets[0] && copy <= offsets[0] + max_delay, "{offsets:?}");
                    together += u32::from(copy == offsets[0]);
                    later += u32::from(copy > offsets[0]);
                }
            }
        }
        let percent = |n: u32, of: u32| f64::from(n) * 100.0 / f64::from(of);
        let profile = config.profile;
        assert!((percent(copied, events) - duplicated).abs() < 1.5, "{profile}: {}", percent(copied, events));
        assert!((percent(reordered, total) - 50.0).abs() < 2.0, "{profile}: {}", percent(reordered, total));
        assert!(together > 0 && later > 0, "{profile}: copies sent together and later");
        assert!((percent(together, together + later) - 50.0).abs() < 5.0, "{profile}");
    }
}

#[tokio::test]
async fn stormy_deliveries_are_duplicated_and_reordered_as_planned() {
    let receiver = Receiver::start(vec![]).await;
    let config = stormy(11);
    let sim = start_with(config.clone(), Some(receiver.target())).await;
    let client = client();
    let mut tasks = Vec::new();
    for chunk in 0..10 {
        let (client, url) = (client.clone(), sim.base_url());
        tasks.push(tokio::spawn(async move {
            for i in 0..20 {
                let n = chunk * 20 + i;
                let amount = if n % 10 == 0 { "1002" } else { "1000" };
                let reference = format!("s-{n}");
                let form = [("amount", amount), ("currency", "usd"), ("reference", reference.as_str())];
                // Some answers are faults (pre-commit errors, resets): the commits count.
                let _ = client.post(format!("{url}/v1/charges")).form(&form).send().await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert!(sim.wait_webhooks(WAIT).await, "deliveries still in flight");

    let effects = sim.effects();
    let mut expected = WebhookStats::default();
    for (reference, counters) in &effects.by_reference {
        let plan = planned_webhooks(&config, reference);
        let succeeded = counters.effects == 1;
        assert!(u64::from(succeeded) + counters.declined <= 1, "one charge per reference");
        if succeeded || counters.declined == 1 {
            expected.events += if succeeded { 2 } else { 1 };
            expected.duplicates += plan.duplicates(succeeded);
            expected.reordered += u64::from(succeeded && plan.reordered());
        }
    }
    assert_eq!(effects.charges * 2 + effects.declined, expected.events);
    let stats = effects.webhooks;
    assert_eq!(
        (stats.events, stats.duplicates, stats.reordered),
        (expected.events, expected.duplicates, expected.reordered)
    );
    assert!(stats.duplicates > 0 && stats.reordered > 0, "{stats:?}");
    assert_eq!((stats.in_flight, stats.undelivered), (0, 0));
    assert_eq!(stats.deliveries, stats.events + stats.duplicates + stats.refused);

    let events = verified_events(&receiver.received());
    assert_eq!(events.len() as u64, stats.events, "every event arrived");
    assert!(events.values().any(|r| r.copies >= 2), "the receiver saw duplicates");
}

#[tokio::test]
async fn a_refused_delivery_is_redelivered() {
    let receiver = Receiver::start(vec![StatusCode::INTERNAL_SERVER_ERROR]).await;
    let sim = start_with(SimConfig::new(Profile::Calm, 3), Some(receiver.target())).await;
    let (status, _, _) = parts(post_charge(&client(), &sim, None, 1000, "retried").await.unwrap()).await;
    assert_eq!(status, 200);
    assert!(sim.wait_webhooks(WAIT).await, "deliveries still in flight");

    let stats = sim.effects().webhooks;
    assert_eq!((stats.events, stats.refused, stats.undelivered, stats.in_flight), (2, 1, 0, 0));
    assert_eq!(stats.deliveries, stats.events + stats.duplicates + 1);
    let received = receiver.received();
    assert_eq!(received.len() as u64, stats.deliveries);
    let refused = &received[0].1;
    assert!(received[1..].iter().any(|(_, body)| body == refused), "the refused event came again");
    assert_eq!(verified_events(&received).len(), 2);
}

#[tokio::test]
async fn an_unreachable_receiver_is_given_up_after_six_tries() {
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let target = WebhookTarget { url: format!("http://{closed}/gone"), secret: SECRET.to_owned() };
    let sim = start_with(SimConfig::new(Profile::Calm, 3), Some(target)).await;
    let (status, _, _) = parts(post_charge(&client(), &sim, None, 1000, "lost").await.unwrap()).await;
    assert_eq!(status, 200);
    assert!(sim.wait_webhooks(WAIT).await, "deliveries still in flight");

    let stats = sim.effects().webhooks;
    assert_eq!((stats.events, stats.undelivered, stats.in_flight), (2, 2, 0));
    assert_eq!(stats.deliveries, 6 * (stats.events + stats.duplicates));
    assert_eq!(stats.refused, stats.deliveries);
}

#[tokio::test]
async fn no_webhooks_without_a_target() {
    let sim = start_with(stormy(1), None).await;
    for i in 0..20 {
        let _ = post_charge(&client(), &sim, None, 1000, &format!("quiet-{i}")).await;
    }
    assert!(sim.effects().charges > 0);
    assert!(sim.wait_webhooks(Duration::ZERO).await);
    assert_eq!(sim.effects().webhooks, WebhookStats::default());
}

#[tokio::test]
async fn a_webhook_url_that_does_not_parse_is_refused_at_start() {
    let mut config = SimConfig::new(Profile::Calm, 1);
    config.webhooks = Some(WebhookTarget { url: "not a url".into(), secret: SECRET.into() });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let err = Simulator::start(config, listener).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
}
