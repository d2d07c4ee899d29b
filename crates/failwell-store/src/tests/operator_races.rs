//! PostgreSQL: operators racing each other and the other writers on one
//! database, as separate failwell processes do (two stores, each with its
//! own pool, on one schema). Each race is run many rounds; with a missing
//! or misordered lock some round applies both sides, or deadlocks (which
//! PostgreSQL breaks by failing one side). Last, both stores are shown the
//! same operator scenario and must answer alike.

use failwell_policy::{Discrepancy, DiscrepancyKind, Outcome};
use serde_json::{Value, json};

use crate::prelude::*;

use crate::{
    AlertBody, AlertClaim, AlertSent, AttemptKind, AttemptRecord, Channel, ClaimScope, Completion,
    DeadLetterFilter, DeadLetterKind, ManualResolution, NewOperation, NewReport, OperationStatus,
    PostgresStore, Reconciled, Resolution, SqliteStore, Synchronous, Transition,
};

const ROUNDS: i64 = 25;
/// Replays happen this late, so a replayed message is never due when a
/// later round claims its own new one.
const LATER: i64 = 1_000_000;

/// Two "processes" on one fresh schema.
async fn two_stores() -> (super::postgres::Schema, PostgresStore, PostgresStore) {
    let (schema, url) = super::postgres::schema().await;
    let a = PostgresStore::open(&url, 4).await.unwrap();
    let b = PostgresStore::open(&url, 4).await.unwrap();
    (schema, a, b)
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

fn call(outcome: Outcome, at: i64) -> AttemptRecord {
    AttemptRecord {
        kind: AttemptKind::Call,
        started_at_ms: at,
        duration_ms: 7,
        status_code: Some(503),
        error_kind: None,
        classification: Some("retryable"),
        outcome,
        decision: "given up".into(),
    }
}

/// Submits `key` at `at` and ends its only call with `transition`;
/// returns the outbox message's and the operation's ids.
async fn attempted<S: crate::Backend>(s: &S, key: &str, at: i64, transition: Transition) -> (i64, i64) {
    s.submit(new_op(key), at).await.unwrap();
    let c = s.claim(at, 1, 1_000, &ClaimScope::All).await.unwrap().remove(0);
    assert_eq!(c.operation.idempotency_key, key);
    let outcome =
        if matches!(transition, Transition::Unknown { .. }) { Outcome::Unknown } else { Outcome::Failed };
    let done = Completion {
        outbox_id: c.outbox_id,
        lease_token: c.lease_token,
        operation_id: c.operation.id,
        attempt: Some(call(outcome, at)),
        transition,
    };
    s.complete(vec![done], at + 1).await.unwrap();
    (c.outbox_id, c.operation.id)
}

async fn dead_message<S: crate::Backend>(s: &S, key: &str, at: i64) -> (i64, i64) {
    attempted(s, key, at, Transition::DeadLetter { error: "attempts exhausted: HTTP 503".into() }).await
}

async fn unknown<S: crate::Backend>(s: &S, key: &str, at: i64) -> i64 {
    let unknown = Transition::Unknown { error: "timeout".into(), reconcile_at_ms: at + 100 };
    attempted(s, key, at, unknown).await.1
}

/// A webhook event and its forward, given up at `at`, written directly
/// (the same statements on either database); returns the forward's id.
macro_rules! dead_forward {
    ($pool:expr, $event_id:expr, $payload:expr, $at:expr) => {{
        let seq: i64 = sqlx::query_scalar(
            "INSERT INTO inbox_events (integration, event_id, payload, headers, received_at_ms) \
             VALUES ('hooks', $1, $2, '{}', $3) RETURNING seq",
        )
        .bind($event_id)
        .bind($payload.to_vec())
        .bind($at - 50)
        .fetch_one($pool)
        .await
        .unwrap();
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO forwards (event_seq, state, available_at_ms, attempts, last_error, dead_at_ms, \
             created_at_ms, updated_at_ms, changed_by) \
             VALUES ($1, 'dead', $2, 5, 'attempts exhausted: HTTP 500', $3, $2, $3, 'forwarder') RETURNING id",
        )
        .bind(seq)
        .bind($at - 50)
        .bind($at)
        .fetch_one($pool)
        .await
        .unwrap();
        id
    }};
}

