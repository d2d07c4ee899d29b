//! PostgreSQL only: a message whose delivery succeeded leaves the outbox
//! when its result is recorded, and everything that read it still reads
//! the same (migration `0026_delivered_leave_outbox.sql`).

use super::store;
use crate::prelude::*;
use crate::tests::{completion, record};
use crate::{ClaimScope, OperationStatus, Recorded, Transition};
use failwell_policy::Outcome;

/// A row of the contract's view: idempotency key, status, delivery,
/// attempts, last error, ordering key, and whether it has an
/// `available_at`.
type ViewRow = (String, String, String, i64, Option<String>, Option<String>, bool);

/// `key`'s message: its state, or `None` when it has left the outbox.
async fn message_state(s: &super::S, key: &str) -> Option<String> {
    sqlx::query_scalar(
        "SELECT x.state::text FROM outbox x JOIN operations o ON o.id = x.operation_id WHERE o.idempotency_key = $1",
    )
    .bind(key)
    .fetch_optional(s.pool())
    .await
    .unwrap()
}

#[tokio::test]
async fn a_delivered_message_leaves_the_outbox_and_the_contract_still_shows_its_outcome() {
    let (_schema, s) = store().await;
    sqlx::query(
        "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, ordering_key) VALUES \
         ('payments', 'charge', '{\"amount\": 1}', 'ok', 'customer-7'), \
         ('payments', 'charge', '{\"amount\": 2}', 'refused', NULL), \
         ('payments', 'charge', '{\"amount\": 3}', 'again', NULL), \
         ('payments', 'charge', '{\"amount\": 4}', 'next', 'customer-7')",
    )
    .execute(s.pool())
    .await
    .unwrap();
    // The database's clock, which the view's trigger read.
    let now: i64 = sqlx::query_scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
        .fetch_one(s.pool())
        .await
        .unwrap();
    let claimed = s.claim(now, 10, 60_000, &ClaimScope::All).await.unwrap();
    let keys: Vec<&str> = claimed.iter().map(|c| c.operation.idempotency_key.as_str()).collect();
    assert_eq!(keys, ["ok", "refused", "again"], "the key's second message waits for its first");
    let outcome = |key: &str| match key {
        "ok" => {
            (Outcome::Succeeded, Transition::Succeeded { provider_ref: Some("ch_1".into()), response: None })
        }
        "refused" => (Outcome::Failed, Transition::Failed { error: "HTTP 402".into(), response: None }),
        _ => (
            Outcome::Failed,
            Transition::Retry { available_at_ms: now + 60_000, delay_ms: 60_000, error: "HTTP 503".into() },
        ),
    };
    let results = claimed
        .iter()
        .map(|c| {
            let (o, t) = outcome(&c.operation.idempotency_key);
            completion(c, Some(record(o)), t)
        })
        .collect();
    let recorded = s.complete(results, now + 1).await.unwrap();
    assert!(recorded.iter().all(|r| matches!(r, Recorded::Applied)), "{recorded:?}");

    // Only the delivered message left; the others stay as before.
    assert_eq!(message_state(&s, "ok").await, None);
    assert_eq!(message_state(&s, "refused").await.as_deref(), Some("done"));
    assert_eq!(message_state(&s, "again").await.as_deref(), Some("pending"));
    // Its ordering key's next message is due at once.
    let next = s.claim(now + 2, 10, 60_000, &ClaimScope::All).await.unwrap();
    let next_keys: Vec<&str> = next.iter().map(|c| c.operation.idempotency_key.as_str()).collect();
    assert_eq!(next_keys, ["next"]);

    // The contract's view reads the delivered operation as before.
    let rows: Vec<ViewRow> = sqlx::query_as(
        "SELECT idempotency_key, status, delivery, attempts, last_error, ordering_key, available_at IS NOT NULL \
         FROM failwell_outbox ORDER BY id",
    )
    .fetch_all(s.pool())
    .await
    .unwrap();
    let row = |k: &str, st: &str, d: &str, a: i64, e: Option<&str>, ok: Option<&str>| -> ViewRow {
        (k.to_owned(), st.to_owned(), d.to_owned(), a, e.map(str::to_owned), ok.map(str::to_owned), true)
    };
    assert_eq!(
        rows,
        [
            row("ok", "succeeded", "done", 1, None, None),
            row("refused", "failed", "done", 1, Some("HTTP 402"), None),
            row("again", "pending", "pending", 1, Some("HTTP 503"), None),
            row("next", "pending", "pending", 1, None, Some("customer-7")),
        ]
    );

    // The store reads the operation and its history as before: created,
    // then the call that settled it; nothing was purged.
    let ok = s.operation("ok").await.unwrap().unwrap();
    assert_eq!(
        (ok.status, ok.provider_ref.as_deref(), ok.attempts),
        (OperationStatus::Succeeded, Some("ch_1"), 1)
    );
    let history = s.history(ok.id).await.unwrap();
    let changes: Vec<(&str, &str)> = history.iter().map(|h| (h.subject, h.change.as_str())).collect();
    assert!(changes.iter().all(|(_, change)| *change != "purged"), "{changes:?}");
    assert!(
        changes.iter().any(|(subject, _)| *subject == "attempt"),
        "the call is in the history: {changes:?}"
    );
    assert_eq!(s.counts().await.unwrap().pending, 2);

    // A late result of the delivered message (its lease taken over and
    // settled meanwhile) finds nothing to move, and changes nothing.
    let late = completion(
        &claimed[0],
        Some(record(Outcome::Failed)),
        Transition::Failed { error: "late".into(), response: None },
    );
    assert!(matches!(s.complete(vec![late], now + 3).await.unwrap()[..], [Recorded::LeaseLost]));
    assert_eq!(s.operation("ok").await.unwrap().unwrap().status, OperationStatus::Succeeded);

    // Anyone else's delete of an open message is still a purge.
    sqlx::query(
        "DELETE FROM outbox WHERE operation_id = (SELECT id FROM operations WHERE idempotency_key = 'again')",
    )
    .execute(s.pool())
    .await
    .unwrap();
    let again = s.operation("again").await.unwrap().unwrap();
    let purged = s.history(again.id).await.unwrap().into_iter().filter(|h| h.change == "purged").count();
    assert_eq!(purged, 1);
    // Retention deletes the message that ended otherwise; the view keeps
    // showing the delivered one.
    assert_eq!(s.delete_delivered(now + 10, 100).await.unwrap(), 1);
    let shown: Vec<String> = sqlx::query_scalar("SELECT idempotency_key FROM failwell_outbox ORDER BY id")
        .fetch_all(s.pool())
        .await
        .unwrap();
    assert_eq!(shown, ["ok", "next"]);
}
