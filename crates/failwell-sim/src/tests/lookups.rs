//! Lookups by id and by reference, the `/_sim` control routes and their error
//! answers. Idempotency and fault behaviour are tested elsewhere.

use serde_json::{Value, json};

use super::helpers::{client, parts, post_charge, start_calm};
use crate::{Effects, Fault};

#[tokio::test]
async fn lookups_by_id_and_reference() {
    let sim = start_calm().await;
    let client = client();
    let base = sim.base_url();
    let a1 = parts(post_charge(&client, &sim, None, 100, "A").await.unwrap()).await.2;
    let b1 = parts(post_charge(&client, &sim, None, 200, "B").await.unwrap()).await.2;
    let a2 = parts(post_charge(&client, &sim, None, 300, "A").await.unwrap()).await.2;

    let id = a1["id"].as_str().unwrap();
    let (status, _, got) = parts(client.get(format!("{base}/v1/charges/{id}")).send().await.unwrap()).await;
    assert_eq!((status, &got), (200, &a1));
    assert_eq!(got["object"], "charge");
    assert_eq!(got["reference"], "A");
    assert!(got["created"].as_u64().unwrap() > 1_600_000_000);

    let list: Value = client
        .get(format!("{base}/v1/charges"))
        .query(&[("reference", "A")])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list, json!({ "object": "list", "data": [a1, a2] }));
    let list_b: Value =
        client.get(format!("{base}/v1/charges?reference=B")).send().await.unwrap().json().await.unwrap();
    assert_eq!(list_b["data"], json!([b1]));
    let none: Value =
        client.get(format!("{base}/v1/charges?reference=nope")).send().await.unwrap().json().await.unwrap();
    assert_eq!(none["data"], json!([]));

    let (status, _, missing) =
        parts(client.get(format!("{base}/v1/charges/ch_missing")).send().await.unwrap()).await;
    assert_eq!(status, 404);
    assert_eq!(missing["error"]["type"], "invalid_request_error");
    assert_eq!(missing["error"]["code"], "resource_missing");
}

#[tokio::test]
async fn effects_route_matches_in_process_snapshot() {
    let sim = start_calm().await;
    let client = client();
    post_charge(&client, &sim, Some("e1"), 100, "E").await.unwrap();
    post_charge(&client, &sim, Some("e1"), 100, "E").await.unwrap();
    post_charge(&client, &sim, None, 102, "F").await.unwrap();
    let served: Effects =
        client.get(format!("{}/_sim/effects", sim.base_url())).send().await.unwrap().json().await.unwrap();
    assert_eq!(served, sim.effects());
    assert_eq!((served.requests, served.charges, served.declined), (3, 1, 1));
    assert_eq!(served.by_reference["E"].requests, 2);
    assert_eq!(served.by_reference["F"].declined, 1);
}

#[tokio::test]
async fn script_route_sets_faults_and_rejects_bad_bodies() {
    let sim = start_calm().await;
    let client = client();
    let url = format!("{}/_sim/script/S", sim.base_url());
    let ok = client.put(&url).json(&json!(["error_502", "ok"])).send().await.unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(post_charge(&client, &sim, None, 100, "S").await.unwrap().status(), 502);
    assert_eq!(post_charge(&client, &sim, None, 100, "S").await.unwrap().status(), 200);
    for bad in ["[\"boom\"]", "{}", "not json"] {
        let response = client.put(&url).body(bad).send().await.unwrap();
        let (status, _, body) = parts(response).await;
        assert_eq!(status, 400, "{bad}");
        assert_eq!(body["error"]["type"], "invalid_request_error");
    }
    // In-process scripting is the same thing.
    sim.script("S", vec![Fault::Ok, Fault::Ok, Fault::Error500]);
    assert_eq!(post_charge(&client, &sim, None, 100, "S").await.unwrap().status(), 500);
}

#[tokio::test]
async fn unknown_routes_are_json_404() {
    let sim = start_calm().await;
    let response = client().get(format!("{}/v2/nothing", sim.base_url())).send().await.unwrap();
    let (status, _, body) = parts(response).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "unrecognized_request_url");
    assert!(sim.base_url().starts_with("http://127.0.0.1:"));
}
