//! PostgreSQL only: a full claim starts the next one after the messages it
//! took (`postgres/floors.rs`), and a message that becomes due behind that
//! point is still claimed.

use failwell_policy::Outcome;
use serde_json::json;

use super::store;
use crate::prelude::*;
use crate::tests::{completion, record};
use crate::{ClaimScope, Claimed, Message, Outbox, Transition};

fn charge(key: &str) -> Message {
    Message {
        idempotency_key: Some(key.into()),
        ..Message::new("payments", "charge", json!({"amount": 100, "reference": key}))
    }
}

/// Enqueues and commits `keys`, each due at 1 ms; a key that starts with
/// `k` is of ordering key `K`.
async fn enqueue(s: &super::S, keys: &[&str]) {
    for key in keys {
        let message = Message { ordering_key: key.starts_with('k').then(|| "K".into()), ..charge(key) };
        let mut tx = s.begin().await.unwrap();
        Outbox::enqueue(&mut tx, &message, 1).await.unwrap();
        tx.commit().await.unwrap();
    }
}

/// A claim of up to `limit` `payments` messages at `now_ms`, with leases
/// of `lease_ms`.
async fn claimed(s: &super::S, now_ms: i64, limit: u32, lease_ms: u64) -> Vec<Claimed> {
    let scope = ClaimScope::Providers(vec!["payments".into()]);
    s.claim(now_ms, limit, lease_ms, &scope).await.unwrap()
}

/// The idempotency keys of [`claimed`].
async fn claim(s: &super::S, now_ms: i64, limit: u32, lease_ms: u64) -> Vec<String> {
    claimed(s, now_ms, limit, lease_ms).await.into_iter().map(|c| c.operation.idempotency_key).collect()
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

/// The next message of an ordering key, behind a full claim's start while
/// the one before it was in flight, is claimed by the first claim after
/// that one's result (in claim order: before the messages that follow).
#[tokio::test]
async fn the_next_message_of_an_ordering_key_is_claimed_as_soon_as_the_one_before_is_done() {
    let (_schema, s) = store().await;
    enqueue(&s, &["k1", "k2", "u1", "u2", "u3"]).await;
    let first = claimed(&s, 10, 2, 60_000).await;
    let keys: Vec<_> = first.iter().map(|c| c.operation.idempotency_key.as_str()).collect();
    assert_eq!(keys, ["k1", "u1"], "k2 waits for k1");
    let done = Transition::Succeeded { provider_ref: None, response: None };
    s.complete(vec![completion(&first[0], Some(record(Outcome::Succeeded)), done)], 15).await.unwrap();
    assert_eq!(claim(&s, 20, 2, 60_000).await, ["k2", "u2"]);
}
