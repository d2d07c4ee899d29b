//! Delivering intents: claims, leases, completions, ordering keys, deferrals, retention and reconciliation.

/// Delivering intents: claims, leases, completions, ordering keys, deferrals, retention and reconciliation. For the `S` and `store()` in scope, inside [`super::store_tests!`].
macro_rules! delivery_cases {
    () => {
        /// Enqueues `message` in a transaction of its own.
        async fn enqueue(s: &S, message: Message, now_ms: i64) -> Submitted {
            let mut tx = s.begin().await.unwrap();
            let submitted = Outbox::enqueue(&mut tx, &message, now_ms).await.unwrap();
            tx.commit().await.unwrap();
            submitted
        }

        fn ended(c: &crate::Claimed, transition: Transition) -> Completion {
            Completion {
                outbox_id: c.outbox_id,
                lease_token: c.lease_token,
                operation_id: c.operation.id,
                attempt: Some(record(Outcome::Failed)),
                transition,
            }
        }

        fn keys(claimed: &[crate::Claimed]) -> Vec<String> {
            claimed.iter().map(|c| c.operation.idempotency_key.clone()).collect()
        }

        #[tokio::test]
        async fn an_ordering_key_delivers_one_message_at_a_time_and_a_dead_letter_releases_it() {
            let (_d, s) = store().await;
            for (key, ordering) in
                [("a1", Some("cust-a")), ("a2", Some("cust-a")), ("b1", None), ("a3", Some("cust-a")), ("c1", Some("cust-c"))]
            {
                let message = Message { ordering_key: ordering.map(Into::into), ..message(key, 100) };
                enqueue(&s, message, 0).await;
            }
            // One claim larger than the queue holds one message per key.
            let first = s.claim(0, 10, 1_000, &ClaimScope::All).await.unwrap();
            assert_eq!(keys(&first), ["a1", "b1", "c1"]);
            assert!(s.claim(0, 10, 1_000, &ClaimScope::All).await.unwrap().is_empty(), "a2 waits while a1 is in flight");
            // A retry keeps the key: a2 waits for a1's next attempt.
            let retry = Transition::Retry { available_at_ms: 500, delay_ms: 500, error: "503".into() };
            s.complete(vec![ended(&first[0], retry)], 1).await.unwrap();
            assert!(s.claim(100, 10, 1_000, &ClaimScope::All).await.unwrap().is_empty(), "a2 waits while a1 is retried");
            let a1 = s.claim(500, 10, 1_000, &ClaimScope::All).await.unwrap();
            assert_eq!(keys(&a1), ["a1"]);
            // A dead letter releases the key: a2 is next, then a3.
            let dead = Transition::DeadLetter { error: "attempts exhausted".into() };
            s.complete(vec![ended(&a1[0], dead)], 501).await.unwrap();
            let a2 = s.claim(501, 10, 1_000, &ClaimScope::All).await.unwrap();
            assert_eq!(keys(&a2), ["a2"]);
            let done = Transition::Succeeded { provider_ref: Some("ch_1".into()), response: None };
            s.complete(vec![ended(&a2[0], done)], 502).await.unwrap();
            assert_eq!(keys(&s.claim(502, 10, 1_000, &ClaimScope::All).await.unwrap()), ["a3"]);
        }

        #[tokio::test]
        async fn a_claim_takes_providers_in_turns_and_leaves_the_others_untouched() {
            let (_d, s) = store().await;
            let submit = |provider: &'static str, key: String, at: i64| {
                let op = NewOperation { provider: provider.into(), ..new_op(&key, 100) };
                let s = s.clone();
                async move { s.submit(op, at).await.unwrap() }
            };
            // A backlog at one provider, older than everything else.
            for i in 0..20 {
                submit("payments", format!("p{i:02}"), 0).await;
            }
            submit("shipping", "s1".into(), 10).await;
            submit("erp", "e1".into(), 0).await;
            submit("retired", "r1".into(), 0).await;
            let scope = ClaimScope::Providers(vec!["payments".into(), "shipping".into()]);
            let claimed = s.claim(10, 4, 100_000, &scope).await.unwrap();
            assert_eq!(keys(&claimed), ["p00", "s1", "p01", "p02"], "shipping is not starved by the backlog");
            // Providers outside the scope: nothing written, no attempt spent.
            let known = vec!["payments".into(), "shipping".into(), "erp".into()];
            let strays = s.claim(10, 10, 100_000, &ClaimScope::Strays(known)).await.unwrap();
            assert_eq!(keys(&strays), ["r1"]);
            let erp = s.claim(10, 10, 100_000, &ClaimScope::Providers(vec!["erp".into()])).await.unwrap();
            assert_eq!(keys(&erp), ["e1"]);
            assert_eq!((erp[0].attempts, erp[0].interrupted), (1, false), "its first attempt");
            assert!(s.attempts(erp[0].operation.id).await.unwrap().is_empty());
            let rest = s.claim(10, 100, 100_000, &ClaimScope::All).await.unwrap();
            assert_eq!(rest.len(), 17, "the rest of the backlog");
        }

        /// A claim of every provider takes the oldest due messages whatever
        /// their provider, oldest first, up to its limit, and nothing due
        /// later.
        #[tokio::test]
        async fn a_claim_of_every_provider_takes_the_oldest_across_providers() {
            let (_d, s) = store().await;
            for (provider, key, at) in [
                ("payments", "p30", 30),
                ("shipping", "s10", 10),
                ("erp", "e20", 20),
                ("payments", "p05", 5),
                ("retired", "r40", 40),
                ("shipping", "s99", 99),
            ] {
                let op = NewOperation { provider: provider.into(), ..new_op(key, 100) };
                s.submit(op, at).await.unwrap();
            }
            let first = s.claim(50, 3, 100_000, &ClaimScope::All).await.unwrap();
            assert_eq!(keys(&first), ["p05", "s10", "e20"]);
            let rest = s.claim(50, 10, 100_000, &ClaimScope::All).await.unwrap();
            assert_eq!(keys(&rest), ["p30", "r40"], "s99 is not due yet");
        }

        /// A success's history reads the same on every store: created, the
        /// call, then the message done and the operation succeeded. The
        /// creation is the operation's `created_by`, not a history row. A
        /// store writes the last two changes as history rows or marks the
        /// attempt row with them (`settled_from`, PostgreSQL's relay), never
        /// both, never neither.
        #[tokio::test]
        async fn a_success_reads_created_the_call_then_done_and_succeeded() {
            let (_d, s) = store().await;
            s.submit(new_op("ok", 100), 0).await.unwrap();
            let c = s.claim(0, 1, 1_000, &ClaimScope::All).await.unwrap().remove(0);
            let success = Transition::Succeeded { provider_ref: None, response: None };
            let completion = Completion { attempt: Some(record(Outcome::Succeeded)), ..ended(&c, success) };
            s.complete(vec![completion], 10).await.unwrap();
            let history = s.history(c.operation.id).await.unwrap();
            let changes: Vec<(&str, &str, &str)> =
                history.iter().map(|h| (h.subject, h.actor.as_str(), h.change.as_str())).collect();
            assert_eq!(
                changes,
                vec![
                    ("operation", "api", "created"),
                    ("attempt", "relay", "call 1: HTTP 200, succeeded, 2 ms"),
                    ("message", "relay", "pending -> done"),
                    ("operation", "relay", "pending -> succeeded"),
                ]
            );
            let id = c.operation.id;
            let mut counts = Vec::new();
            for sql in [
                format!("SELECT count(*) FROM history WHERE operation_id = {id}"),
                format!("SELECT count(*) FROM attempts WHERE operation_id = {id} AND settled_from IS NOT NULL"),
            ] {
                let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(s.pool()).await.unwrap();
                counts.push(n);
            }
            assert!(counts == [0, 1] || counts == [2, 0], "history rows, attempts marked: {counts:?}");
            let created_by: Option<String> =
                sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT created_by FROM operations WHERE id = {id}")))
                    .fetch_one(s.pool())
                    .await
                    .unwrap();
            assert_eq!(created_by.as_deref(), Some("api"));
        }

        #[tokio::test]
        async fn retention_deletes_delivered_messages_in_batches_and_keeps_open_work() {
            let (_d, s) = store().await;
            for key in ["d1", "d2", "d3", "open", "unknown"] {
                s.submit(new_op(key, 100), 0).await.unwrap();
            }
            let claimed = s.claim(0, 10, 100_000, &ClaimScope::All).await.unwrap();
            let completions = claimed
                .iter()
                .filter(|c| c.operation.idempotency_key != "open")
                .map(|c| {
                    let transition = if c.operation.idempotency_key == "unknown" {
                        Transition::Unknown { error: "timeout".into(), reconcile_at_ms: 50 }
                    } else {
                        // A failed operation's message stays `done` until
                        // retention on every database (PostgreSQL deletes a
                        // succeeded one at once: tests/postgres/delivered.rs).
                        Transition::Failed { error: "HTTP 402".into(), response: None }
                    };
                    ended(c, transition)
                })
                .collect();
            s.complete(completions, 10).await.unwrap();
            assert_eq!(s.delete_delivered(10, 100).await.unwrap(), 0, "nothing delivered before 10");
            assert_eq!(s.delete_delivered(11, 2).await.unwrap(), 2, "a batch at most");
            assert_eq!(s.delete_delivered(11, 2).await.unwrap(), 1);
            assert_eq!(s.delete_delivered(11, 2).await.unwrap(), 0, "the open and the unknown one stay");
            let op = s.operation("d1").await.unwrap().unwrap();
            assert_eq!(op.status, OperationStatus::Failed, "the operation stays");
            let history = s.history(op.id).await.unwrap();
            assert!(history.iter().all(|h| h.change != "purged"), "retention is not a purge: {history:?}");
            // An unknown operation reopened after its message was deleted
            // still gets one to deliver.
            sqlx::query("DELETE FROM outbox WHERE operation_id = (SELECT id FROM operations WHERE idempotency_key = 'unknown')")
                .execute(s.pool())
                .await
                .unwrap();
            let unknown = s.operation("unknown").await.unwrap().unwrap();
            let requeue = Resolution::Requeue { key_group: 1, provider_key: "fw_new".into() };
            s.reconcile(Reconciled { operation_id: unknown.id, attempt: None, resolution: requeue }, 60).await.unwrap();
            let again = s.claim(60, 10, 100_000, &ClaimScope::All).await.unwrap();
            assert_eq!(keys(&again), ["unknown"]);
        }

        #[tokio::test]
        async fn a_message_without_a_key_gets_one_from_its_request_and_is_enqueued_once() {
            let (_d, s) = store().await;
            let first = Message::new("payments", "charge", json!({"amount": 5, "currency": "eur"}));
            let Submitted::Created(op) = enqueue(&s, first, 0).await else { panic!("not created") };
            assert!(op.idempotency_key.starts_with("sha256:"), "{}", op.idempotency_key);
            // The same request, keys in another order: the same intent.
            let again = Message::new("payments", "charge", json!({"currency": "eur", "amount": 5}));
            assert!(matches!(enqueue(&s, again, 1).await, Submitted::Replayed(_)));
            let other = Message::new("payments", "charge", json!({"amount": 6, "currency": "eur"}));
            let Submitted::Created(other) = enqueue(&s, other, 2).await else { panic!("not created") };
            assert_ne!(other.idempotency_key, op.idempotency_key);
            assert_eq!(s.counts().await.unwrap().pending, 2);
        }

        #[tokio::test]
        async fn a_message_available_later_is_not_claimed_before_and_its_delivery_counts_from_then() {
            let (_d, s) = store().await;
            enqueue(&s, Message { available_at_ms: Some(5_000), ..message("later", 100) }, 1_000).await;
            // Not late before it is due: its age counts from then.
            for (now, age) in [(4_000, 0), (6_000, 1_000)] {
                let stats = s.stats(now, 0, &[]).await.unwrap();
                let open = stats.integrations.iter().find(|i| i.depth > 0).unwrap();
                assert_eq!((open.depth, open.oldest_open_age_ms), (1, Some(age)), "at {now}");
            }
            enqueue(&s, Message { available_at_ms: Some(10), ..message("past", 100) }, 1_000).await;
            let now = s.claim(1_000, 10, 100_000, &ClaimScope::All).await.unwrap();
            assert_eq!(keys(&now), ["past"]);
            assert_eq!(now[0].operation.delivery_started_at_ms, 1_000, "a time in the past changes nothing");
            assert!(s.claim(4_999, 10, 1_000, &ClaimScope::All).await.unwrap().is_empty());
            let later = s.claim(5_000, 10, 1_000, &ClaimScope::All).await.unwrap();
            assert_eq!(keys(&later), ["later"]);
            assert_eq!(later[0].operation.delivery_started_at_ms, 5_000);
            assert_eq!(later[0].operation.created_at_ms, 1_000);
        }

        #[tokio::test]
        async fn claim_leases_and_a_lost_lease_cannot_overwrite() {
            let (_d, s) = store().await;
            s.submit(new_op("k1", 100), 0).await.unwrap();
            let first = s.claim(10, 10, 1_000, &ClaimScope::All).await.unwrap();
            assert_eq!(first.len(), 1);
            assert_eq!(first[0].attempts, 1);
            assert!(!first[0].interrupted);
            assert_eq!(first[0].operation.key_first_sent_at_ms, None, "not sent before this attempt");
            assert!(s.claim(500, 10, 1_000, &ClaimScope::All).await.unwrap().is_empty(), "leased messages are not claimed twice");

            // the lease expires while the attempt is in flight: a rescuer claims it
            let rescued = s.claim(2_000, 10, 1_000, &ClaimScope::All).await.unwrap();
            assert_eq!(rescued.len(), 1);
            assert!(rescued[0].interrupted);
            assert_eq!(rescued[0].attempts, 2);
            assert_eq!(rescued[0].operation.key_first_sent_at_ms, Some(10), "first use is kept");

            let late = Completion {
                outbox_id: first[0].outbox_id,
                lease_token: first[0].lease_token,
                operation_id: first[0].operation.id,
                attempt: Some(record(Outcome::Failed)),
                transition: Transition::DeadLetter { error: "late".into() },
            };
            let fresh = Completion {
                lease_token: rescued[0].lease_token,
                attempt: Some(record(Outcome::Succeeded)),
                transition: Transition::Succeeded {
                    provider_ref: Some("ch_1".into()),
                    response: Some(json!({"id": "ch_1"})),
                },
                ..late.clone()
            };
            assert_eq!(
                s.complete(vec![late, fresh], 2_100).await.unwrap(),
                vec![Recorded::LeaseLost, Recorded::Applied]
            );
            let op = s.operation("k1").await.unwrap().unwrap();
            assert_eq!(op.status, OperationStatus::Succeeded);
            assert_eq!(op.provider_ref.as_deref(), Some("ch_1"));
            assert!(!op.dead_letter);
            let history = s.attempts(op.id).await.unwrap();
            assert_eq!(history.len(), 3, "the interrupted and both recorded attempts are in the history");
            assert_eq!(history[0].error_kind.as_deref(), Some("interrupted"));
            assert_eq!(history[0].started_at_ms, 10);
            assert_eq!(op.attempts, 3);
        }

        /// What a provider answers is stored whole, however long: its id,
        /// its error and the attempt's error kind and decision.
        #[tokio::test]
        async fn a_long_answer_is_stored_whole() {
            let (_d, s) = store().await;
            let long = |c: &str| c.repeat(70_000);
            for (key, transition) in [
                ("ok", Transition::Succeeded { provider_ref: Some(long("p")), response: None }),
                ("no", Transition::DeadLetter { error: long("e") }),
            ] {
                s.submit(new_op(key, 100), 0).await.unwrap();
                let c = s.claim(10, 1, 1_000, &ClaimScope::All).await.unwrap().remove(0);
                let attempt = AttemptRecord { error_kind: Some(long("k")), decision: long("d"), ..record(Outcome::Failed) };
                let done = Completion {
                    outbox_id: c.outbox_id,
                    lease_token: c.lease_token,
                    operation_id: c.operation.id,
                    attempt: Some(attempt),
                    transition,
                };
                assert_eq!(s.complete(vec![done], 20).await.unwrap(), vec![Recorded::Applied]);
            }
            let ok = s.operation("ok").await.unwrap().unwrap();
            assert_eq!(ok.provider_ref.map(|r| r.len()), Some(70_000));
            let no = s.operation("no").await.unwrap().unwrap();
            assert_eq!(no.last_error.map(|e| e.len()), Some(70_000));
            let attempts = s.attempts(no.id).await.unwrap();
            assert_eq!(attempts[0].error_kind.as_ref().map(String::len), Some(70_000));
            assert_eq!(attempts[0].decision.len(), 70_000);
        }

        #[tokio::test]
        async fn a_deferral_gives_the_attempt_back_and_writes_no_history() {
            let (_d, s) = store().await;
            s.submit(new_op("k1", 100), 0).await.unwrap();
            let c = s.claim(0, 1, 1_000, &ClaimScope::All).await.unwrap().remove(0);
            assert_eq!(c.attempts, 1);
            let defer = Completion {
                outbox_id: c.outbox_id,
                lease_token: c.lease_token,
                operation_id: c.operation.id,
                attempt: None,
                transition: Transition::Defer { available_at_ms: 800, reason: "circuit breaker open".into() },
            };
            assert_eq!(s.complete(vec![defer.clone()], 5).await.unwrap(), vec![Recorded::Applied]);
            assert_eq!(
                s.complete(vec![defer], 6).await.unwrap(),
                vec![Recorded::LeaseLost],
                "the lease is gone: no second deferral"
            );
            assert!(s.claim(799, 1, 1_000, &ClaimScope::All).await.unwrap().is_empty(), "deferred until 800");
            let c = s.claim(800, 1, 1_000, &ClaimScope::All).await.unwrap().remove(0);
            assert_eq!((c.attempts, c.interrupted), (1, false), "the deferred attempt was not spent");
            let op = s.operation("k1").await.unwrap().unwrap();
            assert_eq!((op.status, op.attempts), (OperationStatus::Pending, 0));
            assert_eq!(op.last_error.as_deref(), Some("circuit breaker open"));
            assert!(s.attempts(op.id).await.unwrap().is_empty());
        }

        #[tokio::test]
        async fn retry_reschedules_and_dead_letter_parks() {
            let (_d, s) = store().await;
            s.submit(new_op("k1", 100), 0).await.unwrap();
            let c = s.claim(0, 1, 1_000, &ClaimScope::All).await.unwrap().remove(0);
            let retry = Completion {
                outbox_id: c.outbox_id,
                lease_token: c.lease_token,
                operation_id: c.operation.id,
                attempt: Some(record(Outcome::Failed)),
                transition: Transition::Retry { available_at_ms: 300, delay_ms: 300, error: "503".into() },
            };
            assert_eq!(s.complete(vec![retry], 5).await.unwrap(), vec![Recorded::Applied]);
            assert!(s.claim(299, 1, 1_000, &ClaimScope::All).await.unwrap().is_empty());
            let c = s.claim(300, 1, 1_000, &ClaimScope::All).await.unwrap().remove(0);
            assert_eq!((c.attempts, c.previous_delay_ms, c.interrupted), (2, 300, false));
            let dead = Completion {
                outbox_id: c.outbox_id,
                lease_token: c.lease_token,
                operation_id: c.operation.id,
                attempt: Some(record(Outcome::Failed)),
                transition: Transition::DeadLetter { error: "attempts exhausted: 503".into() },
            };
            s.complete(vec![dead], 310).await.unwrap();
            let op = s.operation("k1").await.unwrap().unwrap();
            assert_eq!((op.status, op.dead_letter, op.attempts), (OperationStatus::Failed, true, 2));
            assert_eq!(s.counts().await.unwrap().dead_letters, 1);
        }

        #[tokio::test]
        async fn unknown_is_reconciled_requeued_or_found() {
            let (_d, s) = store().await;
            for key in ["a", "b"] {
                s.submit(new_op(key, 100), 0).await.unwrap();
            }
            let claimed = s.claim(0, 10, 1_000, &ClaimScope::All).await.unwrap();
            let unknown = claimed
                .iter()
                .map(|c| {
                    let unknown = Transition::Unknown { error: "timeout".into(), reconcile_at_ms: 100 };
                    crate::tests::completion(c, Some(record(Outcome::Unknown)), unknown)
                })
                .collect();
            s.complete(unknown, 1).await.unwrap();
            assert!(s.due_unknown(99, 10).await.unwrap().is_empty());
            let due = s.due_unknown(100, 10).await.unwrap();
            assert_eq!(due.len(), 2);
            let lookup = |id, resolution| Reconciled {
                operation_id: id,
                attempt: Some(AttemptRecord { kind: AttemptKind::Lookup, ..record(Outcome::Succeeded) }),
                resolution,
            };
            let a = s.operation("a").await.unwrap().unwrap();
            let b = s.operation("b").await.unwrap().unwrap();
            let found =
                Resolution::Found { outcome: Outcome::Succeeded, provider_ref: Some("ch_9".into()), response: None };
            s.reconcile(lookup(a.id, found), 150).await.unwrap();
            let requeue = Resolution::Requeue { key_group: 1, provider_key: "fw_new".into() };
            s.reconcile(lookup(b.id, requeue), 150).await.unwrap();
            assert_eq!(s.operation("a").await.unwrap().unwrap().status, OperationStatus::Succeeded);
            let b = s.operation("b").await.unwrap().unwrap();
            assert_eq!((b.status, b.key_group, b.provider_key.as_str()), (OperationStatus::Pending, 1, "fw_new"));
            assert!(!b.effect_possible, "a new key group starts clean");
            assert_eq!(b.key_first_sent_at_ms, None, "a new key group has not been sent yet");
            let again = s.claim(150, 10, 1_000, &ClaimScope::All).await.unwrap();
            assert_eq!(again.len(), 1);
            assert_eq!(again[0].operation.id, b.id);
            assert!(!again[0].interrupted);
        }

        /// Attempts cannot be rewritten or deleted, nor an operation's
        /// creation (`created_by`, `created_at_ms`) rewritten.
        #[tokio::test]
        async fn history_is_append_only() {
            let (_d, s) = store().await;
            s.submit(new_op("k1", 100), 0).await.unwrap();
            let c = s.claim(0, 1, 1_000, &ClaimScope::All).await.unwrap().remove(0);
            let done = Completion {
                outbox_id: c.outbox_id,
                lease_token: c.lease_token,
                operation_id: c.operation.id,
                attempt: Some(record(Outcome::Succeeded)),
                transition: Transition::Succeeded { provider_ref: None, response: None },
            };
            s.complete(vec![done], 1).await.unwrap();
            let update = sqlx::query("UPDATE attempts SET outcome = 'failed'").execute(s.pool()).await;
            assert!(update.unwrap_err().to_string().contains("append-only"));
            let delete = sqlx::query("DELETE FROM attempts").execute(s.pool()).await;
            assert!(delete.unwrap_err().to_string().contains("append-only"));
            // The operation's creation is part of its history.
            for update in [
                "UPDATE operations SET created_by = 'someone else'",
                "UPDATE operations SET created_by = NULL",
                "UPDATE operations SET created_at_ms = created_at_ms + 1",
            ] {
                let refused = sqlx::query(update).execute(s.pool()).await;
                assert!(refused.unwrap_err().to_string().contains("append-only"), "{update}");
            }
            sqlx::query("UPDATE operations SET created_by = created_by, created_at_ms = created_at_ms, attempts = 2")
                .execute(s.pool())
                .await
                .unwrap();
            let history = s.history(c.operation.id).await.unwrap();
            assert_eq!((history[0].actor.as_str(), history[0].change.as_str()), ("api", "created"));
        }

        #[tokio::test]
        async fn a_reference_belongs_to_one_operation() {
            let (_d, s) = store().await;
            s.submit(new_op("k1", 100), 0).await.unwrap();
            let mut other = new_op("k2", 100);
            other.reference = Some("ref-k1".into());
            let err = s.submit(other, 1).await.unwrap_err();
            assert!(matches!(err, StoreError::ReferenceReused { ref reference } if reference == "ref-k1"), "{err:?}");
            // a replay of the holder is still a replay
            assert!(matches!(s.submit(new_op("k1", 100), 2).await.unwrap(), Submitted::Replayed(_)));
            // another provider may use the same reference
            let mut elsewhere = new_op("k3", 100);
            elsewhere.reference = Some("ref-k1".into());
            elsewhere.provider = "shipping".into();
            assert!(matches!(s.submit(elsewhere, 3).await.unwrap(), Submitted::Created(_)));
            assert_eq!(s.counts().await.unwrap().pending, 2);
        }

        #[tokio::test]
        async fn an_ambiguous_call_marks_the_key_group_until_it_changes() {
            let (_d, s) = store().await;
            s.submit(new_op("a", 100), 0).await.unwrap();
            let c = s.claim(0, 1, 1_000, &ClaimScope::All).await.unwrap().remove(0);
            let unknown = Completion {
                outbox_id: c.outbox_id,
                lease_token: c.lease_token,
                operation_id: c.operation.id,
                attempt: Some(AttemptRecord { classification: Some("ambiguous"), ..record(Outcome::Unknown) }),
                transition: Transition::Unknown { error: "timeout".into(), reconcile_at_ms: 0 },
            };
            s.complete(vec![unknown], 1).await.unwrap();
            let op = s.operation("a").await.unwrap().unwrap();
            assert!(op.effect_possible);
            let lookup = |resolution| Reconciled {
                operation_id: op.id,
                attempt: Some(AttemptRecord { kind: AttemptKind::Lookup, ..record(Outcome::Unknown) }),
                resolution,
            };
            s.reconcile(lookup(Resolution::Confirm { retry_at_ms: 50 }), 2).await.unwrap();
            let confirmed = s.operation("a").await.unwrap().unwrap();
            assert_eq!((confirmed.lookup_misses, confirmed.status), (1, OperationStatus::Unknown));
            // resent under the same (live) key: an old call may still land, the mark stays
            let same = Resolution::Requeue { key_group: 0, provider_key: op.provider_key.clone() };
            s.reconcile(lookup(same), 3).await.unwrap();
            let requeued = s.operation("a").await.unwrap().unwrap();
            assert!(requeued.effect_possible);
            // (first used by the ambiguous call, which started at 1)
            assert_eq!((requeued.lookup_misses, requeued.key_first_sent_at_ms), (0, Some(1)));
        }
    };
}

pub(crate) use delivery_cases;
