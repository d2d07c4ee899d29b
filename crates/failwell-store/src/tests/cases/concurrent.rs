//! What only a database with concurrent writers shows (PostgreSQL and
//! MySQL; SQLite has one writer at a time): transactions that commit in
//! another order than they took their ids, and an application's
//! transaction left open.

/// The cases of concurrent writers, for the `S` and `store()` in scope.
macro_rules! concurrent_cases {
    () => {
        mod concurrent {
            use std::time::Duration;

            use serde_json::json;

            use super::store;
            use failwell_policy::Outcome;

            use crate::prelude::*;
            use crate::{
                AttemptKind, AttemptRecord, ClaimScope, Claimed, Completion, Leased, Message, Outbox, Submitted,
                Transition,
            };

            fn charge(key: &str) -> Message {
                Message {
                    idempotency_key: Some(key.into()),
                    ..Message::new("payments", "charge", json!({"amount": 100, "reference": key}))
                }
            }

            /// `work`'s result; it must not wait for an application's open
            /// transaction (10 s is far more than any step takes).
            async fn promptly<T>(what: &str, work: impl std::future::Future<Output = T>) -> T {
                tokio::time::timeout(Duration::from_secs(10), work)
                    .await
                    .unwrap_or_else(|_| panic!("{what} waited for an open transaction"))
            }

            async fn claim(s: &super::S, token: i64) -> Vec<Claimed> {
                promptly("a claim", s.claim(token, 10, 60_000, &ClaimScope::All)).await.unwrap()
            }

            fn result(c: &Claimed, transition: Transition) -> Completion {
                Completion {
                    outbox_id: c.outbox_id,
                    lease_token: c.lease_token,
                    operation_id: c.operation.id,
                    attempt: Some(AttemptRecord {
                        kind: AttemptKind::Call,
                        started_at_ms: 1,
                        duration_ms: 2,
                        status_code: Some(503),
                        error_kind: None,
                        classification: None,
                        outcome: Outcome::Failed,
                        decision: "retry".into(),
                    }),
                    transition,
                }
            }

            /// Ids are taken at insert and transactions commit in any
            /// order: a message with a lower id that commits after one
            /// with a higher id was claimed is still claimed (no id
            /// watermark skips it), and a claim never waits for the
            /// transaction that is still open.
            #[tokio::test]
            async fn a_lower_id_committed_later_is_never_skipped() {
                let (_d, s) = store().await;
                let mut first = s.begin().await.unwrap();
                let Submitted::Created(early) = Outbox::enqueue(&mut first, &charge("early-id"), 1).await.unwrap()
                else {
                    panic!("not created")
                };
                let mut second = s.begin().await.unwrap();
                let Submitted::Created(late) = Outbox::enqueue(&mut second, &charge("late-id"), 1).await.unwrap()
                else {
                    panic!("not created")
                };
                assert!(early.id < late.id);
                second.commit().await.unwrap();
                let claimed = claim(&s, 2).await;
                assert_eq!(claimed.len(), 1);
                assert_eq!(claimed[0].operation.idempotency_key, "late-id");
                first.commit().await.unwrap();
                let claimed = claim(&s, 3).await;
                assert_eq!(claimed.len(), 1, "the lower id is claimed after it commits");
                assert_eq!(claimed[0].operation.idempotency_key, "early-id");
            }

            /// While an application's transaction holds a message it has
            /// not committed, the relay claims, renews its leases, records
            /// results (a retry, then a success) and claims again, waiting
            /// for none of it.
            #[tokio::test]
            async fn an_open_transaction_holds_up_no_step_of_delivery() {
                let (_d, s) = store().await;
                let mut tx = s.begin().await.unwrap();
                Outbox::enqueue(&mut tx, &charge("ready"), 1).await.unwrap();
                tx.commit().await.unwrap();
                let mut open = s.begin().await.unwrap();
                Outbox::enqueue(&mut open, &charge("uncommitted"), 1).await.unwrap();
                let claimed = claim(&s, 7).await;
                assert_eq!(claimed.len(), 1);
                let leases = vec![(claimed[0].outbox_id, claimed[0].lease_token)];
                let renewed = promptly("a renewal", s.renew(Leased::Outbox, leases, 120_000)).await.unwrap();
                assert_eq!(renewed, 1);
                let retry = Transition::Retry { available_at_ms: 2, delay_ms: 1, error: "503".into() };
                promptly("a result", s.complete(vec![result(&claimed[0], retry)], 3)).await.unwrap();
                let again = claim(&s, 8).await;
                assert_eq!(again.len(), 1, "the retry is claimed again");
                let done = Transition::Succeeded { provider_ref: None, response: None };
                promptly("a result", s.complete(vec![result(&again[0], done)], 4)).await.unwrap();
                assert!(claim(&s, 9).await.is_empty());
                open.commit().await.unwrap();
                let last = claim(&s, 10).await;
                assert_eq!(last.len(), 1);
                assert_eq!(last[0].operation.idempotency_key, "uncommitted");
            }

            /// Two claims at once on one queue take each message once
            /// between them.
            #[tokio::test]
            async fn claims_at_the_same_time_take_each_message_once() {
                let (_d, s) = store().await;
                let mut tx = s.begin().await.unwrap();
                for n in 0..40 {
                    Outbox::enqueue(&mut tx, &charge(&format!("m-{n:02}")), 1).await.unwrap();
                }
                tx.commit().await.unwrap();
                let (a, b) = tokio::join!(
                    s.claim(4, 30, 60_000, &ClaimScope::All),
                    s.claim(5, 30, 60_000, &ClaimScope::All)
                );
                let mut keys: Vec<String> =
                    a.unwrap().into_iter().chain(b.unwrap()).map(|c| c.operation.idempotency_key).collect();
                keys.sort();
                let taken = keys.len();
                keys.dedup();
                assert_eq!(keys.len(), taken, "a message was claimed twice");
                assert!(taken >= 30, "only {taken} claimed");
                let rest = claim(&s, 6).await.len();
                assert_eq!(taken + rest, 40);
            }

            /// Debits from one account by eight writers at once never
            /// overdraw it, and one transfer id sent by two writers with
            /// other accounts (so no account lock orders them) is applied
            /// once: the other writer is told the id is taken.
            #[tokio::test]
            async fn concurrent_transfers_never_overdraw_and_apply_an_id_once() {
                use crate::{NewAccount, NewTransfer, TransferRefusal, TransferResult};

                let (_d, s) = store().await;
                for (id, floor) in [("world", None), ("hot", Some(0)), ("a", Some(0)), ("b", Some(0))] {
                    s.open_account(NewAccount { id: id.into(), unit: "EUR".into(), floor }, 1).await.unwrap();
                }
                let pay = |id: String, from: &str, to: &str, amount| NewTransfer {
                    id,
                    debit_account: from.into(),
                    credit_account: to.into(),
                    amount,
                    pending: false,
                    timeout_ms: None,
                };
                s.transfer(vec![pay("fund".into(), "world", "hot", 600)], 2).await.unwrap();
                let mut writers = tokio::task::JoinSet::new();
                for w in 0..8 {
                    let s = s.clone();
                    writers.spawn(async move {
                        let mut accepted = 0;
                        for n in 0..25 {
                            let batch = vec![pay(format!("d-{w}-{n}"), "hot", "a", 1 + (w * 25 + n) % 9)];
                            if let TransferResult::Created(t) = &s.transfer(batch, 3).await.unwrap()[0] {
                                accepted += t.amount;
                            }
                        }
                        accepted
                    });
                }
                let mut accepted = 0;
                while let Some(writer) = writers.join_next().await {
                    accepted += writer.unwrap();
                }
                let hot = s.account("hot").await.unwrap().unwrap();
                assert!(hot.posted >= 0);
                assert_eq!(hot.posted, 600 - accepted);
                assert!(accepted > 500, "the account was drained: {accepted}");
                assert_eq!(s.account("a").await.unwrap().unwrap().posted, accepted);

                let (left, right) = tokio::join!(
                    s.transfer((0..20).map(|n| pay(format!("x-{n}"), "world", "a", 1)).collect(), 4),
                    s.transfer((0..20).map(|n| pay(format!("x-{n}"), "world", "b", 1)).collect(), 4),
                );
                let (left, right) = (left.unwrap(), right.unwrap());
                for (l, r) in left.iter().zip(&right) {
                    let created = [l, r].iter().filter(|t| matches!(t, TransferResult::Created(_))).count();
                    assert_eq!(created, 1, "{l:?} {r:?}");
                    assert!([l, r].iter().any(|t| matches!(t, TransferResult::Refused { reason: TransferRefusal::IdReused(_), .. })));
                }
                let (a, b) = (s.account("a").await.unwrap().unwrap(), s.account("b").await.unwrap().unwrap());
                assert_eq!(a.posted + b.posted, accepted + 20);
            }

            /// Webhooks that change operations' outcomes while sweeps end
            /// their holds: a hold ends on the status its sweep read, and the
            /// webhook's mark (which waits for the sweep's lock) makes a later
            /// sweep correct it. None is left against its operation.
            #[tokio::test]
            async fn webhooks_racing_the_sweep_leave_no_hold_against_its_operation() {
                use crate::{NewAccount, NewHold, NewOperation, NewTransfer};
                use failwell_policy::{HoldState, Reported};

                const N: usize = 100;
                let (_d, s) = store().await;
                for (id, floor) in [("world", None), ("wallet", Some(0)), ("shop", Some(0))] {
                    s.open_account(NewAccount { id: id.into(), unit: "EUR".into(), floor }, 1).await.unwrap();
                }
                let fund = NewTransfer {
                    id: "fund".into(),
                    debit_account: "world".into(),
                    credit_account: "wallet".into(),
                    amount: 10_000,
                    pending: false,
                    timeout_ms: None,
                };
                s.transfer(vec![fund], 2).await.unwrap();
                for i in 0..N {
                    let hold = NewHold { id: format!("h-{i}"), debit_account: "wallet".into(), credit_account: "shop".into(), amount: 7 };
                    s.submit(NewOperation { hold: Some(hold), ..super::new_op(&format!("k-{i}"), 70) }, 3).await.unwrap();
                }
                // failwell gives every one up: failed, its hold still pending.
                let keys: Vec<String> = (0..N).map(|i| format!("k-{i}")).collect();
                let dead = keys.iter().map(|k| (k.as_str(), Transition::DeadLetter { error: "HTTP 503".into() })).collect();
                crate::tests::settle(&s, dead, 10).await;
                // The provider reports each one charged, while sweeps run.
                let sweeper = {
                    let s = s.clone();
                    tokio::spawn(async move {
                        for _ in 0..300 {
                            s.settle_holds(100, 5).await.unwrap();
                        }
                    })
                };
                for i in 0..N {
                    let event = super::reported(&format!("e-{i}"), &format!("ref-k-{i}"), Reported::Settled(Outcome::Succeeded), 1);
                    s.receive(vec![event], 50).await.unwrap();
                }
                sweeper.await.unwrap();
                while s.settle_holds(200, 512).await.unwrap().changed() > 0 {}
                for i in 0..N {
                    let op = s.operation(&format!("k-{i}")).await.unwrap().unwrap();
                    let hold = s.transfer_by_id(&format!("h-{i}")).await.unwrap().unwrap();
                    assert_eq!(op.status, crate::OperationStatus::Succeeded);
                    assert_eq!(hold.state, HoldState::Posted, "h-{i} against its operation: {hold:?}");
                }
                let wallet = s.account("wallet").await.unwrap().unwrap();
                assert_eq!((wallet.posted, wallet.debits_pending), (10_000 - 7 * N as i64, 0));
            }
        }
    };
}

pub(crate) use concurrent_cases;
