//! The store's behaviour, written once and run on each database: the
//! invoking module defines `S` (the store type) and `store()` (a fresh,
//! migrated store and whatever keeps it alive).

/// Every store test, for the `S` and `store()` in scope.
macro_rules! store_tests {
    () => {
        use failwell_policy::{Outcome, Reported};
        use serde_json::json;

        use crate::prelude::*;

        use crate::{
            AttemptKind, AttemptRecord, Channel, ClaimScope, Completion, DeadLetterFilter, DeadLetterKind, EventReport,
            ForwardCompletion, ForwardTransition, LedgerEffect, Message, NewEvent, NewOperation, OperationStatus,
            Outbox, Received, Reconciled, Recorded, Resolution, StoreError, Submitted, Transition,
        };

        fn new_op(key: &str, amount: i64) -> NewOperation {
            NewOperation {
                idempotency_key: key.into(),
                provider: "payments".into(),
                operation: "charge".into(),
                reference: Some(format!("ref-{key}")),
                payload: json!({"amount": amount, "currency": "eur", "reference": format!("ref-{key}")}),
            }
        }

        fn message(key: &str, amount: i64) -> Message {
            let op = new_op(key, amount);
            Message {
                idempotency_key: Some(op.idempotency_key),
                reference: op.reference,
                ..Message::new(op.provider, op.operation, op.payload)
            }
        }

        fn record(outcome: Outcome) -> AttemptRecord {
            AttemptRecord {
                kind: AttemptKind::Call,
                started_at_ms: 1,
                duration_ms: 2,
                status_code: Some(200),
                error_kind: None,
                classification: None,
                outcome,
                decision: "done".into(),
            }
        }

        #[tokio::test]
        async fn submit_replays_same_request_and_refuses_a_different_one() {
            let (_d, s) = store().await;
            let Submitted::Created(op) = s.submit(new_op("k1", 100), 10).await.unwrap() else {
                panic!("not created")
            };
            assert_eq!(op.status, OperationStatus::Pending);
            assert!(op.provider_key.starts_with("fw_"));
            // same payload with keys in another order is the same request
            let mut same = new_op("k1", 100);
            same.payload = json!({"reference": "ref-k1", "currency": "eur", "amount": 100});
            assert_eq!(s.submit(same, 20).await.unwrap(), Submitted::Replayed(op.clone()));
            let err = s.submit(new_op("k1", 999), 30).await.unwrap_err();
            assert!(matches!(err, StoreError::KeyReused { .. }), "{err:?}");
            let counts = s.counts().await.unwrap();
            assert_eq!(counts.pending, 1);
        }

        /// A stored row failwell cannot read back (written by another
        /// program) is dead-lettered alone by the claim that meets it, with
        /// why as its last error; the messages around it are claimed once,
        /// and every view still shows it, with its stored text.
        #[tokio::test]
        async fn a_row_that_cannot_be_read_is_set_aside_and_the_others_go_on() {
            let (_d, s) = store().await;
            for key in ["before", "not-json", "too-deep", "after"] {
                s.submit(new_op(key, 100), 1).await.unwrap();
            }
            // A damaged response decides nothing: its message goes on.
            sqlx::query("UPDATE operations SET response = '{oops' WHERE idempotency_key = 'after'")
                .execute(s.pool())
                .await
                .unwrap();
            let deep = format!("{{\"a\":{}{}}}", "[".repeat(200), "]".repeat(200));
            for (key, text) in [("not-json", "{\"amount\": "), ("too-deep", deep.as_str())] {
                sqlx::query("UPDATE operations SET payload = $1 WHERE idempotency_key = $2")
                    .bind(text)
                    .bind(key)
                    .execute(s.pool())
                    .await
                    .unwrap();
            }
            let claimed = s.claim(10, 10, 1_000, &ClaimScope::All).await.unwrap();
            let keys: Vec<&str> = claimed.iter().map(|c| c.operation.idempotency_key.as_str()).collect();
            assert_eq!(keys, ["before", "after"]);
            assert!(claimed.iter().all(|c| c.attempts == 1 && !c.interrupted));
            assert_eq!(claimed[1].operation.unreadable, None);
            assert_eq!(claimed[1].operation.response, Some(json!("{oops")));
            for (key, text, says) in [
                ("not-json", "{\"amount\": ", "payload: EOF while parsing a value at line 1 column 11"),
                ("too-deep", deep.as_str(), "payload: recursion limit exceeded at line 1 column 132"),
            ] {
                let op = s.operation(key).await.unwrap().unwrap();
                assert_eq!((op.status, op.dead_letter, op.attempts), (OperationStatus::Failed, true, 0), "{key}");
                assert_eq!(op.unreadable.as_deref(), Some(says));
                assert_eq!(op.payload, json!(text));
                assert_eq!(op.last_error, Some(format!("stored {says}; set aside, not sent")));
            }
            let dead = s.dead_letters(DeadLetterFilter::default(), 10).await.unwrap();
            let mut dead: Vec<(&str, &serde_json::Value)> = dead.iter().map(|d| (d.key.as_str(), &d.payload)).collect();
            dead.sort_by_key(|(key, _)| *key);
            assert_eq!(dead, [("not-json", &json!("{\"amount\": ")), ("too-deep", &json!(deep))]);
            assert!(s.claim(20, 10, 1_000, &ClaimScope::All).await.unwrap().is_empty());
        }

        /// Stored values failwell could read but could not send are damage:
        /// the message is set aside before any call (so a request that
        /// cannot be built never counts against the provider's breaker). A
        /// provider key with a control character no HTTP header can carry,
        /// a blank one (every retry would look new), a payload that is not
        /// an object (a form operation would send an empty body).
        #[tokio::test]
        async fn a_stored_value_that_cannot_be_sent_is_set_aside_before_any_call() {
            let (_d, s) = store().await;
            let damage = [
                ("newline", "provider_key", "fw_1\n2"),
                ("blank", "provider_key", "  "),
                ("array", "payload", "[1,2]"),
            ];
            for key in ["newline", "blank", "array", "fine"] {
                s.submit(new_op(key, 100), 1).await.unwrap();
            }
            for (key, column, stored) in damage {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "UPDATE operations SET {column} = $1 WHERE idempotency_key = $2"
                )))
                .bind(stored)
                .bind(key)
                .execute(s.pool())
                .await
                .unwrap();
            }
            let claimed = s.claim(10, 10, 1_000, &ClaimScope::All).await.unwrap();
            let keys: Vec<&str> = claimed.iter().map(|c| c.operation.idempotency_key.as_str()).collect();
            assert_eq!(keys, ["fine"]);
            for (key, says) in [
                ("newline", r#"provider_key: "fw_1\n2" holds the control character '\n', which no HTTP header can carry"#),
                ("blank", r#"provider_key: "  " is blank; an idempotency key needs a visible character"#),
                ("array", "payload: is an array, not a JSON object"),
            ] {
                let op = s.operation(key).await.unwrap().unwrap();
                assert_eq!((op.status, op.dead_letter, op.attempts), (OperationStatus::Failed, true, 0), "{key}");
                assert_eq!(op.last_error, Some(format!("stored {says}; set aside, not sent")), "{key}");
            }
        }

        /// Columns changed behind failwell's back to values it cannot take
        /// (a count out of range, a key serde_json keeps for itself) are
        /// read as damage of that one row: it is set aside alone, saying
        /// which column and why, and the claim goes on for the others.
        #[tokio::test]
        async fn a_row_with_a_damaged_column_is_set_aside_alone() {
            let (_d, s) = store().await;
            for key in ["before", "negative-attempts", "reserved-key", "many-attempts", "many-calls", "after"] {
                s.submit(new_op(key, 100), 1).await.unwrap();
            }
            // Within the schema's checks, beyond any delivery: the claim
            // must neither fail nor send.
            for table in ["outbox", "operations"] {
                let key = if table == "outbox" { "many-attempts" } else { "many-calls" };
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "UPDATE {table} SET attempts = 2147483647 WHERE {} = (SELECT id FROM operations WHERE idempotency_key = '{key}')",
                    if table == "outbox" { "operation_id" } else { "id" }
                )))
                .execute(s.pool())
                .await
                .unwrap();
            }
            let damage = "UPDATE outbox SET attempts = -1 WHERE operation_id = \
                          (SELECT id FROM operations WHERE idempotency_key = 'negative-attempts')";
            // Where the schema checks counts, it refuses the damage until
            // its check is dropped.
            for off in COUNT_CHECKS_OFF {
                let refused = sqlx::query(damage).execute(s.pool()).await.unwrap_err();
                assert!(refused.to_string().contains(COUNT_CHECK_SAYS), "{refused}");
                sqlx::query(*off).execute(s.pool()).await.unwrap();
            }
            sqlx::query(damage).execute(s.pool()).await.unwrap();
            let reserved = r#"{"a":{"$serde_json::private::Number":"1"}}"#;
            sqlx::query("UPDATE operations SET payload = $1 WHERE idempotency_key = 'reserved-key'")
                .bind(reserved)
                .execute(s.pool())
                .await
                .unwrap();
            let claimed = s.claim(10, 10, 1_000, &ClaimScope::All).await.unwrap();
            let keys: Vec<&str> = claimed.iter().map(|c| c.operation.idempotency_key.as_str()).collect();
            assert_eq!(keys, ["before", "after"]);
            for (key, says) in [
                ("negative-attempts", "attempts: -1 is out of range (a count is below 1000000)"),
                ("many-attempts", "attempts: 2147483647 is out of range (a count is below 1000000)"),
                ("many-calls", "attempts: 2147483647 is out of range (a count is below 1000000)"),
                (
                    "reserved-key",
                    "payload: holds the key \"$serde_json::private::Number\", which serde_json reserves for itself",
                ),
            ] {
                let op = s.operation(key).await.unwrap().unwrap();
                assert_eq!((op.status, op.dead_letter), (OperationStatus::Failed, true), "{key}");
                assert_eq!(op.last_error, Some(format!("stored {says}; set aside, not sent")), "{key}");
            }
            let op = s.operation("reserved-key").await.unwrap().unwrap();
            assert_eq!(op.payload, json!(reserved), "shown as stored, not as what serde_json makes of it");
        }

        /// A payload failwell could not read back once stored is refused
        /// before anything is written, on both ways in.
        #[tokio::test]
        async fn a_payload_that_could_not_be_read_back_is_refused() {
            let (_d, s) = store().await;
            let mut deep = json!("bottom");
            for _ in 0..128 {
                deep = json!([deep]);
            }
            for payload in [json!({"a": deep}), json!({"a": "nul \u{0}"}), json!([1, 2]), json!(null)] {
                let mut op = new_op("refused", 1);
                op.payload = payload.clone();
                let error = s.submit(op, 1).await.unwrap_err();
                assert!(matches!(error, StoreError::InvalidPayload { .. }), "{error:?}");
                let mut m = message("refused", 1);
                m.payload = payload;
                let mut tx = s.begin().await.unwrap();
                let error = Outbox::enqueue(&mut tx, &m, 1).await.unwrap_err();
                assert!(matches!(error, StoreError::InvalidPayload { .. }), "{error:?}");
            }
            assert_eq!(s.counts().await.unwrap().pending, 0);
        }

        /// Numbers an f64 cannot tell apart are still two requests.
        #[tokio::test]
        async fn numbers_an_f64_cannot_tell_apart_are_two_requests() {
            let (_d, s) = store().await;
            let mut op = new_op("big", 1);
            op.payload = serde_json::from_str(r#"{"amount":12345678901234567890123}"#).unwrap();
            s.submit(op.clone(), 1).await.unwrap();
            assert!(matches!(s.submit(op.clone(), 2).await.unwrap(), Submitted::Replayed(_)));
            op.payload = serde_json::from_str(r#"{"amount":12345678901234567890124}"#).unwrap();
            let error = s.submit(op, 3).await.unwrap_err();
            assert!(matches!(error, StoreError::KeyReused { .. }), "{error:?}");
        }

        #[tokio::test]
        async fn enqueue_shares_the_callers_transaction() {
            let (_d, s) = store().await;
            sqlx::query("CREATE TABLE orders (id TEXT PRIMARY KEY)").execute(s.pool()).await.unwrap();
            let mut tx = s.begin().await.unwrap();
            sqlx::query("INSERT INTO orders VALUES ('o1')").execute(&mut *tx).await.unwrap();
            Outbox::enqueue(&mut tx, &message("o1", 100), 1).await.unwrap();
            tx.rollback().await.unwrap();
            assert_eq!(s.counts().await.unwrap().pending, 0, "a rolled-back order leaves no message");
            assert!(s.operation("o1").await.unwrap().is_none());

            let mut tx = s.begin().await.unwrap();
            sqlx::query("INSERT INTO orders VALUES ('o1')").execute(&mut *tx).await.unwrap();
            Outbox::enqueue(&mut tx, &message("o1", 100), 1).await.unwrap();
            tx.commit().await.unwrap();
            assert_eq!(s.claim(1, 10, 1000, &ClaimScope::All).await.unwrap().len(), 1);
        }

        #[tokio::test]
        async fn enqueue_refuses_a_blank_field_and_writes_nothing() {
            let (_d, s) = store().await;
            for (m, blank) in [
                (Message { reference: Some(" ".into()), ..message("o1", 100) }, "reference"),
                (Message { idempotency_key: Some(String::new()), ..message("o2", 100) }, "idempotency_key"),
                (Message { provider: String::new(), ..message("o3", 100) }, "provider"),
                (Message { operation: "\t".into(), ..message("o4", 100) }, "operation"),
            ] {
                let mut tx = s.begin().await.unwrap();
                let err = Outbox::enqueue(&mut tx, &m, 1).await.unwrap_err();
                assert!(matches!(err, StoreError::InvalidMessage { field } if field == blank), "{err:?}");
                tx.commit().await.unwrap();
            }
            assert_eq!(s.counts().await.unwrap().pending, 0, "nothing was written");
        }

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
                        Transition::Succeeded { provider_ref: None, response: None }
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
            assert_eq!(op.status, OperationStatus::Succeeded, "the operation stays");
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
        async fn a_comparison_window_is_taken_once_unless_its_run_was_abandoned() {
            let (_d, s) = store().await;
            let (day, next) = ((0, 86_400_000), (86_400_000, 172_800_000));
            assert!(s.claim_comparison("payments", day, 5, 100).await.unwrap());
            assert!(!s.claim_comparison("payments", day, 6, 100).await.unwrap(), "claimed already");
            assert!(s.claim_comparison("payments", next, 7, 100).await.unwrap());
            assert!(s.claim_comparison("shipping", day, 8, 100).await.unwrap());
            s.finish_comparison("payments", next, 9).await.unwrap();
            s.finish_comparison("shipping", day, 9).await.unwrap();
            assert_eq!(s.abandoned_comparisons(4).await.unwrap(), []);
            assert_eq!(s.abandoned_comparisons(105).await.unwrap(), [("payments".to_owned(), day)]);
            // Its process died: taken over once the claim is a lease old.
            assert!(!s.claim_comparison("payments", day, 104, 100).await.unwrap(), "not yet");
            assert!(s.claim_comparison("payments", day, 105, 100).await.unwrap(), "taken over");
            assert!(!s.claim_comparison("payments", day, 106, 100).await.unwrap(), "claimed again");
            assert_eq!(s.abandoned_comparisons(104).await.unwrap(), [], "claimed again at 105");
            s.finish_comparison("payments", day, 110).await.unwrap();
            for (provider, window) in [("payments", day), ("payments", next), ("shipping", day)] {
                assert!(!s.claim_comparison(provider, window, 10_000, 100).await.unwrap(), "finished");
            }
            assert_eq!(s.abandoned_comparisons(10_000).await.unwrap(), []);
        }

        #[tokio::test]
        async fn alerts_are_queued_with_their_transition_and_sent_at_least_once_in_order() {
            use crate::prelude::*;
            use crate::{Alert, AlertBody, AlertClaim, AlertSent, NewAlert};
            let (_d, s) = store().await;
            let alert = |kind: &str, text: &str, at_ms| NewAlert {
                kind: kind.into(),
                subject: "payments".into(),
                text: text.into(),
                details: json!({ "said": text }),
                at_ms,
            };
            let text = |alert: &Option<Alert>| -> String {
                match &alert.as_ref().expect("an alert is due").body {
                    AlertBody::Message { text, details } => {
                        assert_eq!(details["said"], json!(text));
                        text.clone()
                    }
                    AlertBody::Report(id) => format!("report {id}"),
                }
            };
            let age = "oldest_open_age";
            assert!(s.set_alert(age, "payments", true, 1, Some(alert(age, "raised", 1))).await.unwrap());
            assert!(
                !s.set_alert(age, "payments", true, 2, Some(alert(age, "raised again", 2))).await.unwrap(),
                "firing already: nothing queued"
            );
            assert_eq!(s.firing_alerts(age).await.unwrap(), ["payments"]);
            assert!(s.set_alert(age, "payments", false, 3, Some(alert(age, "resolved", 3))).await.unwrap());
            assert!(!s.set_alert(age, "payments", false, 4, None).await.unwrap(), "resolved already");
            s.queue_alert(alert("comparison_failed", "failed", 5)).await.unwrap();
            assert_eq!(s.claim_alert(AlertClaim::Due, 0, 1_000).await.unwrap(), None, "not due yet");

            // In order per kind and subject: the resolve waits for the raise.
            let raised = s.claim_alert(AlertClaim::Due, 10, 1_000).await.unwrap();
            assert_eq!((text(&raised), raised.as_ref().unwrap().attempts), ("raised".to_owned(), 1));
            let failed_alert = s.claim_alert(AlertClaim::Due, 10, 1_000).await.unwrap();
            assert_eq!(text(&failed_alert), "failed");
            assert_eq!(s.claim_alert(AlertClaim::Due, 11, 1_000).await.unwrap(), None, "all held");
            let failed = AlertSent::Failed { error: "sink down".into(), retry_at_ms: 500 };
            assert!(s.alert_sent(raised.as_ref().unwrap(), failed.clone()).await.unwrap());
            assert!(s.alert_sent(failed_alert.as_ref().unwrap(), AlertSent::At(12)).await.unwrap());
            assert_eq!(s.claim_alert(AlertClaim::Due, 499, 1_000).await.unwrap(), None, "retried at 500");
            let again = s.claim_alert(AlertClaim::Due, 500, 1_000).await.unwrap();
            assert_eq!((text(&again), again.as_ref().unwrap().attempts), ("raised".to_owned(), 2));
            // Its sender died: once the lease is over another one sends it.
            assert_eq!(s.claim_alert(AlertClaim::Due, 1_499, 1_000).await.unwrap(), None);
            let taken_over = s.claim_alert(AlertClaim::Due, 1_500, 1_000).await.unwrap();
            assert_eq!((text(&taken_over), taken_over.as_ref().unwrap().attempts), ("raised".to_owned(), 3));
            // The first sender, late, cannot undo what the second records.
            assert!(s.alert_sent(taken_over.as_ref().unwrap(), AlertSent::At(1_501)).await.unwrap());
            assert!(!s.alert_sent(again.as_ref().unwrap(), failed).await.unwrap(), "its claim was taken over");
            let last = s.claim_alert(AlertClaim::Due, 1_502, 1_000).await.unwrap();
            assert_eq!(text(&last), "resolved");
            assert!(s.alert_sent(last.as_ref().unwrap(), AlertSent::At(1_503)).await.unwrap());
            assert_eq!(s.claim_alert(AlertClaim::Due, 100_000, 1_000).await.unwrap(), None, "all sent");
            // One the sink refuses for good is set aside: the next one is no
            // longer held back by it.
            s.queue_alert(alert(age, "refused", 200_000)).await.unwrap();
            s.queue_alert(alert(age, "next", 200_001)).await.unwrap();
            let refused = s.claim_alert(AlertClaim::Due, 200_002, 1_000).await.unwrap();
            assert_eq!(text(&refused), "refused");
            assert_eq!(s.claim_alert(AlertClaim::Due, 200_002, 1_000).await.unwrap(), None, "next waits");
            let refused = refused.unwrap();
            assert_eq!(refused.raised_at_ms, 200_000);
            let given_up = AlertSent::GivenUp { error: "HTTP 413".into(), at_ms: 200_003 };
            assert!(s.alert_sent(&refused, given_up).await.unwrap());
            let next = s.claim_alert(AlertClaim::Due, 200_004, 1_000).await.unwrap();
            assert_eq!(text(&next), "next");
            assert!(s.alert_sent(next.as_ref().unwrap(), AlertSent::At(200_005)).await.unwrap());
            assert_eq!(s.claim_alert(AlertClaim::Due, 900_000, 1_000).await.unwrap(), None, "the refused one never again");
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
                .map(|c| Completion {
                    outbox_id: c.outbox_id,
                    lease_token: c.lease_token,
                    operation_id: c.operation.id,
                    attempt: Some(record(Outcome::Unknown)),
                    transition: Transition::Unknown { error: "timeout".into(), reconcile_at_ms: 100 },
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

        #[tokio::test]
        async fn a_webhook_event_is_stored_once_however_often_it_comes() {
            let (_d, s) = store().await;
            let event = |payload: &[u8]| NewEvent {
                integration: "stripe".into(),
                event_id: "evt_1".into(),
                payload: payload.to_vec(),
                headers: json!({"stripe-signature": "t=1,v1=00"}),
                report: None,
                forward: false,
            };
            let body = "{\"amount\": 12345678901234567890, \"note\": \"caf\u{e9} \u{1f600}\"}".as_bytes();
            assert_eq!(s.receive(vec![event(body)], 10).await.unwrap(), vec![Received::New]);
            assert_eq!(
                s.receive(vec![event(b"a later, different delivery")], 20).await.unwrap(),
                vec![Received::Duplicate]
            );
            let concurrent: Vec<_> = (0..16)
                .map(|_| {
                    let (s, e) = (s.clone(), event(body));
                    tokio::spawn(async move { s.receive(vec![e], 30).await })
                })
                .collect();
            for r in concurrent {
                assert_eq!(r.await.unwrap().unwrap(), vec![Received::Duplicate]);
            }
            assert_eq!(s.counts().await.unwrap().inbox_events, 1);
            let stored: Vec<u8> = sqlx::query_scalar("SELECT payload FROM inbox_events WHERE event_id = 'evt_1'")
                .fetch_one(s.pool())
                .await
                .unwrap();
            assert_eq!(stored, body, "stored byte for byte, the first delivery's");
            let rewrite = sqlx::query("UPDATE inbox_events SET headers = '{}'").execute(s.pool()).await;
            assert!(rewrite.is_err(), "received events are append-only");
            let second = NewEvent { event_id: "evt_2".into(), ..event(b"{}") };
            let batch = vec![second.clone(), second, event(body)];
            assert_eq!(
                s.receive(batch, 40).await.unwrap(),
                vec![Received::New, Received::Duplicate, Received::Duplicate],
                "within one batch too, the first delivery stores and the others are duplicates"
            );
            let feed = s.events_after(0, 10, usize::MAX).await.unwrap();
            let ids: Vec<_> = feed.iter().map(|e| e.event_id.as_str()).collect();
            assert_eq!(ids, vec!["evt_1", "evt_2"], "in the order of first receipt, duplicates not repeated");
            assert!(feed[0].seq < feed[1].seq);
            assert_eq!(feed[0].payload, body);
            assert_eq!(feed[0].headers["stripe-signature"], "t=1,v1=00");
            assert_eq!(s.events_after(feed[0].seq, 10, usize::MAX).await.unwrap()[0].event_id, "evt_2");
            let one = s.events_after(0, 10, 1).await.unwrap();
            assert_eq!(one.len(), 1, "a page stops at its byte budget, but holds at least one event");
            assert!(s.events_after(feed[1].seq, 10, usize::MAX).await.unwrap().is_empty());
        }

        fn reported(event_id: &str, reference: &str, reported: Reported, version: i64) -> NewEvent {
            NewEvent {
                integration: "sim".into(),
                event_id: event_id.into(),
                payload: event_id.as_bytes().to_vec(),
                headers: json!({}),
                report: Some(Ok(EventReport {
                    provider: "payments".into(),
                    reference: reference.into(),
                    reported,
                    version,
                    provider_ref: Some(format!("ch_{reference}")),
                })),
                forward: false,
            }
        }

        async fn effects(s: &S, event_id: &str) -> Vec<Option<LedgerEffect>> {
            let record = s.event("sim", event_id).await.unwrap().unwrap();
            record.steps.iter().filter(|step| step.kind == "ledger").map(|step| step.effect).collect()
        }

        #[tokio::test]
        async fn events_settle_operations_monotonically_and_close_their_messages() {
            let (_d, s) = store().await;
            s.submit(new_op("a", 1000), 0).await.unwrap();
            let claimed = s.claim(1, 1, 60_000, &ClaimScope::All).await.unwrap().remove(0);
            // The provider's events overtake the relay's own attempt.
            let pending = reported("evt_p", "ref-a", Reported::InProgress, 1);
            let succeeded = reported("evt_s", "ref-a", Reported::Settled(Outcome::Succeeded), 2);
            s.receive(vec![pending.clone()], 2).await.unwrap();
            assert_eq!(effects(&s, "evt_p").await, vec![Some(LedgerEffect::Noted)]);
            assert_eq!(s.operation("a").await.unwrap().unwrap().status, OperationStatus::Pending);
            s.receive(vec![succeeded], 3).await.unwrap();
            assert_eq!(effects(&s, "evt_s").await, vec![Some(LedgerEffect::Resolved)]);
            let op = s.operation("a").await.unwrap().unwrap();
            assert_eq!(op.status, OperationStatus::Succeeded);
            assert_eq!(op.provider_ref.as_deref(), Some("ch_ref-a"), "the provider's id, from the event");
            let seen: Vec<_> = s.operation_events(op.id).await.unwrap().into_iter().map(|e| e.event_id).collect();
            assert_eq!(seen, ["evt_p", "evt_s"], "the operation's history shows what the events did");
            // The attempt in flight lost its lease: its timeout cannot make it unknown.
            let late = Completion {
                outbox_id: claimed.outbox_id,
                operation_id: op.id,
                lease_token: claimed.lease_token,
                attempt: Some(record(Outcome::Unknown)),
                transition: Transition::Unknown { error: "timeout".into(), reconcile_at_ms: 5 },
            };
            assert_eq!(s.complete(vec![late], 4).await.unwrap(), vec![Recorded::SettledElsewhere]);
            assert_eq!(s.operation("a").await.unwrap().unwrap().status, OperationStatus::Succeeded);
            assert!(s.claim(1_000_000, 10, 1000, &ClaimScope::All).await.unwrap().is_empty(), "nothing left to deliver");
            // An older event redelivered, or a newer one in progress, never regresses it.
            let again = NewEvent { event_id: "evt_p2".into(), ..pending };
            s.receive(vec![again], 5).await.unwrap();
            assert_eq!(effects(&s, "evt_p2").await, vec![Some(LedgerEffect::Stale)]);
            s.receive(vec![reported("evt_p3", "ref-a", Reported::InProgress, 9)], 6).await.unwrap();
            assert_eq!(effects(&s, "evt_p3").await, vec![Some(LedgerEffect::WouldRegress)]);
            assert_eq!(s.operation("a").await.unwrap().unwrap().status, OperationStatus::Succeeded);
            s.receive(vec![reported("evt_x", "ref-nobody", Reported::InProgress, 1)], 7).await.unwrap();
            assert_eq!(effects(&s, "evt_x").await, vec![Some(LedgerEffect::NoOperation)]);
            let counts = s.counts().await.unwrap();
            assert_eq!((counts.resolved_by_events, counts.succeeded), (1, 1));
        }

        #[tokio::test]
        async fn an_event_resolves_an_unknown_operation() {
            let (_d, s) = store().await;
            s.submit(new_op("u", 1000), 0).await.unwrap();
            let claimed = s.claim(1, 1, 60_000, &ClaimScope::All).await.unwrap().remove(0);
            let unknown = Completion {
                outbox_id: claimed.outbox_id,
                operation_id: claimed.operation.id,
                lease_token: claimed.lease_token,
                attempt: Some(record(Outcome::Unknown)),
                transition: Transition::Unknown { error: "timeout".into(), reconcile_at_ms: 100 },
            };
            assert_eq!(s.complete(vec![unknown], 2).await.unwrap(), vec![Recorded::Applied]);
            s.receive(vec![reported("evt_f", "ref-u", Reported::Settled(Outcome::Failed), 3)], 3).await.unwrap();
            let op = s.operation("u").await.unwrap().unwrap();
            assert_eq!(op.status, OperationStatus::Failed);
            assert!(s.due_unknown(1_000_000, 10).await.unwrap().is_empty(), "no lookup left to make");
            assert_eq!(effects(&s, "evt_f").await, vec![Some(LedgerEffect::Resolved)]);
        }

        #[tokio::test]
        async fn forwards_are_leased_retried_deferred_and_dead_lettered() {
            let (_d, s) = store().await;
            let event = NewEvent { forward: true, report: None, ..reported("evt_1", "r", Reported::InProgress, 1) };
            s.receive(vec![event.clone(), event], 0).await.unwrap();
            let first = s.claim_forwards(0, 10, 1000).await.unwrap();
            assert_eq!(first.len(), 1, "one forward however many deliveries");
            assert_eq!((first[0].attempts, first[0].event.payload.as_slice()), (1, b"evt_1".as_slice()));
            assert!(s.claim_forwards(500, 10, 1000).await.unwrap().is_empty(), "leased");
            let done = |c: &crate::ClaimedForward, transition| ForwardCompletion {
                id: c.id,
                lease_token: c.lease_token,
                event_seq: c.event.seq,
                step: None,
                transition,
            };
            let retry = ForwardTransition::Retry { available_at_ms: 2000, delay_ms: 900, error: "HTTP 500".into() };
            assert_eq!(
                s.complete_forwards(vec![done(&first[0], retry)], 1100).await.unwrap(),
                vec![Recorded::Applied]
            );
            assert!(s.claim_forwards(1999, 10, 1000).await.unwrap().is_empty(), "not due before its retry");
            let second = s.claim_forwards(2000, 10, 1000).await.unwrap();
            assert_eq!((second[0].attempts, second[0].previous_delay_ms), (2, 900));
            // A result under the first claim's token is refused.
            let stale = done(&first[0], ForwardTransition::Delivered);
            assert_eq!(s.complete_forwards(vec![stale], 2001).await.unwrap(), vec![Recorded::LeaseLost]);
            let defer = ForwardTransition::Defer { available_at_ms: 2500, reason: "breaker open".into() };
            assert_eq!(
                s.complete_forwards(vec![done(&second[0], defer)], 2002).await.unwrap(),
                vec![Recorded::Applied]
            );
            let third = s.claim_forwards(2500, 10, 1000).await.unwrap();
            assert_eq!(third[0].attempts, 2, "a deferral gives its attempt back");
            let dead = ForwardTransition::DeadLetter { error: "HTTP 500".into() };
            assert_eq!(
                s.complete_forwards(vec![done(&third[0], dead)], 2600).await.unwrap(),
                vec![Recorded::Applied]
            );
            let counts = s.counts().await.unwrap();
            assert_eq!((counts.forwards_pending, counts.forward_dead_letters), (0, 1));
            let record = s.event("sim", "evt_1").await.unwrap().unwrap();
            assert_eq!((record.forward_state.as_deref(), record.forward_attempts), (Some("dead"), 2));
        }

        #[tokio::test]
        async fn one_batch_applies_its_events_in_arrival_order() {
            let (_d, s) = store().await;
            s.submit(new_op("b", 1000), 0).await.unwrap();
            let batch = vec![
                reported("evt_v2", "ref-b", Reported::Settled(Outcome::Succeeded), 2),
                reported("evt_v1", "ref-b", Reported::InProgress, 1),
                reported("evt_v3", "ref-b", Reported::Settled(Outcome::Failed), 3),
            ];
            s.receive(batch, 1).await.unwrap();
            assert_eq!(effects(&s, "evt_v2").await, vec![Some(LedgerEffect::Resolved)]);
            assert_eq!(effects(&s, "evt_v1").await, vec![Some(LedgerEffect::Stale)]);
            assert_eq!(effects(&s, "evt_v3").await, vec![Some(LedgerEffect::Changed)]);
            assert_eq!(s.operation("b").await.unwrap().unwrap().status, OperationStatus::Failed);
            // A tie (Stripe's `created` is in seconds): settling an open operation wins.
            s.submit(new_op("t", 1000), 2).await.unwrap();
            let tie = vec![
                reported("evt_t1", "ref-t", Reported::InProgress, 7),
                reported("evt_t2", "ref-t", Reported::Settled(Outcome::Succeeded), 7),
            ];
            s.receive(tie, 3).await.unwrap();
            assert_eq!(effects(&s, "evt_t2").await, vec![Some(LedgerEffect::Resolved)]);
            assert_eq!(s.operation("t").await.unwrap().unwrap().status, OperationStatus::Succeeded);
        }

        #[tokio::test]
        async fn an_event_contradicting_our_own_answer_is_a_conflict_and_dead_letters_stay_unless_it_succeeded() {
            let (_d, s) = store().await;
            for key in ["ok", "dead"] {
                s.submit(new_op(key, 1000), 0).await.unwrap();
            }
            let finish = |c: &crate::Claimed, transition| Completion {
                outbox_id: c.outbox_id,
                operation_id: c.operation.id,
                lease_token: c.lease_token,
                attempt: Some(record(Outcome::Failed)),
                transition,
            };
            let claimed = s.claim(1, 2, 60_000, &ClaimScope::All).await.unwrap();
            let by_key = |k: &str| claimed.iter().find(|c| c.operation.idempotency_key == k).unwrap();
            let done = Transition::Succeeded { provider_ref: Some("ch_1".into()), response: None };
            let dead = Transition::DeadLetter { error: "out of attempts".into() };
            s.complete(vec![finish(by_key("ok"), done), finish(by_key("dead"), dead)], 2).await.unwrap();
            // Our call said succeeded; an event says failed and nothing orders them.
            s.receive(vec![reported("evt_c", "ref-ok", Reported::Settled(Outcome::Failed), 1)], 3).await.unwrap();
            assert_eq!(effects(&s, "evt_c").await, vec![Some(LedgerEffect::Conflict)]);
            let op = s.operation("ok").await.unwrap().unwrap();
            assert_eq!(op.status, OperationStatus::Unknown, "a status lookup decides");
            assert!(op.last_error.unwrap().starts_with("conflict: "));
            assert_eq!(s.due_unknown(3, 10).await.unwrap().len(), 1, "due at once");
            // The provider confirms the dead letter's failure: it stays a dead letter...
            s.receive(vec![reported("evt_d1", "ref-dead", Reported::Settled(Outcome::Failed), 1)], 4).await.unwrap();
            assert!(s.operation("dead").await.unwrap().unwrap().dead_letter);
            // ...until the provider says it succeeded after all: replaying it would charge twice.
            s.receive(vec![reported("evt_d2", "ref-dead", Reported::Settled(Outcome::Succeeded), 2)], 5)
                .await
                .unwrap();
            let op = s.operation("dead").await.unwrap().unwrap();
            assert_eq!((op.status, op.dead_letter), (OperationStatus::Succeeded, false));
            // A dead letter's `failed` is failwell giving up, not the provider: a
            // first event saying succeeded resolves it (no conflict).
            s.submit(new_op("gave-up", 1000), 6).await.unwrap();
            let c = s.claim(7, 1, 60_000, &ClaimScope::All).await.unwrap().remove(0);
            let dead = Transition::DeadLetter { error: "503 x 5".into() };
            s.complete(vec![finish(&c, dead)], 8).await.unwrap();
            let event = reported("evt_g", "ref-gave-up", Reported::Settled(Outcome::Succeeded), 1);
            s.receive(vec![event], 9).await.unwrap();
            assert_eq!(effects(&s, "evt_g").await, vec![Some(LedgerEffect::Resolved)]);
            let op = s.operation("gave-up").await.unwrap().unwrap();
            assert_eq!((op.status, op.dead_letter), (OperationStatus::Succeeded, false));
        }

        #[tokio::test]
        async fn two_results_for_one_forward_in_one_batch_are_judged_by_their_own_lease() {
            let (_d, s) = store().await;
            let event = NewEvent { forward: true, report: None, ..reported("evt_f", "r", Reported::InProgress, 1) };
            s.receive(vec![event], 0).await.unwrap();
            let old = s.claim_forwards(0, 1, 100).await.unwrap().remove(0);
            let new = s.claim_forwards(100, 1, 100).await.unwrap().remove(0);
            let steps = s.event("sim", "evt_f").await.unwrap().unwrap().steps;
            assert!(steps[0].detail.starts_with("interrupted: "), "the cut-short attempt is recorded: {steps:?}");
            let result = |c: &crate::ClaimedForward, transition| ForwardCompletion {
                id: c.id,
                lease_token: c.lease_token,
                event_seq: c.event.seq,
                step: None,
                transition,
            };
            let retry = ForwardTransition::Retry { available_at_ms: 9_000, delay_ms: 1, error: "late".into() };
            let batch = vec![result(&old, retry), result(&new, ForwardTransition::Delivered)];
            assert_eq!(s.complete_forwards(batch, 150).await.unwrap(), vec![Recorded::LeaseLost, Recorded::Applied]);
            assert_eq!(s.event("sim", "evt_f").await.unwrap().unwrap().forward_state.as_deref(), Some("done"));
        }

        #[tokio::test]
        async fn a_late_answer_keeps_its_provider_id_or_is_a_conflict() {
            let (_d, s) = store().await;
            for key in ["same", "other"] {
                s.submit(new_op(key, 1000), 0).await.unwrap();
            }
            let claimed = s.claim(1, 2, 60_000, &ClaimScope::All).await.unwrap();
            let answer = |key: &str| {
                let c = claimed.iter().find(|c| c.operation.idempotency_key == key).unwrap();
                Completion {
                    outbox_id: c.outbox_id,
                    operation_id: c.operation.id,
                    lease_token: c.lease_token,
                    attempt: Some(record(Outcome::Succeeded)),
                    transition: Transition::Succeeded {
                        provider_ref: Some(format!("ch_call_{key}")),
                        response: None,
                    },
                }
            };
            // Events overtake both calls; one agrees (without an object id), one does not.
            let mut agrees = reported("evt_same", "ref-same", Reported::Settled(Outcome::Succeeded), 1);
            if let Some(Ok(report)) = &mut agrees.report {
                report.provider_ref = None;
            }
            let contradicts = reported("evt_other", "ref-other", Reported::Settled(Outcome::Failed), 1);
            s.receive(vec![agrees, contradicts], 2).await.unwrap();
            let recorded = s.complete(vec![answer("same"), answer("other")], 3).await.unwrap();
            assert_eq!(recorded, vec![Recorded::SettledElsewhere, Recorded::Conflict]);
            let same = s.operation("same").await.unwrap().unwrap();
            assert_eq!(
                (same.status, same.provider_ref.as_deref()),
                (OperationStatus::Succeeded, Some("ch_call_same"))
            );
            let other = s.operation("other").await.unwrap().unwrap();
            assert_eq!(other.status, OperationStatus::Unknown, "charged or not: a status lookup decides");
            // Events that ordered the outcomes (succeeded, then returned) are newer
            // than a late succeeded answer: no conflict.
            s.submit(new_op("returned", 1000), 4).await.unwrap();
            let c = s.claim(5, 1, 60_000, &ClaimScope::All).await.unwrap().remove(0);
            let events = vec![
                reported("evt_r1", "ref-returned", Reported::Settled(Outcome::Succeeded), 1),
                reported("evt_r2", "ref-returned", Reported::Settled(Outcome::Failed), 2),
            ];
            s.receive(events, 6).await.unwrap();
            let late = Completion {
                outbox_id: c.outbox_id,
                operation_id: c.operation.id,
                lease_token: c.lease_token,
                attempt: Some(record(Outcome::Succeeded)),
                transition: Transition::Succeeded { provider_ref: None, response: None },
            };
            assert_eq!(s.complete(vec![late], 7).await.unwrap(), vec![Recorded::SettledElsewhere]);
            assert_eq!(s.operation("returned").await.unwrap().unwrap().status, OperationStatus::Failed);
            assert!(other.last_error.unwrap().starts_with("conflict: the provider answered our call succeeded"));
        }

        /// Submits `key` at `at` and dead-letters it after one failed call.
        async fn dead_letter(s: &S, key: &str, at: i64) -> i64 {
            s.submit(new_op(key, 100), at).await.unwrap();
            let c = s.claim(at, 1, 1_000, &ClaimScope::All).await.unwrap().remove(0);
            let dead = Completion {
                outbox_id: c.outbox_id,
                lease_token: c.lease_token,
                operation_id: c.operation.id,
                attempt: Some(AttemptRecord { started_at_ms: at, ..record(Outcome::Failed) }),
                transition: Transition::DeadLetter { error: "attempts exhausted: HTTP 503".into() },
            };
            s.complete(vec![dead], at + 10).await.unwrap();
            c.outbox_id
        }

        #[tokio::test]
        async fn a_replayed_dead_letter_is_delivered_again_under_the_same_key_with_fresh_attempts() {
            let (_d, s) = store().await;
            let id = dead_letter(&s, "k1", 100).await;
            let listed = s.dead_letters(DeadLetterFilter::default(), 10).await.unwrap();
            assert_eq!(listed.len(), 1);
            let letter = &listed[0];
            assert_eq!((letter.kind, letter.id, letter.key.as_str()), (DeadLetterKind::Message, id, "k1"));
            assert_eq!((letter.attempts, letter.dead_at_ms), (1, 110));
            assert_eq!(letter.payload["amount"], 100);
            assert_eq!(letter.last_error.as_deref(), Some("attempts exhausted: HTTP 503"));
            let before = s.operation("k1").await.unwrap().unwrap();

            assert!(s.replay(DeadLetterKind::Message, id, Channel::Cli, 5_000).await.unwrap());
            assert!(!s.replay(DeadLetterKind::Message, id, Channel::Cli, 5_001).await.unwrap(), "no longer dead");
            assert!(s.dead_letters(DeadLetterFilter::default(), 10).await.unwrap().is_empty());
            let op = s.operation("k1").await.unwrap().unwrap();
            assert_eq!((op.status, op.dead_letter), (OperationStatus::Pending, false));
            assert_eq!(op.provider_key, before.provider_key, "the same idempotency key");
            assert_eq!((op.created_at_ms, op.delivery_started_at_ms), (100, 5_000));
            let c = s.claim(5_000, 1, 1_000, &ClaimScope::All).await.unwrap().remove(0);
            assert_eq!((c.attempts, c.interrupted), (1, false), "attempts count afresh");
            let history = s.history(op.id).await.unwrap();
            let changes: Vec<(&str, &str, &str)> =
                history.iter().map(|h| (h.subject, h.actor.as_str(), h.change.as_str())).collect();
            assert_eq!(
                changes,
                vec![
                    ("operation", "api", "created"),
                    ("attempt", "relay", "call 1: HTTP 200, failed, 2 ms"),
                    ("message", "relay", "pending -> dead"),
                    ("operation", "relay", "pending -> failed"),
                    ("message", "operator:cli", "dead -> pending"),
                    ("operation", "operator:cli", "failed -> pending"),
                ]
            );
        }

        #[tokio::test]
        async fn purge_removes_a_dead_letter_for_good_and_the_history_says_who() {
            let (_d, s) = store().await;
            let id = dead_letter(&s, "k1", 100).await;
            assert!(!s.purge(DeadLetterKind::Forward, id, Channel::Api, 200).await.unwrap(), "wrong kind");
            assert!(s.purge(DeadLetterKind::Message, id, Channel::Api, 200).await.unwrap());
            assert!(!s.purge(DeadLetterKind::Message, id, Channel::Api, 201).await.unwrap());
            assert!(!s.replay(DeadLetterKind::Message, id, Channel::Api, 202).await.unwrap(), "gone");
            assert_eq!(s.counts().await.unwrap().dead_letters, 0);
            let op = s.operation("k1").await.unwrap().unwrap();
            assert_eq!(op.status, OperationStatus::Failed);
            let last = s.history(op.id).await.unwrap().pop().unwrap();
            assert_eq!((last.at_ms, last.actor.as_str(), last.change.as_str()), (200, "operator:api", "purged"));
            // The history itself cannot be rewritten.
            assert!(sqlx::query("DELETE FROM history").execute(s.pool()).await.is_err());
        }

        #[tokio::test]
        async fn the_four_numbers_follow_the_calls_the_queue_and_the_acknowledgements() {
            let (_d, s) = store().await;
            let known = vec!["payments".to_owned(), "idle".to_owned()];
            dead_letter(&s, "d1", 1_000).await;
            s.ack_dead_letters(Channel::Cli, 2_000).await.unwrap();
            dead_letter(&s, "d2", 3_000).await;
            // Two open messages, the older created at 4_000; one answered call.
            s.submit(new_op("open1", 1), 4_000).await.unwrap();
            s.submit(new_op("open2", 1), 6_000).await.unwrap();
            let stats = s.stats(10_000, 60_000, &known).await.unwrap();
            assert_eq!(stats.last_ack_ms, Some(2_000));
            let names: Vec<&str> = stats.integrations.iter().map(|i| i.integration.as_str()).collect();
            assert_eq!(names, vec!["idle", "payments"]);
            let idle = &stats.integrations[0];
            assert_eq!((idle.calls, idle.success_ratio, idle.depth, idle.oldest_open_age_ms), (0, None, 0, None));
            let p = &stats.integrations[1];
            assert_eq!((p.calls, p.answered, p.success_ratio, p.p95_ms), (2, 0, Some(0.0), Some(2)));
            assert_eq!((p.depth, p.oldest_open_age_ms), (2, Some(6_000)));
            assert_eq!((p.dead_letters, p.dead_letters_unacked), (2, 1));
            // Calls older than the window are not counted.
            let later = s.stats(100_000, 60_000, &known).await.unwrap();
            assert_eq!(later.integrations[1].calls, 0);
            s.ack_dead_letters(Channel::Ui, 20_000).await.unwrap();
            let acked = s.stats(20_000, 60_000, &known).await.unwrap();
            assert_eq!((acked.integrations[1].dead_letters, acked.integrations[1].dead_letters_unacked), (2, 0));
            // Operations waiting for a lookup or for a person, per integration
            // and in the counts (an index of their own on PostgreSQL).
            assert_eq!((acked.integrations[1].unknown, acked.integrations[1].needs_human), (0, 0));
            for (key, status) in [("open1", "unknown"), ("open2", "needs_human"), ("d1", "needs_human")] {
                sqlx::query("UPDATE operations SET status = $1 WHERE idempotency_key = $2")
                    .bind(status)
                    .bind(key)
                    .execute(s.pool())
                    .await
                    .unwrap();
            }
            let waiting = s.stats(20_000, 60_000, &known).await.unwrap();
            let (idle, p) = (&waiting.integrations[0], &waiting.integrations[1]);
            assert_eq!((idle.unknown, idle.needs_human, p.unknown, p.needs_human), (0, 0, 1, 2));
            let counts = s.counts().await.unwrap();
            assert_eq!((counts.pending, counts.unknown, counts.needs_human), (0, 1, 2));
        }

        #[tokio::test]
        async fn the_latest_report_of_each_provider_is_found_however_many_follow() {
            let (_d, s) = store().await;
            let report = |provider: &str, at: i64| crate::NewReport {
                provider: provider.into(),
                window_from_ms: 0,
                window_to_ms: at,
                started_at_ms: at,
                finished_at_ms: at,
                actor: "schedule".into(),
                ours: 0,
                theirs: 0,
                discrepancies: vec![],
                report: json!({}),
                text: String::new(),
                alert: false,
            };
            s.save_report(report("payments", 1)).await.unwrap();
            s.save_report(report("shipping", 2)).await.unwrap();
            for at in 3..300 {
                s.save_report(report("payments", at)).await.unwrap();
            }
            let latest = s.latest_reports().await.unwrap();
            let got: Vec<(&str, i64)> = latest.iter().map(|r| (r.provider.as_str(), r.finished_at_ms)).collect();
            assert_eq!(got, vec![("payments", 299), ("shipping", 2)]);
            assert_eq!(
                s.reports(2).await.unwrap().iter().map(|r| r.finished_at_ms).collect::<Vec<_>>(),
                vec![299, 298]
            );
            assert_eq!(s.report(2).await.unwrap().unwrap().provider, "shipping");
        }
    };
}

pub(super) use store_tests;
