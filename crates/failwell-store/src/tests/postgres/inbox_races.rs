//! PostgreSQL only: the webhook inbox with several failwell processes
//! (two stores, each with its own pool, on one schema) receiving,
//! relaying and forwarding at once. With a missing or misordered lock a
//! round stores or applies something twice, lets the feed pass an
//! event, or deadlocks (which PostgreSQL breaks by failing one side).

use std::collections::HashMap;
use std::time::Duration;

use failwell_policy::{Outcome, Reported};
use serde_json::json;
use tokio::time::Instant;

use crate::prelude::*;

use crate::{
    ClaimScope, Completion, EventReport, ForwardCompletion, ForwardTransition, LedgerEffect, NewEvent,
    NewOperation, OperationStatus, PostgresStore, Received, Recorded, StoreError, Transition,
};

const ROUNDS: i64 = 20;

/// Two "processes" on one fresh schema, and its URL.
async fn two_stores() -> (super::Schema, String, PostgresStore, PostgresStore) {
    let (schema, url) = super::schema().await;
    let a = PostgresStore::open(&url, 4).await.unwrap();
    let b = PostgresStore::open(&url, 4).await.unwrap();
    (schema, url, a, b)
}

fn new_op(key: &str) -> NewOperation {
    NewOperation {
        idempotency_key: key.into(),
        provider: "payments".into(),
        operation: "charge".into(),
        reference: Some(format!("ref-{key}")),
        payload: json!({"amount": 100, "reference": format!("ref-{key}")}),
        hold: None,
    }
}

/// The provider's event `event_id` saying the operation `key`
/// succeeded, to be forwarded.
fn settles(event_id: &str, key: &str) -> NewEvent {
    NewEvent {
        integration: "hooks".into(),
        event_id: event_id.into(),
        payload: event_id.as_bytes().to_vec(),
        headers: json!({}),
        report: Some(Ok(EventReport {
            provider: "payments".into(),
            reference: format!("ref-{key}"),
            reported: Reported::Settled(Outcome::Succeeded),
            version: 1,
            provider_ref: Some(format!("ch_{key}")),
        })),
        forward: true,
    }
}

async fn ledger_effects(s: &PostgresStore, event_id: &str) -> Vec<Option<LedgerEffect>> {
    let record = s.event("hooks", event_id).await.unwrap().unwrap();
    record.steps.iter().filter(|step| step.kind == "ledger").map(|step| step.effect).collect()
}

/// How often the operation went from pending to succeeded.
async fn settled_changes(s: &PostgresStore, operation_id: i64) -> i64 {
    let history = s.history(operation_id).await.unwrap();
    history.iter().filter(|e| e.subject == "operation" && e.change == "pending -> succeeded").count() as i64
}

