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
    assert_eq!(list, json!({ "object": "list", "data": [a1, a2], "has_more": false }));
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

#[tokio::test]
async fn lists_page_by_page_within_a_time_window() {
    let sim = start_calm().await;
    let client = client();
    let base = sim.base_url();
    let mut ids = Vec::new();
    for i in 0..5 {
        sim.script(&format!("p{i}"), vec![Fault::Ok]);
        let charge =
            parts(post_charge(&client, &sim, None, 1000 + 100 * i, &format!("p{i}")).await.unwrap()).await.2;
        ids.push(charge["id"].as_str().unwrap_or_else(|| panic!("{charge}")).to_owned());
    }
    let created = {
        let first: Value =
            client.get(format!("{base}/v1/charges/{}", ids[0])).send().await.unwrap().json().await.unwrap();
        first["created"].as_u64().unwrap()
    };
    let page = |query: Vec<(&'static str, String)>| {
        let client = client.clone();
        let base = base.clone();
        async move {
            let r = client.get(format!("{base}/v1/charges")).query(&query).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let window = |extra: Vec<(&'static str, String)>| {
        let mut q =
            vec![("created[gte]", (created - 10).to_string()), ("created[lt]", (created + 10).to_string())];
        q.extend(extra);
        q
    };
    let (_, first) = page(window(vec![("limit", "2".into())])).await;
    let got: Vec<&str> =
        first["data"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!((got, first["has_more"].as_bool()), (vec![ids[0].as_str(), ids[1].as_str()], Some(true)));
    let (_, rest) = page(window(vec![("limit", "100".into()), ("starting_after", ids[1].clone())])).await;
    assert_eq!(rest["data"].as_array().unwrap().len(), 3);
    assert_eq!(rest["has_more"], false);
    let (_, before) = page(vec![("created[lt]", (created - 10).to_string())]).await;
    assert_eq!(before["data"], json!([]));
    let (status, bad) = page(vec![("limit", "0".into())]).await;
    assert_eq!((status, bad["error"]["param"].as_str()), (400, Some("limit")));
    let (status, _) = page(vec![("created[gte]", "yesterday".into())]).await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn a_record_can_be_changed_silently() {
    let sim = start_calm().await;
    let client = client();
    let base = sim.base_url();
    sim.script("t", vec![Fault::Ok]);
    let charge = parts(post_charge(&client, &sim, None, 1000, "t").await.unwrap()).await.2;
    let id = charge["id"].as_str().unwrap();
    let patch = |body: Value| client.patch(format!("{base}/_sim/charges/{id}")).json(&body).send();
    let r = patch(json!({"amount": 150, "status": "failed"})).await.unwrap();
    assert_eq!(r.status(), 200);
    let now: Value =
        client.get(format!("{base}/v1/charges/{id}")).send().await.unwrap().json().await.unwrap();
    assert_eq!((now["amount"].as_u64(), now["status"].as_str()), (Some(150), Some("failed")));
    assert_eq!(sim.effects().charges, 1, "no effect counted");
    assert_eq!(patch(json!({"status": "lost"})).await.unwrap().status(), 400);
    assert_eq!(patch(json!({"colour": "red"})).await.unwrap().status(), 400);
    let missing = client.patch(format!("{base}/_sim/charges/ch_nope")).json(&json!({"amount": 1})).send();
    assert_eq!(missing.await.unwrap().status(), 404);
}
