//! Recording intents: submissions, the Rust outbox API, and stored values that cannot be read or sent.

/// Recording intents: submissions, the Rust outbox API, and stored values that cannot be read or sent. For the `S` and `store()` in scope, inside [`super::store_tests!`].
macro_rules! intent_cases {
    () => {
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
            sqlx::query(ORDERS_TABLE).execute(s.pool()).await.unwrap();
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
                (Message { ordering_key: Some(" \n".into()), ..message("o5", 100) }, "ordering_key"),
            ] {
                let mut tx = s.begin().await.unwrap();
                let err = Outbox::enqueue(&mut tx, &m, 1).await.unwrap_err();
                assert!(matches!(err, StoreError::InvalidMessage { field } if field == blank), "{err:?}");
                tx.commit().await.unwrap();
            }
            assert_eq!(s.counts().await.unwrap().pending, 0, "nothing was written");
        }
    };
}

pub(crate) use intent_cases;
