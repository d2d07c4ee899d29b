//! The balance ledger over HTTP (`/v1/ledger/...`, holds with
//! `POST /v1/operations`), the real binary on SQLite and PostgreSQL:
//! concurrent debits with shuffled duplicates never overdraw and apply
//! once; a hold follows its operation's outcome, whoever settles it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use crate::helpers::{Gateway, on_database, postgres_schema, problem, simulator};
use crate::processing::{deliver, event, sources};

const CLIENTS: usize = 64;
const DEBITS_PER_CLIENT: usize = 200;
/// The wallet's balance before the debits: well under their total (about
/// 64 × 200 × 50).
const INITIAL: i64 = 300_000;

/// A gateway on PostgreSQL (a fresh schema) or on its SQLite file.
async fn gateway(sim_url: &str, postgres: bool, extra: &str, tail: &str) -> Gateway {
    let schema = if postgres { Some(postgres_schema().await) } else { None };
    Gateway::start_edited(sim_url, extra, tail, |text| match &schema {
        Some(url) => on_database(&text, url),
        None => text,
    })
    .await
}

/// `POST {path}` with `body` (and `key` as the Idempotency-Key when given):
/// the status and the JSON answer.
async fn post(gw: &Gateway, path: &str, key: Option<&str>, body: &Value) -> (u16, Value) {
    let mut request = gw.http.post(format!("{}{path}", gw.base)).json(body);
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    let r = request.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// Opens `id` in EUR with `floor` (`null`: none); it must be new.
async fn open(gw: &Gateway, id: &str, floor: Value) {
    let (status, body) =
        post(gw, "/v1/ledger/accounts", None, &json!({"id": id, "unit": "EUR", "floor": floor})).await;
    assert_eq!(status, 201, "{body:#}");
}

/// A transfer of `amount` from `debit` to `credit` with id `id`.
fn transfer(debit: &str, credit: &str, amount: i64) -> Value {
    json!({"debit_account": debit, "credit_account": credit, "amount": amount})
}

/// Account `id` with every entry of its journal (read a page at a time).
async fn account(gw: &Gateway, id: &str) -> (Value, Vec<Value>) {
    let (mut entries, mut after) = (Vec::new(), 0);
    loop {
        let page = gw.get_json(&format!("/v1/ledger/accounts/{id}?after={after}&limit=1000")).await;
        entries.extend(page["entries"].as_array().unwrap().iter().cloned());
        match page["next_after"].as_i64() {
            Some(next) => after = next,
            None => return (page, entries),
        }
    }
}

/// What one send of a debit got back.
enum Answer {
    Created(i64),
    Replayed,
    Refused,
}

/// 64 clients send 200 debits each of 1–100 against one wallet holding
/// less than their total; every debit goes out 1–3 times, the sends
/// shuffled across all clients. The balance never goes below zero (watched
/// during the run, and over the whole journal), each id is created at most
/// once, and the final balance is the initial one less what was created.
async fn concurrent_debits(postgres: bool) {
    let sim = simulator(|_| {}).await;
    let gw = Arc::new(gateway(&sim.base_url(), postgres, "", "").await);
    open(&gw, "world", Value::Null).await;
    open(&gw, "wallet", json!(0)).await;
    open(&gw, "shop", json!(0)).await;
    let (status, body) =
        post(&gw, "/v1/ledger/transfers", Some("top-up"), &transfer("world", "wallet", INITIAL)).await;
    assert_eq!(status, 201, "{body:#}");

    let mut rng = StdRng::seed_from_u64(25);
    let debits: Vec<(String, i64)> =
        (0..CLIENTS * DEBITS_PER_CLIENT).map(|i| (format!("debit-{i}"), rng.random_range(1..=100))).collect();
    let total: i64 = debits.iter().map(|(_, amount)| amount).sum();
    assert!(total > INITIAL * 2, "the debits ask for more than the wallet holds");
    let mut sends: Vec<(String, i64)> =
        debits.iter().flat_map(|debit| std::iter::repeat_n(debit.clone(), rng.random_range(1..=3))).collect();
    sends.shuffle(&mut rng);

    // A watcher reads the wallet throughout.
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (gw, done) = (gw.clone(), done.clone());
        tokio::spawn(async move {
            let mut reads = 0;
            while !done.load(Ordering::Relaxed) {
                let wallet = gw.get_json("/v1/ledger/accounts/wallet?limit=1").await;
                let available = wallet["available"].as_i64().unwrap();
                assert!(available >= 0 && wallet["posted"].as_i64().unwrap() >= 0, "{wallet:#}");
                reads += 1;
            }
            reads
        })
    };
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let mine: Vec<(String, i64)> = sends.iter().skip(client).step_by(CLIENTS).cloned().collect();
            let gw = gw.clone();
            tokio::spawn(async move {
                let mut answers = Vec::with_capacity(mine.len());
                for (id, amount) in mine {
                    let (status, body) =
                        post(&gw, "/v1/ledger/transfers", Some(&id), &transfer("wallet", "shop", amount))
                            .await;
                    let answer = match status {
                        201 | 200 => {
                            assert_eq!(
                                (&body["id"], &body["amount"]),
                                (&json!(id), &json!(amount)),
                                "{body:#}"
                            );
                            assert_eq!(body["state"], "posted", "{body:#}");
                            if status == 201 { Answer::Created(amount) } else { Answer::Replayed }
                        }
                        422 => {
                            assert_eq!(body["type"], "urn:failwell:problem:insufficient-funds", "{body:#}");
                            Answer::Refused
                        }
                        other => panic!("{id}: {other} {body:#}"),
                    };
                    answers.push((id, answer));
                }
                answers
            })
        })
        .collect();
    let mut created = std::collections::HashMap::new();
    let mut replayed = std::collections::HashSet::new();
    let mut refused = 0;
    for client in clients {
        for (id, answer) in client.await.unwrap() {
            match answer {
                Answer::Created(amount) => {
                    assert!(created.insert(id.clone(), amount).is_none(), "{id} was created twice");
                }
                Answer::Replayed => {
                    replayed.insert(id);
                }
                Answer::Refused => refused += 1,
            }
        }
    }
    done.store(true, Ordering::Relaxed);
    assert!(watcher.await.unwrap() > 0, "the watcher read the wallet");
    assert!(replayed.iter().all(|id| created.contains_key(id)), "only created transfers replay");
    assert!(refused > 0 && !created.is_empty(), "some debits fit, some did not ({refused} refused)");

    let accepted: i64 = created.values().sum();
    let (wallet, entries) = account(&gw, "wallet").await;
    assert_eq!(wallet["posted"], INITIAL - accepted, "{wallet:#}");
    assert_eq!((&wallet["debits_pending"], &wallet["credits_pending"]), (&json!(0), &json!(0)));
    // The journal: one entry per created debit (and the top-up), and its
    // running sum never below zero.
    assert_eq!(entries.len(), created.len() + 1);
    let mut running = 0;
    let mut seen = std::collections::HashSet::new();
    for entry in &entries {
        let id = entry["transfer_id"].as_str().unwrap();
        assert!(seen.insert(id.to_owned()), "{id} has two entries");
        let expected = if id == "top-up" { INITIAL } else { -created[id] };
        assert_eq!(entry["posted"], expected, "{entry:#}");
        running += entry["posted"].as_i64().unwrap();
        assert!(running >= 0, "the wallet went below zero at {entry:#}");
    }
    assert_eq!(running, INITIAL - accepted);
    // Double entry: the unit sums to zero.
    let mut sum = 0;
    for id in ["world", "wallet", "shop"] {
        sum += gw.get_json(&format!("/v1/ledger/accounts/{id}?limit=1")).await["posted"].as_i64().unwrap();
    }
    assert_eq!(sum, 0);
    // The counters saw each answer.
    let metrics = gw.http.get(format!("{}/metrics", gw.base)).send().await.unwrap().text().await.unwrap();
    let created_line = format!("failwell_ledger_transfers_total{{result=\"created\"}} {}", created.len() + 1);
    assert!(metrics.contains(&created_line), "{created_line} in\n{metrics}");
    assert!(metrics.contains("failwell_ledger_refused_total{reason=\"insufficient-funds\"}"), "{metrics}");
}

