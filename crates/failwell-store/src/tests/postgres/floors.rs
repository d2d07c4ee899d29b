//! PostgreSQL only: a full claim starts the next one after the messages it
//! took (`postgres/floors.rs`), and a message that becomes due behind that
//! point is still claimed.

use serde_json::json;

use super::store;
use crate::prelude::*;
use crate::{ClaimScope, Claimed, Message, Outbox};

fn charge(key: &str) -> Message {
    Message {
        idempotency_key: Some(key.into()),
        ..Message::new("payments", "charge", json!({"amount": 100, "reference": key}))
    }
}

/// Enqueues and commits `keys`, each due at 1 ms.
async fn enqueue(s: &super::S, keys: &[&str]) {
    for key in keys {
        let mut tx = s.begin().await.unwrap();
        Outbox::enqueue(&mut tx, &charge(key), 1).await.unwrap();
        tx.commit().await.unwrap();
    }
}

/// The idempotency keys of a claim of up to `limit` `payments` messages at
/// `now_ms`, with leases of `lease_ms`.
async fn claim(s: &super::S, now_ms: i64, limit: u32, lease_ms: u64) -> Vec<String> {
    let scope = ClaimScope::Providers(vec!["payments".into()]);
    let claimed: Vec<Claimed> = s.claim(now_ms, limit, lease_ms, &scope).await.unwrap();
    claimed.into_iter().map(|c| c.operation.idempotency_key).collect()
}

/// A message committed after a full claim, with an id before the messages
/// that claim took, is behind the next claim's start: that claim takes
/// what follows; the one after it, since that one ran short, reads from
/// the start and takes the late message.
#[tokio::test]
async fn a_message_committed_behind_a_full_claim_is_claimed_once_a_claim_runs_short() {
    let (_schema, s) = store().await;
    let mut open = s.begin().await.unwrap();
    Outbox::enqueue(&mut open, &charge("late"), 1).await.unwrap();
    enqueue(&s, &["b", "c", "d"]).await;
    assert_eq!(claim(&s, 10, 2, 60_000).await, ["b", "c"]);
    open.commit().await.unwrap();
    assert_eq!(claim(&s, 20, 2, 60_000).await, ["d"], "the claim starts after c");
    assert_eq!(claim(&s, 30, 2, 60_000).await, ["late"]);
    assert!(claim(&s, 40, 2, 60_000).await.is_empty());
}

/// While every claim is full, a message whose lease expired behind their
/// start (its process stopped mid-delivery) is claimed again by the first
/// claim a second or more after the last one that read from the start.
#[tokio::test]
async fn behind_full_claims_an_expired_lease_is_claimed_again_within_a_second() {
    let (_schema, s) = store().await;
    enqueue(&s, &["a", "b", "c", "d"]).await;
    assert_eq!(claim(&s, 10, 1, 5).await, ["a"], "read from the start, leased until 15 ms");
    assert_eq!(claim(&s, 500, 1, 60_000).await, ["b"]);
    assert_eq!(claim(&s, 1_009, 1, 60_000).await, ["c"]);
    assert_eq!(claim(&s, 1_010, 1, 60_000).await, ["a"], "a second after the read from the start");
    assert_eq!(claim(&s, 1_020, 1, 60_000).await, ["d"]);
}
