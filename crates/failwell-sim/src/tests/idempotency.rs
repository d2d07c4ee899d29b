//! Idempotency-key semantics: replay, reuse with other params, in-flight
//! conflicts, expiry, stored declines and validation errors. Faults other than
//! the hanging one used to hold a key in flight are covered in `faults.rs`.

use std::time::Duration;

use serde_json::json;

use super::helpers::{client, parts, poll, post_charge, start, start_calm};
use crate::{Fault, Profile, SimConfig};

#[tokio::test]
async fn same_key_same_params_replays_first_response() {
    let sim = start_calm().await;
    let client = client();
    let first = parts(post_charge(&client, &sim, Some("k1"), 1000, "order-1").await.unwrap()).await;
    assert_eq!(first.0, 200);
    assert!(!first.1, "first answer must not be marked replayed");
    assert_eq!(first.2["status"], "succeeded");
    assert_eq!(first.2["amount"], 1000);
    assert_eq!(first.2["currency"], "usd");
    assert!(first.2["id"].as_str().unwrap().starts_with("ch_"));
    let second = parts(post_charge(&client, &sim, Some("k1"), 1000, "order-1").await.unwrap()).await;
    assert_eq!(second, (200, true, first.2));
    let effects = sim.effects();
    assert_eq!(effects.requests, 2);
    assert_eq!(effects.charges, 1);
    assert_eq!(effects.by_reference["order-1"].effects, 1);
    assert_eq!(effects.by_reference["order-1"].requests, 2);
    assert_eq!(effects.double_effects(), 0);
}

#[tokio::test]
async fn without_key_every_post_is_a_new_charge() {
    let sim = start_calm().await;
    let client = client();
    for _ in 0..2 {
        let (status, replayed, _) = parts(post_charge(&client, &sim, None, 500, "dup").await.unwrap()).await;
        assert_eq!((status, replayed), (200, false));
    }
    let effects = sim.effects();
    assert_eq!(effects.by_reference["dup"].effects, 2);
    assert_eq!(effects.double_effects(), 1);
}

#[tokio::test]
async fn same_key_other_params_is_rejected() {
    let sim = start_calm().await;
    let client = client();
    let first = post_charge(&client, &sim, Some("k2"), 1000, "order-2").await.unwrap();
    assert_eq!(first.status(), 200);
    let (status, _, body) =
        parts(post_charge(&client, &sim, Some("k2"), 1001, "order-2").await.unwrap()).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["type"], "idempotency_error");
    assert_eq!(body["error"]["code"], "idempotency_key_reused");
    assert_eq!(sim.effects().charges, 1);
}

#[tokio::test]
async fn same_key_while_in_flight_conflicts_then_replays() {
    let sim = start_calm().await;
    sim.script("order-3", vec![Fault::TimeoutAfterCommit]);
    let url = sim.base_url();
    let hanging = tokio::spawn(async move {
        let client = reqwest::Client::builder().timeout(Duration::from_millis(400)).build().unwrap();
        client
            .post(format!("{url}/v1/charges"))
            .header("Idempotency-Key", "k3")
            .form(&[("amount", "1000"), ("currency", "usd"), ("reference", "order-3")])
            .send()
            .await
    });
    poll("the hanging charge to commit", || async { (sim.effects().charges == 1).then_some(()) }).await;
    let client = client();
    let (status, _, body) =
        parts(post_charge(&client, &sim, Some("k3"), 1000, "order-3").await.unwrap()).await;
    assert_eq!(status, 409);
    assert_eq!(body["error"]["type"], "idempotency_error");
    assert_eq!(body["error"]["code"], "idempotency_key_in_use");
    let timed_out = hanging.await.unwrap().unwrap_err();
    assert!(timed_out.is_timeout(), "{timed_out:?}");
    // The client gave up: the server drops the hanging handler and the key completes.
    let replay = poll("the key to complete after the client left", || async {
        let got = parts(post_charge(&client, &sim, Some("k3"), 1000, "order-3").await.unwrap()).await;
        (got.0 == 200).then_some(got)
    })
    .await;
    assert!(replay.1, "completed key must replay");
    assert_eq!(sim.effects().charges, 1);
}