#[tokio::test]
async fn concurrent_debits_with_duplicates_never_overdraw_on_sqlite() {
    concurrent_debits(false).await;
}

#[tokio::test]
async fn concurrent_debits_with_duplicates_never_overdraw_on_postgres() {
    concurrent_debits(true).await;
}

/// `POST /v1/operations` for a charge of `amount` with a hold of `held`
/// from `wallet` to `shop` (id `{key}-wallet`).
async fn order(gw: &Gateway, key: &str, amount: i64, held: i64) -> (u16, Value) {
    let body = json!({
        "provider": "payments",
        "operation": "charge",
        "payload": {"amount": amount, "currency": "eur", "reference": key},
        "hold": {"id": format!("{key}-wallet"), "debit_account": "wallet", "credit_account": "shop", "amount": held},
    });
    post(gw, "/v1/operations", Some(key), &body).await
}

/// Polls hold `id` until it is no longer pending; returns it.
async fn ended(gw: &Gateway, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let hold = gw.get_json(&format!("/v1/ledger/transfers/{id}")).await;
        if hold["state"] != "pending" {
            return hold;
        }
        assert!(Instant::now() < deadline, "{id} stays pending: {hold:#}\n{}", gw.log());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The wallet's `[posted, debits_pending, available]`.
async fn wallet(gw: &Gateway) -> [i64; 3] {
    let w = gw.get_json("/v1/ledger/accounts/wallet?limit=1").await;
    ["posted", "debits_pending", "available"].map(|f| w[f].as_i64().unwrap())
}

/// An order's hold is made with it, posted when the charge succeeds,
/// voided when it is declined; a hold that does not fit records no
/// operation; a hold whose operation waits (the provider is down) stays
/// pending until a webhook settles the operation, and follows it.
async fn holds_follow_operations(postgres: bool) {
    let sim = simulator(|_| {}).await;
    let gw = gateway(&sim.base_url(), postgres, "max_attempts = 100", &sources(None)).await;
    open(&gw, "world", Value::Null).await;
    open(&gw, "wallet", json!(0)).await;
    open(&gw, "shop", json!(0)).await;
    post(&gw, "/v1/ledger/transfers", Some("top-up"), &transfer("world", "wallet", 1000)).await;
    // A floor above zero could never hold: refused, nothing opened.
    let (status, body) =
        post(&gw, "/v1/ledger/accounts", None, &json!({"id": "rich", "unit": "EUR", "floor": 100})).await;
    assert_eq!((status, &body["type"]), (422, &json!("urn:failwell:problem:invalid-account")), "{body:#}");
    let r = gw.http.get(format!("{}/v1/ledger/accounts/rich", gw.base)).send().await.unwrap();
    problem(r, 404, "unknown-account").await;

    // Succeeds: posted in full. Declined (…02): voided.
    assert_eq!(order(&gw, "paid", 700, 300).await.0, 201);
    assert_eq!(order(&gw, "declined", 1002, 200).await.0, 201);
    let paid = ended(&gw, "paid-wallet").await;
    assert_eq!(
        (&paid["state"], &paid["posted_amount"], &paid["operation"]),
        (&json!("posted"), &json!(300), &json!("paid"))
    );
    assert_eq!(ended(&gw, "declined-wallet").await["state"], "voided");
    assert_eq!(gw.settled("declined", Duration::from_secs(20)).await["status"], "failed");
    assert_eq!(wallet(&gw).await, [700, 0, 700]);

    // More than the wallet holds: refused, no operation recorded.
    let (status, body) = order(&gw, "too-much", 5000, 900).await;
    assert_eq!(status, 422, "{body:#}");
    assert_eq!(body["type"], "urn:failwell:problem:insufficient-funds");
    let r = gw.http.get(format!("{}/v1/operations/too-much", gw.base)).send().await.unwrap();
    problem(r, 404, "operation-not-found").await;
    // Holds made with operations count as transfers: the top-up and two
    // holds made, one refused.
    let metrics = gw.http.get(format!("{}/metrics", gw.base)).send().await.unwrap().text().await.unwrap();
    for line in [
        "failwell_ledger_transfers_total{result=\"created\"} 3",
        "failwell_ledger_transfers_total{result=\"refused\"} 1",
        "failwell_ledger_refused_total{reason=\"insufficient-funds\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    // The same key again with a hold that fits goes in.
    assert_eq!(order(&gw, "too-much", 500, 100).await.0, 201);
    assert_eq!(ended(&gw, "too-much-wallet").await["state"], "posted");

    // The provider is down: the holds stay pending while the operations wait.
    sim.set_down(true);
    assert_eq!(order(&gw, "o-ok", 400, 250).await.0, 201);
    assert_eq!(order(&gw, "o-fail", 400, 150).await.0, 201);
    tokio::time::sleep(Duration::from_secs(1)).await;
    for id in ["o-ok-wallet", "o-fail-wallet"] {
        assert_eq!(gw.get_json(&format!("/v1/ledger/transfers/{id}")).await["state"], "pending");
    }
    assert_eq!(wallet(&gw).await, [600, 400, 200]);
    // The gauges say so.
    let metrics = gw.http.get(format!("{}/metrics", gw.base)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.lines().any(|l| l == "failwell_ledger_holds_pending 2"), "{metrics}");
    let age = metrics.lines().find_map(|l| l.strip_prefix("failwell_ledger_oldest_hold_age_seconds "));
    assert!(age.and_then(|a| a.parse::<f64>().ok()).is_some_and(|a| a > 0.0), "{metrics}");
    // Its replay with the same hold is the same request; with another, the
    // key is reused (422, as for any other difference).
    assert_eq!(order(&gw, "o-ok", 400, 250).await.0, 200);
    let (status, body) = order(&gw, "o-ok", 400, 251).await;
    assert_eq!(status, 422, "{body:#}");
    assert_eq!(body["type"], "urn:failwell:problem:idempotency-key-reused");
    // A webhook settles each; the hold follows.
    deliver(&gw, &event("evt_ok", "o-ok", "succeeded", 2)).await;
    deliver(&gw, &event("evt_fail", "o-fail", "failed", 2)).await;
    assert_eq!(ended(&gw, "o-ok-wallet").await["state"], "posted");
    assert_eq!(ended(&gw, "o-fail-wallet").await["state"], "voided");
    assert_eq!(wallet(&gw).await, [350, 0, 350]);
    let pending = gw.get_json("/v1/ledger/accounts/shop?limit=1").await;
    assert_eq!(pending["posted"], 650, "{pending:#}");
}

#[tokio::test]
async fn holds_follow_their_operations_on_sqlite() {
    holds_follow_operations(false).await;
}

#[tokio::test]
async fn holds_follow_their_operations_on_postgres() {
    holds_follow_operations(true).await;
}