/// The backend waiting for a lock `holder` holds, once there is one.
async fn blocked_by(pool: &sqlx::PgPool, holder: i32) -> Option<i32> {
    sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))")
        .bind(holder)
        .fetch_optional(pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_receiving_the_same_events_store_and_apply_each_once() {
    let (_schema, _, a, b) = two_stores().await;
    for round in 0..ROUNDS {
        let (x, y) = (format!("x{round}"), format!("y{round}"));
        for key in [&x, &y] {
            a.submit(new_op(key), round).await.unwrap();
        }
        let (ex, ey) = (settles(&format!("evt_{x}"), &x), settles(&format!("evt_{y}"), &y));
        // The same two deliveries reach both processes, in opposite orders.
        let (first, second) =
            tokio::join!(a.receive(vec![ex.clone(), ey.clone()], round), b.receive(vec![ey, ex], round));
        let (first, second) = (first.unwrap(), second.unwrap());
        for (key, deliveries) in [(&x, [first[0], second[1]]), (&y, [first[1], second[0]])] {
            let new = deliveries.iter().filter(|r| **r == Received::New).count();
            assert_eq!(new, 1, "round {round}: {key} is new exactly once: {deliveries:?}");
            let op = a.operation(key).await.unwrap().unwrap();
            assert_eq!(op.status, OperationStatus::Succeeded, "round {round}");
            assert_eq!(settled_changes(&a, op.id).await, 1, "round {round}: {key} settled once");
            let effects = ledger_effects(&a, &format!("evt_{key}")).await;
            assert_eq!(effects, [Some(LedgerEffect::Resolved)], "round {round}: applied once");
        }
    }
    let counts = b.counts().await.unwrap();
    assert_eq!((counts.inbox_events, counts.forwards_pending), (2 * ROUNDS as u64, 2 * ROUNDS as u64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_never_passes_an_event_still_being_stored() {
    let (_schema, url, a, b) = two_stores().await;
    a.submit(new_op("held"), 0).await.unwrap();
    let op = a.operation("held").await.unwrap().unwrap();
    // Another writer (the relay, say) holds the operation's message.
    let holder = sqlx::PgPool::connect(&url).await.unwrap();
    let mut held = holder.begin().await.unwrap();
    let holder_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut *held).await.unwrap();
    sqlx::query("SELECT id FROM outbox WHERE operation_id = $1 FOR UPDATE")
        .bind(op.id)
        .execute(&mut *held)
        .await
        .unwrap();
    // The first event takes its seq, then waits for the message...
    let first = tokio::spawn({
        let a = a.clone();
        async move { a.receive(vec![settles("evt_first", "held")], 1).await }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let first_pid = loop {
        if let Some(pid) = blocked_by(&holder, holder_pid).await {
            break pid;
        }
        assert!(Instant::now() < deadline, "the first receive never waited for the message");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // ...while a second one, for no operation, arrives at another process.
    let plain = NewEvent { report: None, forward: false, ..settles("evt_second", "held") };
    let second = tokio::spawn({
        let b = b.clone();
        async move { b.receive(vec![plain], 2).await }
    });
    while !second.is_finished() && blocked_by(&holder, first_pid).await.is_none() {
        assert!(Instant::now() < deadline, "the second receive neither finished nor waited");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Had the second committed ahead of the first, a reader would
    // move its cursor past the first's seq and never see it.
    let feed = b.events_after(0, 10, usize::MAX).await.unwrap();
    assert!(feed.is_empty(), "the feed shows an event while a lower seq is in flight: {feed:?}");
    assert!(!second.is_finished(), "the second event was stored ahead of the first");
    held.rollback().await.unwrap();
    assert_eq!(first.await.unwrap().unwrap(), [Received::New]);
    assert_eq!(second.await.unwrap().unwrap(), [Received::New]);
    let feed = a.events_after(0, 10, usize::MAX).await.unwrap();
    let ids: Vec<&str> = feed.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(ids, ["evt_first", "evt_second"]);
    assert_eq!(ledger_effects(&a, "evt_first").await, [Some(LedgerEffect::Resolved)]);
    holder.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_racing_the_relay_settle_each_operation_once_without_deadlock() {
    const OPS: usize = 6;
    let (_schema, _, relay, inbox) = two_stores().await;
    for round in 0..ROUNDS {
        let at = round * 1_000;
        let keys: Vec<String> = (0..OPS).map(|i| format!("r{round}-{i}")).collect();
        for key in &keys {
            relay.submit(new_op(key), at).await.unwrap();
        }
        // The relay claims the calls and records their answers, two
        // at a time, while the provider's events for the same
        // operations arrive in two batches of their own.
        let relaying = async {
            let claimed = relay.claim(at, OPS as u32, 60_000, &ClaimScope::All).await?;
            let mut answered = HashMap::new();
            for pair in claimed.chunks(2) {
                // Completions in descending id order: the store
                // locks the messages in id order whatever it is given.
                let completions: Vec<Completion> = pair
                    .iter()
                    .rev()
                    .map(|c| Completion {
                        outbox_id: c.outbox_id,
                        lease_token: c.lease_token,
                        operation_id: c.operation.id,
                        attempt: None,
                        transition: Transition::Succeeded {
                            provider_ref: Some("ch_call".into()),
                            response: None,
                        },
                    })
                    .collect();
                let recorded = relay.complete(completions, at + 1).await?;
                let keys = pair.iter().rev().map(|c| c.operation.idempotency_key.clone());
                answered.extend(keys.zip(recorded));
            }
            Ok::<_, StoreError>(answered)
        };
        let mut events: Vec<NewEvent> = keys.iter().map(|k| settles(&format!("evt_{k}"), k)).collect();
        let mut later = events.split_off(OPS / 2);
        later.reverse();
        let (answered, early, late) =
            tokio::join!(relaying, inbox.receive(events, at + 1), inbox.receive(later, at + 1));
        let answered = answered.expect("the relay neither deadlocks nor fails");
        early.expect("the inbox neither deadlocks nor fails");
        late.expect("the inbox neither deadlocks nor fails");
        for key in &keys {
            let op = relay.operation(key).await.unwrap().unwrap();
            assert_eq!(op.status, OperationStatus::Succeeded, "round {round}: {key}");
            assert_eq!(settled_changes(&relay, op.id).await, 1, "round {round}: {key} settled once");
            let message: Option<String> =
                sqlx::query_scalar("SELECT state FROM outbox WHERE operation_id = $1")
                    .bind(op.id)
                    .fetch_optional(relay.pool())
                    .await
                    .unwrap();
            // Whichever came first settled it; the other saw it settled. The
            // relay's success deletes its message; an event's leaves it done.
            let effects = ledger_effects(&relay, &format!("evt_{key}")).await;
            let (expected, left) = match answered.get(key) {
                Some(Recorded::Applied) => (LedgerEffect::Confirmed, None),
                Some(Recorded::SettledElsewhere) | None => (LedgerEffect::Resolved, Some("done")),
                Some(other) => panic!("round {round}: {key}: the answer was {other:?}"),
            };
            assert_eq!(message.as_deref(), left, "round {round}: {key}");
            assert_eq!(effects, [Some(expected)], "round {round}: {key}: {:?}", answered.get(key));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_forward_result_racing_a_new_claim_is_applied_or_lost_never_both() {
    let (_schema, _, a, b) = two_stores().await;
    let delivered = |c: &crate::ClaimedForward| ForwardCompletion {
        id: c.id,
        lease_token: c.lease_token,
        event_seq: c.event.seq,
        step: None,
        transition: ForwardTransition::Delivered,
    };
    for round in 0..ROUNDS * 2 {
        let at = round * 1_000;
        let event = NewEvent { report: None, ..settles(&format!("evt_{round}"), "nobody") };
        a.receive(vec![event], at).await.unwrap();
        let old = a.claim_forwards(at, 1, 100).await.unwrap().remove(0);
        // The first worker's result arrives as its lease runs out and
        // another process claims the forward again.
        let (recorded, claimed) = tokio::join!(
            a.complete_forwards(vec![delivered(&old)], at + 100),
            b.claim_forwards(at + 100, 10, 100)
        );
        let (recorded, claimed) = (recorded.unwrap(), claimed.unwrap());
        let state = a.event("hooks", &format!("evt_{round}")).await.unwrap().unwrap().forward_state;
        match (recorded.as_slice(), claimed.as_slice()) {
            ([Recorded::Applied], []) => assert_eq!(state.as_deref(), Some("done"), "round {round}"),
            ([Recorded::LeaseLost], [again]) => {
                assert_eq!((again.id, again.attempts), (old.id, 2), "round {round}");
                assert_eq!(state.as_deref(), Some("pending"), "round {round}");
                let done = b.complete_forwards(vec![delivered(again)], at + 150).await.unwrap();
                assert_eq!(done, [Recorded::Applied], "round {round}");
            }
            other => panic!("round {round}: applied and claimed again, or neither: {other:?}"),
        }
    }
    assert_eq!(a.counts().await.unwrap().forwards_pending, 0);
}

/// A batch of results locks its messages in id order, as every writer
/// does, whatever order it is given. Another transaction holds the later
/// message; the batch, given the later one first, waits for it, and by
/// then has locked the earlier one: the other transaction cannot take it
/// (`NOWAIT`). Had the batch locked in the order given, it would have
/// waited first, holding nothing, and the two would deadlock as soon as
/// the other transaction waited for the earlier message. The batch's plan
/// is made beside 5,000 messages of another provider: on a table of a few
/// rows PostgreSQL reads `outbox` in id order whatever order the batch
/// has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_results_locks_its_messages_in_id_order() {
    let succeeded = || Transition::Succeeded { provider_ref: Some("ch_call".into()), response: None };
    batch_locks_in_id_order([succeeded(), succeeded()]).await;
}

/// The same for a batch that deletes one message (delivered) and updates
/// the other (failed), whichever of the two is the earlier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_deletes_and_updates_locks_its_messages_in_id_order() {
    let succeeded = || Transition::Succeeded { provider_ref: Some("ch_call".into()), response: None };
    let failed = || Transition::Failed { error: "HTTP 402".into(), response: None };
    batch_locks_in_id_order([succeeded(), failed()]).await;
    batch_locks_in_id_order([failed(), succeeded()]).await;
}

/// Completes the earlier and the later of two claimed messages with
/// `transitions` (in that order), given to the batch later first, while
/// another transaction holds the later one.
async fn batch_locks_in_id_order(transitions: [Transition; 2]) {
    let (_schema, _, relay, other) = two_stores().await;
    for key in ["first", "second"] {
        relay.submit(new_op(key), 0).await.unwrap();
    }
    sqlx::query(
        "INSERT INTO failwell_outbox (provider, operation, payload) \
         SELECT 'elsewhere', 'charge', jsonb_build_object('seq', g) FROM generate_series(1, 5000) g",
    )
    .execute(relay.pool())
    .await
    .unwrap();
    sqlx::query("ANALYZE outbox, operations").execute(relay.pool()).await.unwrap();
    let claimed = relay.claim(0, 2, 60_000, &ClaimScope::Providers(vec!["payments".into()])).await.unwrap();
    let ids: Vec<i64> = claimed.iter().map(|c| c.outbox_id).collect();
    let (earlier, later) = (ids[0].min(ids[1]), ids[0].max(ids[1]));
    let mut holder = other.pool().begin().await.unwrap();
    let holder_pid: i32 =
        sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut *holder).await.unwrap();
    sqlx::query("SELECT id FROM outbox WHERE id = $1 FOR UPDATE")
        .bind(later)
        .execute(&mut *holder)
        .await
        .unwrap();
    let [for_earlier, for_later] = transitions;
    let mut completions: Vec<Completion> = claimed
        .iter()
        .map(|c| {
            crate::tests::completion(
                c,
                None,
                if c.outbox_id == earlier { &for_earlier } else { &for_later }.clone(),
            )
        })
        .collect();
    completions.sort_by_key(|c| std::cmp::Reverse(c.outbox_id));
    let probing = async {
        let deadline = Instant::now() + Duration::from_secs(10);
        while blocked_by(other.pool(), holder_pid).await.is_none() {
            assert!(Instant::now() < deadline, "the batch never waited for the later message");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let taken = sqlx::query("SELECT id FROM outbox WHERE id = $1 FOR UPDATE NOWAIT")
            .bind(earlier)
            .execute(&mut *holder)
            .await;
        holder.rollback().await.unwrap();
        taken
    };
    let (recorded, taken) = tokio::join!(relay.complete(completions, 1), probing);
    let error = taken.expect_err("the batch had not locked the earlier message while it waited");
    assert_eq!(error.as_database_error().and_then(|e| e.code()).as_deref(), Some("55P03"), "{error}");
    assert_eq!(recorded.unwrap(), [Recorded::Applied, Recorded::Applied]);
}
