//! The outbox contract's cases that read the same on SQLite and on MySQL,
//! where failwell fills the request hash of a row an application inserted
//! ([`contract_cases!`]).

/// Defines the shared contract tests, and the functions `orders_table`,
/// `insert`, `charge` and `count` on the application's `pool`, in the
/// invoking module, which provides `store()` (a guard, the store and the
/// application's pool). `clock` selects the database's clock as the
/// trigger reads it, in ms since the Unix epoch (`now_ms(app)`); `begin`
/// starts the application's transactions, `status` is what the
/// application reads status from, `provisional` a `LIKE` pattern of the
/// provisional keys of rows inserted without one.
macro_rules! contract_cases {
    (clock = $clock:literal, begin = $begin:literal, pool = $pool:ty, status = $status:literal, provisional = $provisional:literal $(,)?) => {
        /// What the application reads a message's status from.
        const STATUS: &str = $status;
        /// The provisional keys of rows inserted without one (`LIKE`).
        const PROVISIONAL: &str = $provisional;

        /// Inserts every store refuses the same way: columns, values and
        /// what the refusal says.
        const REFUSED: [(&str, &str, &str); 6] = [
            ("provider, operation, payload", "' ', 'charge', '{}'", "provider must not be empty or blank"),
            ("provider, operation, payload", "'payments', '', '{}'", "operation must not be empty or blank"),
            (
                "provider, operation, payload, idempotency_key",
                "'payments', 'charge', '{}', char(9)",
                "idempotency_key must not be empty or blank",
            ),
            (
                "provider, operation, payload, reference",
                "'payments', 'charge', '{}', '  '",
                "reference must not be empty or blank",
            ),
            ("provider, operation, payload", "'payments', 'charge', '[1]'", "payload must be a JSON object"),
            (
                "provider, operation, payload, ordering_key",
                "'payments', 'charge', '{}', ''",
                "ordering_key must not be empty or blank",
            ),
        ];

        /// The database's clock, which the trigger reads, in ms since the
        /// Unix epoch.
        async fn now_ms(app: &$pool) -> i64 {
            sqlx::query_scalar($clock).fetch_one(app).await.unwrap()
        }

        /// Creates the application's own table, `orders`.
        async fn orders_table(app: &$pool) {
            sqlx::query("CREATE TABLE orders (reference VARCHAR(64) PRIMARY KEY, amount BIGINT NOT NULL)")
                .execute(app)
                .await
                .unwrap();
        }

        /// Inserts a row into `failwell_outbox`: `columns` and their SQL
        /// `values`.
        async fn insert(app: &$pool, columns: &str, values: &str) -> Result<(), sqlx::Error> {
            sqlx::query(sqlx::AssertSqlSafe(format!("INSERT INTO failwell_outbox ({columns}) VALUES ({values})")))
                .execute(app)
                .await
                .map(drop)
        }

        /// A charge of `payload` under `key` (SQL: `NULL` for none).
        async fn charge(app: &$pool, key: &str, payload: &str) -> Result<(), sqlx::Error> {
            let values = format!("'payments', 'charge', '{payload}', {key}");
            insert(app, "provider, operation, payload, idempotency_key", &values).await
        }

        /// The one number `sql` selects.
        async fn count(app: &$pool, sql: &str) -> i64 {
            sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned())).fetch_one(app).await.unwrap()
        }

        /// The same key with the same request is a replay (keys in another
        /// order, other whitespace): one message. With another request, or
        /// another key holding the reference, the insert is refused.
        #[tokio::test]
        async fn the_same_key_replays_the_same_request_and_refuses_another() {
            let (_d, s, app) = store().await;
            let columns = "provider, operation, payload, idempotency_key, reference";
            insert(&app, columns, "'payments', 'charge', '{\"amount\": 100, \"tags\": [1, 2.5]}', 'k', 'order-1'")
                .await
                .unwrap();
            insert(&app, columns, "'payments', 'charge', '{ \"tags\":[1,2.50],\"amount\":100 }', 'k', 'order-1'")
                .await
                .unwrap();
            assert_eq!(count(&app, &format!("SELECT COUNT(*) FROM {STATUS}")).await, 1);
            for (values, says) in [
                (
                    "'payments', 'charge', '{\"amount\": 101, \"tags\": [1, 2.5]}', 'k', 'order-1'",
                    "already used with a different request",
                ),
                (
                    "'payments', 'refund', '{\"amount\": 100, \"tags\": [1, 2.5]}', 'k', 'order-1'",
                    "already used with a different request",
                ),
                (
                    "'payments', 'charge', '{\"amount\": 100, \"tags\": [1, 2.5]}', 'other', 'order-1'",
                    "reference already belongs",
                ),
                ("'payments', 'charge', '{\"amount\": 7}', NULL, 'order-1'", "reference already belongs"),
            ] {
                let error = insert(&app, columns, values).await.unwrap_err().to_string();
                assert!(error.contains(says), "{values}: {error}");
            }
            // A blank ordering key is refused on a replay too.
            let blank = insert(
                &app,
                &format!("{columns}, ordering_key"),
                "'payments', 'charge', '{\"amount\": 100, \"tags\": [1, 2.5]}', 'k', 'order-1', ' '",
            )
            .await
            .unwrap_err()
            .to_string();
            assert!(blank.contains("ordering_key must not be empty or blank"), "{blank}");
            // Without a key, the same request under the same reference is a replay.
            insert(&app, columns, "'payments', 'charge', '{\"tags\": [1, 2.5], \"amount\": 100}', NULL, 'order-1'")
                .await
                .unwrap();
            assert_eq!(count(&app, "SELECT COUNT(*) FROM operations").await, 1);
            assert_eq!(count(&app, "SELECT COUNT(*) FROM outbox").await, 1);
            // failwell's own API sees the row as its own once filled: a
            // replay, or a misuse of the key.
            let message = Message {
                idempotency_key: Some("k".into()),
                reference: Some("order-1".into()),
                ..Message::new("payments", "charge", json!({"tags": [1, 2.5], "amount": 100}))
            };
            let mut tx = s.begin().await.unwrap();
            let submitted = Outbox::enqueue(&mut tx, &message, now_ms(&app).await).await.unwrap();
            assert!(matches!(submitted, Submitted::Replayed(_)), "{submitted:?}");
            let other = Message { payload: json!({"amount": 5}), ..message };
            let error = Outbox::enqueue(&mut tx, &other, now_ms(&app).await).await.unwrap_err();
            assert!(matches!(error, StoreError::KeyReused { .. }), "{error}");
            tx.commit().await.unwrap();
            let claimed = s.claim(now_ms(&app).await + 1, 10, 60_000, &ClaimScope::All).await.unwrap();
            assert_eq!(claimed.len(), 1, "one message");
        }

        /// The insert commits with the application's own rows, or neither
        /// does; the committed message is claimed with the key failwell
        /// derives, and its status read back.
        #[tokio::test]
        async fn a_rollback_leaves_neither_the_order_nor_its_message() {
            let (_d, s, app) = store().await;
            for (reference, commit) in [("order-rolled-back", false), ("order-committed", true)] {
                let mut tx = app.begin_with($begin).await.unwrap();
                sqlx::query("INSERT INTO orders (reference, amount) VALUES (?, 1250)")
                    .bind(reference)
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                sqlx::query(
                    "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key, reference) \
                     VALUES ('payments', 'charge', json_object('amount', 1250, 'reference', ?), ?, ?)",
                )
                .bind(reference)
                .bind(reference)
                .bind(reference)
                .execute(&mut *tx)
                .await
                .unwrap();
                if commit { tx.commit().await.unwrap() } else { tx.rollback().await.unwrap() }
            }
            assert_eq!(count(&app, "SELECT COUNT(*) FROM orders").await, 1);
            assert_eq!(count(&app, "SELECT COUNT(*) FROM operations").await, 1);
            assert_eq!(count(&app, "SELECT COUNT(*) FROM history").await, 1, "the history has only the committed row");
            let claimed = s.claim(now_ms(&app).await + 1, 10, 60_000, &ClaimScope::All).await.unwrap();
            assert_eq!(claimed.len(), 1);
            let op = &claimed[0].operation;
            assert_eq!(op.idempotency_key, "order-committed");
            assert_eq!(op.provider_key, failwell_policy::derive_key("payments", "charge", "order-committed", 0));
            assert_eq!(op.payload, json!({"amount": 1250, "reference": "order-committed"}));
            let (status, delivery, attempts): (String, String, i64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT status, delivery, attempts FROM {STATUS} WHERE idempotency_key = 'order-committed'"
            )))
            .fetch_one(&app)
            .await
            .unwrap();
            assert_eq!((status.as_str(), delivery.as_str(), attempts), ("pending", "pending", 1));
        }

        /// A request inserted twice without a key is one message: failwell
        /// gives the first the key `sha256:` and the request hash, as on
        /// every other path, and marks the second done without sending it.
        #[tokio::test]
        async fn a_request_inserted_twice_without_a_key_is_delivered_once() {
            let (_d, s, app) = store().await;
            charge(&app, "NULL", "{\"amount\": 3, \"currency\": \"eur\"}").await.unwrap();
            charge(&app, "NULL", "{\"currency\": \"eur\", \"amount\": 3}").await.unwrap();
            let provisional = format!("SELECT COUNT(*) FROM operations WHERE idempotency_key LIKE '{PROVISIONAL}'");
            assert_eq!(count(&app, &provisional).await, 2);
            let now = now_ms(&app).await + 1;
            let claimed = s.claim(now, 10, 60_000, &ClaimScope::All).await.unwrap();
            assert_eq!(claimed.len(), 1, "{claimed:?}");
            let request = json!({"amount": 3, "currency": "eur"});
            let hash = crate::outbox::request_hash("payments", "charge", &request);
            assert_eq!(claimed[0].operation.idempotency_key, format!("sha256:{hash}"));
            let message = Message::new("payments", "charge", request);
            let mut tx = s.begin().await.unwrap();
            let Submitted::Replayed(op) = Outbox::enqueue(&mut tx, &message, now).await.unwrap() else {
                panic!("the API's key for the request is not the one failwell filled in")
            };
            tx.rollback().await.unwrap();
            assert_eq!(op.id, claimed[0].operation.id);
            assert_eq!(op.provider_key, failwell_policy::derive_key("payments", "charge", &op.idempotency_key, 0));
            let (delivery, status, error): (String, String, String) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT delivery, status, last_error FROM {STATUS} WHERE idempotency_key LIKE '{PROVISIONAL}'"
            )))
            .fetch_one(&app)
            .await
            .unwrap();
            assert_eq!((delivery.as_str(), status.as_str()), ("done", "failed"));
            assert!(error.contains(&format!("the same request as operation {}", op.id)), "{error}");
            // Inserted again after the first was filled: set aside the same way.
            charge(&app, "NULL", "{\"amount\": 3, \"currency\": \"eur\"}").await.unwrap();
            assert!(s.claim(now + 1, 10, 60_000, &ClaimScope::All).await.unwrap().is_empty());
            assert_eq!(count(&app, "SELECT COUNT(*) FROM outbox WHERE state = 'done'").await, 2);
        }

        /// A payload the trigger cannot judge (a number too long for
        /// failwell's other paths) is set aside by failwell, never sent; the
        /// other rows are still delivered.
        #[tokio::test]
        async fn a_payload_failwell_refuses_is_set_aside_before_it_is_claimed() {
            let (_d, s, app) = store().await;
            charge(&app, "'huge'", &format!("{{\"amount\": 1{}}}", "0".repeat(1001))).await.unwrap();
            charge(&app, "'fine'", "{\"amount\": 1}").await.unwrap();
            let claimed = s.claim(now_ms(&app).await + 1, 10, 60_000, &ClaimScope::All).await.unwrap();
            assert_eq!(claimed.len(), 1);
            assert_eq!(claimed[0].operation.idempotency_key, "fine");
            let op = s.operation("huge").await.unwrap().unwrap();
            assert_eq!(op.status, OperationStatus::Failed);
            assert!(op.last_error.as_deref().unwrap_or_default().contains("set aside, not sent"), "{op:?}");
            // An operator's replay is refused too: it would send it.
            let letters = s.dead_letters(crate::DeadLetterFilter::default(), 10).await.unwrap();
            let replayed = s.replay(crate::DeadLetterKind::Message, letters[0].id, crate::Channel::Cli, 2).await;
            let Err(StoreError::InvalidPayload { reason }) = replayed else { panic!("replayed: {replayed:?}") };
            assert!(reason.contains("more than 1000 digits"), "{reason}");
            assert!(s.claim(now_ms(&app).await + 1, 10, 60_000, &ClaimScope::All).await.unwrap().is_empty());
        }

        /// A key-less request whose `sha256:` key an application also wrote
        /// out itself (not filled yet) is the same request: sent once.
        #[tokio::test]
        async fn a_derived_key_written_out_by_the_application_is_the_same_request() {
            let (_d, s, app) = store().await;
            let message = Message::new("payments", "charge", json!({"amount": 9}));
            let mut tx = s.begin().await.unwrap();
            let Submitted::Created(op) = Outbox::enqueue(&mut tx, &message, 1).await.unwrap() else {
                panic!("replayed")
            };
            tx.rollback().await.unwrap();
            charge(&app, "NULL", "{\"amount\": 9}").await.unwrap();
            charge(&app, &format!("'{}'", op.idempotency_key), "{\"amount\": 9}").await.unwrap();
            let claimed = s.claim(now_ms(&app).await + 1, 10, 60_000, &ClaimScope::All).await.unwrap();
            assert_eq!(claimed.len(), 1, "{claimed:?}");
            assert_eq!(claimed[0].operation.idempotency_key, op.idempotency_key);
        }

        /// A delivered message leaves the outbox; what the application
        /// reads still says it was delivered, from its operation. A failed
        /// one stays `done` until retention, a retried one `pending`.
        #[tokio::test]
        async fn a_delivered_message_leaves_the_outbox_and_still_reads_as_done() {
            let (_d, s, app) = store().await;
            for key in ["'ok'", "'refused'", "'again'"] {
                charge(&app, key, "{\"amount\": 1}").await.unwrap();
            }
            let now = now_ms(&app).await + 1;
            let claimed = s.claim(now, 10, 60_000, &ClaimScope::All).await.unwrap();
            let results = claimed
                .iter()
                .map(|c| {
                    let (outcome, transition) = match c.operation.idempotency_key.as_str() {
                        "ok" => (
                            failwell_policy::Outcome::Succeeded,
                            crate::Transition::Succeeded { provider_ref: Some("ch_1".into()), response: None },
                        ),
                        "refused" => (
                            failwell_policy::Outcome::Failed,
                            crate::Transition::Failed { error: "HTTP 402".into(), response: None },
                        ),
                        _ => (
                            failwell_policy::Outcome::Failed,
                            crate::Transition::Retry { available_at_ms: now + 60_000, delay_ms: 60_000, error: "HTTP 503".into() },
                        ),
                    };
                    crate::tests::completion(c, Some(crate::tests::record(outcome)), transition)
                })
                .collect();
            s.complete(results, now + 1).await.unwrap();
            let messages = "SELECT COUNT(*) FROM outbox x JOIN operations o ON o.id = x.operation_id WHERE o.idempotency_key";
            assert_eq!(count(&app, &format!("{messages} = 'ok'")).await, 0, "the delivered message left");
            assert_eq!(count(&app, &format!("{messages} = 'refused' AND x.state = 'done'")).await, 1);
            assert_eq!(count(&app, &format!("{messages} = 'again' AND x.state = 'pending'")).await, 1);
            let rows: Vec<(String, String, String, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT idempotency_key, status, delivery, attempts FROM {STATUS} ORDER BY id"
            )))
            .fetch_all(&app)
            .await
            .unwrap();
            let row = |k: &str, st: &str, d: &str| (k.to_owned(), st.to_owned(), d.to_owned(), 1);
            assert_eq!(
                rows,
                [row("ok", "succeeded", "done"), row("refused", "failed", "done"), row("again", "pending", "pending")]
            );
            let ok = s.operation("ok").await.unwrap().unwrap();
            let history = s.history(ok.id).await.unwrap();
            let changes: Vec<&str> = history.iter().map(|h| h.change.as_str()).collect();
            assert!(changes.contains(&"pending -> done") && !changes.contains(&"purged"), "{changes:?}");
        }
    };
}

pub(super) use contract_cases;