#[tokio::test]
async fn expired_key_makes_a_second_charge() {
    let mut config = SimConfig::new(Profile::Calm, 1);
    config.key_ttl = Duration::from_millis(50);
    let sim = start(config).await;
    let client = client();
    let first = parts(post_charge(&client, &sim, Some("k4"), 1000, "order-4").await.unwrap()).await;
    assert_eq!((first.0, first.1), (200, false));
    let fresh = poll("the key to expire", || async {
        let got = parts(post_charge(&client, &sim, Some("k4"), 1000, "order-4").await.unwrap()).await;
        assert_eq!(got.0, 200);
        (!got.1).then_some(got)
    })
    .await;
    assert_ne!(fresh.2["id"], first.2["id"]);
    assert_eq!(sim.effects().by_reference["order-4"].effects, 2);
}

#[tokio::test]
async fn declines_are_stored_and_replayed() {
    let sim = start_calm().await;
    let client = client();
    let (status, replayed, body) =
        parts(post_charge(&client, &sim, Some("k5"), 1002, "order-5").await.unwrap()).await;
    assert_eq!((status, replayed), (402, false));
    assert_eq!(body["error"]["type"], "card_error");
    assert_eq!(body["error"]["code"], "card_declined");
    assert_eq!(body["error"]["message"], "Your card was declined.");
    let id = body["error"]["charge"].as_str().unwrap().to_owned();
    let again = parts(post_charge(&client, &sim, Some("k5"), 1002, "order-5").await.unwrap()).await;
    assert_eq!(again, (402, true, body));
    let charge: serde_json::Value =
        client.get(format!("{}/v1/charges/{id}", sim.base_url())).send().await.unwrap().json().await.unwrap();
    assert_eq!(charge["status"], "failed");
    let effects = sim.effects();
    assert_eq!((effects.charges, effects.declined), (0, 1));
    assert_eq!(effects.by_reference["order-5"].declined, 1);
}

#[tokio::test]
async fn decline_suffix_is_configurable() {
    let mut config = SimConfig::new(Profile::Calm, 1);
    config.decline_suffix = 99;
    let sim = start(config).await;
    let client = client();
    assert_eq!(post_charge(&client, &sim, None, 1002, "a").await.unwrap().status(), 200);
    assert_eq!(post_charge(&client, &sim, None, 1099, "b").await.unwrap().status(), 402);
}

#[tokio::test]
async fn invalid_params_are_rejected_and_not_stored() {
    let sim = start_calm().await;
    let client = client();
    let url = format!("{}/v1/charges", sim.base_url());
    let cases = [
        (json!({"currency": "usd", "reference": "r"}), "parameter_missing", "amount"),
        (json!({"amount": 0, "currency": "usd", "reference": "r"}), "parameter_invalid", "amount"),
        (json!({"amount": 12.5, "currency": "usd", "reference": "r"}), "parameter_invalid", "amount"),
        (json!({"amount": 100, "reference": "r"}), "parameter_missing", "currency"),
        (json!({"amount": 100, "currency": "us", "reference": "r"}), "parameter_invalid", "currency"),
        (json!({"amount": 100, "currency": "usd"}), "parameter_missing", "reference"),
        (json!({"amount": 100, "currency": "usd", "reference": ""}), "parameter_invalid", "reference"),
    ];
    for (body, code, param) in cases {
        let response = client.post(&url).header("Idempotency-Key", "k6").json(&body).send().await.unwrap();
        let (status, _, err) = parts(response).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(err["error"]["type"], "invalid_request_error");
        assert_eq!(err["error"]["code"], code, "{body}");
        assert_eq!(err["error"]["param"], param, "{body}");
    }
    let form_bad = client
        .post(&url)
        .form(&[("amount", "abc"), ("currency", "usd"), ("reference", "r")])
        .send()
        .await
        .unwrap();
    assert_eq!(parts(form_bad).await.2["error"]["param"], "amount");
    // The key was not stored by the failures: valid JSON params now succeed fresh.
    let ok = client
        .post(&url)
        .header("Idempotency-Key", "k6")
        .json(&json!({"amount": 100, "currency": "EUR", "reference": "r"}))
        .send()
        .await
        .unwrap();
    let (status, replayed, body) = parts(ok).await;
    assert_eq!((status, replayed), (200, false));
    assert_eq!(body["currency"], "eur");
    assert_eq!(sim.effects().charges, 1);
}