/// How many history entries of `subject` record `change`.
async fn changes<S: crate::Backend>(s: &S, operation_id: i64, subject: &str, change: &str) -> usize {
    let history = s.history(operation_id).await.unwrap();
    history.iter().filter(|h| h.subject == subject && h.change == change).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_replaying_one_dead_letter_replay_it_once() {
    let (_schema, a, b) = two_stores().await;
    for round in 0..ROUNDS {
        let (id, op) = dead_message(&a, &format!("k{round}"), round * 10).await;
        let (x, y) = tokio::join!(
            a.replay(DeadLetterKind::Message, id, Channel::Cli, LATER + round),
            b.replay(DeadLetterKind::Message, id, Channel::Api, LATER + round),
        );
        let (x, y) = (x.unwrap(), y.unwrap());
        assert!(x ^ y, "round {round}: exactly one replay succeeds, got {x} and {y}");
        assert_eq!(changes(&a, op, "message", "dead -> pending").await, 1, "round {round}");
        assert_eq!(changes(&a, op, "operation", "failed -> pending").await, 1, "round {round}");
        let op = a.operation(&format!("k{round}")).await.unwrap().unwrap();
        assert_eq!((op.status, op.dead_letter), (OperationStatus::Pending, false));
    }
    // Every replayed message is due again, once.
    assert_eq!(b.claim(2 * LATER, 100, 1_000, &ClaimScope::All).await.unwrap().len(), ROUNDS as usize);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_racing_a_replay_does_exactly_one_of_them() {
    let (_schema, a, b) = two_stores().await;
    for round in 0..ROUNDS {
        let key = format!("k{round}");
        let (id, op) = dead_message(&a, &key, round * 10).await;
        // Each store purges in one half of the rounds and replays in the other.
        let (purger, replayer) = if round % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let (purged, replayed) = tokio::join!(
            purger.purge(DeadLetterKind::Message, id, Channel::Api, LATER + round),
            replayer.replay(DeadLetterKind::Message, id, Channel::Cli, LATER + round),
        );
        let (purged, replayed) = (purged.unwrap(), replayed.unwrap());
        assert!(purged ^ replayed, "round {round}: purged {purged}, replayed {replayed}");
        let status = a.operation(&key).await.unwrap().unwrap().status;
        assert_eq!(changes(&a, op, "message", "purged").await, usize::from(purged), "round {round}");
        assert_eq!(
            changes(&a, op, "message", "dead -> pending").await,
            usize::from(replayed),
            "round {round}"
        );
        if purged {
            assert_eq!(status, OperationStatus::Failed, "round {round}: a purge leaves the operation failed");
        } else {
            assert_eq!(status, OperationStatus::Pending, "round {round}");
        }
        assert!(a.dead_letter(DeadLetterKind::Message, id).await.unwrap().is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_operators_replay_or_purge_a_dead_forward_once() {
    let (_schema, a, b) = two_stores().await;
    for round in 0..ROUNDS {
        let id = dead_forward!(a.pool(), format!("evt_{round}"), b"{}", 100 + round);
        let kind = DeadLetterKind::Forward;
        let (x, y) = match round % 3 {
            0 => {
                tokio::join!(a.replay(kind, id, Channel::Cli, LATER), b.replay(kind, id, Channel::Api, LATER))
            }
            1 => tokio::join!(a.purge(kind, id, Channel::Cli, LATER), b.purge(kind, id, Channel::Api, LATER)),
            _ => {
                tokio::join!(a.purge(kind, id, Channel::Cli, LATER), b.replay(kind, id, Channel::Api, LATER))
            }
        };
        let (x, y) = (x.unwrap(), y.unwrap());
        assert!(x ^ y, "round {round}: exactly one succeeds, got {x} and {y}");
        let history: Vec<String> =
            sqlx::query_scalar("SELECT change FROM history WHERE subject = 'forward' AND subject_id = $1")
                .bind(id)
                .fetch_all(a.pool())
                .await
                .unwrap();
        assert_eq!(history.len(), 1, "round {round}: {history:?}");
    }
    assert!(a.dead_letters(DeadLetterFilter::default(), 100).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_resolutions_settle_an_operation_once() {
    let (_schema, a, b) = two_stores().await;
    for round in 0..ROUNDS {
        let key = format!("k{round}");
        let op = unknown(&a, &key, round * 10).await;
        let (x, y) = tokio::join!(
            a.resolve(&key, Outcome::Succeeded, Some("ch_1".into()), "paid".into(), Channel::Cli, LATER),
            b.resolve(&key, Outcome::Failed, None, "not there".into(), Channel::Api, LATER),
        );
        let (x, y) = (x.unwrap(), y.unwrap());
        let winner = match (x, y) {
            (ManualResolution::Resolved, ManualResolution::NotOpen(OperationStatus::Succeeded)) => {
                OperationStatus::Succeeded
            }
            (ManualResolution::NotOpen(OperationStatus::Failed), ManualResolution::Resolved) => {
                OperationStatus::Failed
            }
            other => panic!("round {round}: not exactly one resolution: {other:?}"),
        };
        let stored = a.operation(&key).await.unwrap().unwrap();
        assert_eq!(stored.status, winner, "round {round}");
        let history = a.history(op).await.unwrap();
        let settled: Vec<&str> = history
            .iter()
            .filter(|h| {
                h.subject == "operation"
                    && ["unknown ", "succeeded ", "failed "].iter().any(|from| h.change.starts_with(from))
            })
            .map(|h| h.change.as_str())
            .collect();
        assert_eq!(settled.len(), 1, "round {round}: {settled:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resolution_racing_a_reconciliation_applies_exactly_one() {
    let (_schema, a, b) = two_stores().await;
    for round in 0..ROUNDS {
        let key = format!("k{round}");
        let op = unknown(&a, &key, round * 10).await;
        let lookup = Reconciled {
            operation_id: op,
            attempt: Some(AttemptRecord { kind: AttemptKind::Lookup, ..call(Outcome::Succeeded, LATER) }),
            resolution: Resolution::Found {
                outcome: Outcome::Succeeded,
                provider_ref: Some("ch_9".into()),
                response: None,
            },
        };
        let (resolved, reconciled) = tokio::join!(
            a.resolve(&key, Outcome::Failed, None, "refunded".into(), Channel::Ui, LATER),
            b.reconcile(lookup, LATER),
        );
        reconciled.unwrap();
        let lookups = a.attempts(op).await.unwrap().iter().filter(|r| r.kind == AttemptKind::Lookup).count();
        let status = a.operation(&key).await.unwrap().unwrap().status;
        match resolved.unwrap() {
            ManualResolution::Resolved => {
                assert_eq!((status, lookups), (OperationStatus::Failed, 0), "round {round}");
                assert_eq!(changes(&a, op, "operation", "unknown -> failed").await, 1);
            }
            ManualResolution::NotOpen(OperationStatus::Succeeded) => {
                assert_eq!((status, lookups), (OperationStatus::Succeeded, 1), "round {round}");
                assert_eq!(changes(&a, op, "operation", "unknown -> succeeded").await, 1);
            }
            other => panic!("round {round}: {other:?}"),
        }
    }
}

/// Everything an operator reads and does, on one store: the answers,
/// as JSON. Forward dead letters are written beforehand by the caller
/// (ids 1 and 2: a JSON body and one that is not JSON).
async fn operator_view<S: crate::Backend>(s: &S) -> Value {
    let (message, dead_op) = dead_message(s, "k1", 100).await;
    let unknown_op = unknown(s, "k2", 200).await;
    s.submit(new_op("k3"), 300).await.unwrap();
    s.ack_dead_letters(Channel::Cli, 150).await.unwrap();
    let since = DeadLetterFilter { since_ms: Some(150), ..DeadLetterFilter::default() };
    let hooks = DeadLetterFilter { integration: Some("hooks".into()), ..DeadLetterFilter::default() };
    let messages = DeadLetterFilter { kind: Some(DeadLetterKind::Message), ..DeadLetterFilter::default() };
    let listed = json!({
        "all": s.dead_letters(DeadLetterFilter::default(), 10).await.unwrap(),
        "limited": s.dead_letters(DeadLetterFilter::default(), 1).await.unwrap(),
        "since": s.dead_letters(since, 10).await.unwrap(),
        "hooks": s.dead_letters(hooks, 10).await.unwrap(),
        "messages": s.dead_letters(messages, 10).await.unwrap(),
        "message": s.dead_letter(DeadLetterKind::Message, message).await.unwrap(),
        "forward": s.dead_letter(DeadLetterKind::Forward, 2).await.unwrap(),
        "wrong kind": s.dead_letter(DeadLetterKind::Forward, 99).await.unwrap(),
    });
    let stats_before = s.stats(400, 250, &["payments".into(), "idle".into()]).await.unwrap();
    let resolutions = json!([
        s.resolve("k2", Outcome::Succeeded, Some("ch_2".into()), "paid".into(), Channel::Ui, 500)
            .await
            .unwrap(),
        s.resolve("k2", Outcome::Failed, None, "again".into(), Channel::Ui, 501).await.unwrap(),
        s.resolve("k3", Outcome::Failed, None, "pending".into(), Channel::Cli, 502).await.unwrap(),
        s.resolve("nobody", Outcome::Failed, None, "missing".into(), Channel::Cli, 503).await.unwrap(),
        s.resolve("k3", Outcome::Unknown, None, "?".into(), Channel::Cli, 504).await.is_err(),
    ]);
    let report = |provider: &str, at: i64, discrepancies: Vec<Discrepancy>| NewReport {
        provider: provider.into(),
        window_from_ms: 0,
        window_to_ms: at,
        started_at_ms: at - 1,
        finished_at_ms: at,
        actor: "operator:cli".into(),
        ours: 3,
        theirs: 2,
        alert: !discrepancies.is_empty(),
        discrepancies,
        report: json!({"provider": provider, "at": at}),
        text: format!("{provider} at {at}"),
    };
    let found = vec![
        Discrepancy {
            kind: DiscrepancyKind::MissingAtProvider,
            reference: Some("ref-k1".into()),
            operation_id: Some(dead_op),
            provider_ref: None,
            detail: "we gave up, they have nothing".into(),
        },
        Discrepancy {
            kind: DiscrepancyKind::MissingHere,
            reference: None,
            operation_id: None,
            provider_ref: Some("ch_x,ch_y".into()),
            detail: "theirs only".into(),
        },
    ];
    let first = s.save_report(report("payments", 600, found)).await.unwrap();
    let second = s.save_report(report("payments", 700, vec![])).await.unwrap();
    s.save_report(report("shipping", 650, vec![])).await.unwrap();
    // Reports with discrepancies were queued for the alert sink; the
    // outcome of each send shows on the report.
    assert_eq!(s.claim_alert(AlertClaim::Report(second), 705, 60_000).await.unwrap(), None, "none found");
    let alert = s.claim_alert(AlertClaim::Report(first), 605, 60_000).await.unwrap().unwrap();
    assert_eq!(alert.body, AlertBody::Report(first));
    s.alert_sent(&alert, AlertSent::Failed { error: "sink down".into(), retry_at_ms: 608 }).await.unwrap();
    let alert = s.claim_alert(AlertClaim::Due, 608, 60_000).await.unwrap().unwrap();
    s.alert_sent(&alert, AlertSent::At(610)).await.unwrap();
    let replays = json!([
        s.replay(DeadLetterKind::Forward, 1, Channel::Api, 800).await.unwrap(),
        s.purge(DeadLetterKind::Forward, 2, Channel::Api, 801).await.unwrap(),
        s.purge(DeadLetterKind::Forward, 1, Channel::Api, 802).await.unwrap(),
        s.replay(DeadLetterKind::Message, message, Channel::Cli, 803).await.unwrap(),
    ]);
    json!({
        "listed": listed,
        "stats before": stats_before,
        "resolutions": resolutions,
        "replays": replays,
        "stats after": s.stats(900, 1_000, &[]).await.unwrap(),
        "dead history": s.history(dead_op).await.unwrap(),
        "unknown history": s.history(unknown_op).await.unwrap(),
        "k2": s.operation("k2").await.unwrap(),
        "between": s.operations_between("payments", 100, 300).await.unwrap(),
        "other provider": s.operations_between("shipping", 0, 1_000).await.unwrap(),
        "by reference": s
            .operations_by_reference("payments", &["ref-k3".into(), "ref-k1".into(), "ref-none".into()])
            .await
            .unwrap(),
        "no references": s.operations_by_reference("payments", &[]).await.unwrap(),
        "reports": s.reports(10).await.unwrap(),
        "latest": s.latest_reports().await.unwrap(),
        "first": s.report(first).await.unwrap(),
        "missing report": s.report(99).await.unwrap(),
    })
}

#[tokio::test]
async fn both_stores_show_operators_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let sqlite = SqliteStore::open(&url, Synchronous::Normal).await.unwrap();
    let (_schema, postgres, _) = two_stores().await;
    for (event, payload) in [("evt_json", &b"{\"type\":\"charge\"}"[..]), ("evt_text", &b"not json"[..])] {
        dead_forward!(sqlite.pool(), event, payload, 120);
        dead_forward!(postgres.pool(), event, payload, 120);
    }
    let on_sqlite = operator_view(&sqlite).await;
    let on_postgres = operator_view(&postgres).await;
    // The scenario did what it says (so equality below means something).
    assert_eq!(on_sqlite["listed"]["all"].as_array().unwrap().len(), 3);
    assert_eq!(on_sqlite["listed"]["forward"]["payload"], json!("not json"));
    assert_eq!(on_sqlite["listed"]["hooks"][1]["payload"]["type"], json!("charge"));
    assert_eq!(
        on_sqlite["resolutions"],
        json!(["resolved", {"not_open": "succeeded"}, {"not_open": "pending"}, "not_found", true])
    );
    assert_eq!(on_sqlite["replays"], json!([true, true, false, true]));
    assert_eq!(on_sqlite["first"]["alerted_at_ms"], json!(610));
    assert_eq!(on_sqlite["by reference"].as_array().unwrap().len(), 2);
    let last = on_sqlite["dead history"].as_array().unwrap().iter().rev().find(|h| h["subject"] == "report");
    assert_eq!(last.unwrap()["change"], json!("discrepancy missing_at_provider (report 1)"));
    for (key, value) in on_sqlite.as_object().unwrap() {
        assert_eq!(&on_postgres[key], value, "{key} differs between SQLite and PostgreSQL");
    }
    assert_eq!(on_postgres, on_sqlite);
}
