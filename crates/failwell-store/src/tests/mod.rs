//! Store tests on SQLite (a temporary file) and on PostgreSQL
//! (`DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/test`,
//! each test in a schema of its own, dropped afterwards).

mod cases;
mod sqlite_checks;

use cases::store_tests;

mod sqlite {
    use crate::{SqliteStore, Synchronous};

    type S = SqliteStore;

    /// Statements that switch off the schema's checks of counts.
    const COUNT_CHECKS_OFF: &[&str] = &["DROP TRIGGER outbox_attempts_checked"];
    /// What the schema says when it refuses a count out of range.
    const COUNT_CHECK_SAYS: &str = "outbox.attempts must be a count";

    async fn store() -> (tempfile::TempDir, S) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("t.db").display());
        (dir, SqliteStore::open(&url, Synchronous::Normal).await.unwrap())
    }

    super::store_tests!();

    /// A database written by the previous schema (migrations 0001–0004)
    /// keeps every operation and message through the upgrade: pending
    /// work is claimed under its provider, dead letters stay listed, and
    /// outbox ids are not reused afterwards.
    #[tokio::test]
    async fn an_upgraded_database_keeps_its_work_and_never_reuses_an_id() {
        use crate::prelude::*;
        use crate::{ClaimScope, DeadLetterFilter, NewOperation, Submitted};

        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("old.db").display());
        let previous = dir.path().join("previous");
        std::fs::create_dir(&previous).unwrap();
        let migrations = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/sqlite");
        for name in ["0001_core.sql", "0002_inbox.sql", "0003_inbox_processing.sql", "0004_operator.sql"] {
            std::fs::copy(migrations.join(name), previous.join(name)).unwrap();
        }
        let options: sqlx::sqlite::SqliteConnectOptions = url.parse().unwrap();
        let pool = sqlx::SqlitePool::connect_with(options.create_if_missing(true)).await.unwrap();
        sqlx::migrate::Migrator::new(previous.as_path()).await.unwrap().run(&pool).await.unwrap();
        for (key, provider) in [("pending", "payments"), ("done", "payments"), ("dead", "shipping")] {
            sqlx::query(
                "INSERT INTO operations (idempotency_key, provider, operation, payload, request_hash, provider_key, \
                 created_at_ms, updated_at_ms) VALUES ($1, $2, 'charge', '{}', 'h', 'fw_' || $1, 1, 1)",
            )
            .bind(key)
            .bind(provider)
            .execute(&pool)
            .await
            .unwrap();
        }
        sqlx::query("UPDATE outbox SET state = 'done' WHERE operation_id = 2").execute(&pool).await.unwrap();
        sqlx::query("UPDATE operations SET status = 'succeeded' WHERE id = 2").execute(&pool).await.unwrap();
        sqlx::query(
            "UPDATE outbox SET state = 'dead', dead_at_ms = 5, last_error = 'gave up' WHERE operation_id = 3",
        )
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query("UPDATE operations SET status = 'failed' WHERE id = 3").execute(&pool).await.unwrap();
        pool.close().await;

        let s = SqliteStore::open(&url, Synchronous::Normal).await.unwrap();
        let claimed = s.claim(10, 10, 1_000, &ClaimScope::Providers(vec!["payments".into()])).await.unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].operation.idempotency_key, "pending");
        let dead = s.dead_letters(DeadLetterFilter::default(), 10).await.unwrap();
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].last_error.as_deref(), Some("gave up"));
        assert!(s.operation("done").await.unwrap().unwrap().status == crate::OperationStatus::Succeeded);
        // The newest message deleted, a new one does not take its id.
        let highest: i64 =
            sqlx::query_scalar("SELECT max(id) FROM outbox").fetch_one(s.pool()).await.unwrap();
        sqlx::query("DELETE FROM outbox WHERE id = $1").bind(highest).execute(s.pool()).await.unwrap();
        let op = NewOperation {
            idempotency_key: "new".into(),
            provider: "payments".into(),
            operation: "charge".into(),
            reference: None,
            payload: serde_json::json!({"amount": 1}),
        };
        let Submitted::Created(created) = s.submit(op, 20).await.unwrap() else { panic!("not created") };
        let id: i64 = sqlx::query_scalar("SELECT id FROM outbox WHERE operation_id = $1")
            .bind(created.id)
            .fetch_one(s.pool())
            .await
            .unwrap();
        assert!(id > highest, "outbox id {id} reused (the deleted one was {highest})");
    }
}

mod postgres {
    use crate::PostgresStore;

    type S = PostgresStore;

    /// Statements that switch off the schema's checks of counts.
    const COUNT_CHECKS_OFF: &[&str] = &["ALTER TABLE outbox DROP CONSTRAINT outbox_numbers_in_range"];
    /// What the schema says when it refuses a count out of range.
    const COUNT_CHECK_SAYS: &str = "outbox_numbers_in_range";

    /// A schema of its own on the test server, dropped when this is.
    pub(super) struct Schema {
        url: String,
        name: String,
    }

    impl Drop for Schema {
        fn drop(&mut self) {
            let (url, name) = (self.url.clone(), self.name.clone());
            // Dropped inside a runtime: the statement runs on a thread of its own.
            let dropped = std::thread::spawn(move || {
                tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
                    // A connection of the test still inside a transaction
                    // (its rollback waits for this runtime thread) holds
                    // locks: the schema is then left behind, not waited for.
                    let options: sqlx::postgres::PgConnectOptions = url.parse()?;
                    let pool = sqlx::PgPool::connect_with(options.options([("lock_timeout", "2s")])).await?;
                    sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {name} CASCADE")))
                        .execute(&pool)
                        .await?;
                    pool.close().await;
                    Ok::<_, sqlx::Error>(())
                })
            });
            let _ = dropped.join();
        }
    }

    pub(super) fn server_url() -> String {
        std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
    }

    /// A fresh schema and the URL whose connections use it.
    pub(super) async fn schema() -> (Schema, String) {
        let url = server_url();
        let name = format!("store_test_{:016x}", rand::random::<u64>());
        let pool = sqlx::PgPool::connect(&url).await.expect("PostgreSQL at DATABASE_URL");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {name}"))).execute(&pool).await.unwrap();
        pool.close().await;
        let separator = if url.contains('?') { '&' } else { '?' };
        let schema_url = format!("{url}{separator}options=-csearch_path%3D{name}");
        (Schema { url, name }, schema_url)
    }

    async fn store() -> (Schema, S) {
        let (schema, url) = schema().await;
        (schema, PostgresStore::open(&url, 4).await.unwrap())
    }

    super::store_tests!();

    /// PostgreSQL only: the outbox as applications use it, across
    /// transactions and in plain SQL.
    mod outbox {
        use serde_json::json;

        use super::store;
        use crate::prelude::*;
        use crate::{ClaimScope, Message, Outbox, Submitted};

        fn charge(key: &str) -> Message {
            Message {
                idempotency_key: Some(key.into()),
                ..Message::new("payments", "charge", json!({"amount": 100, "reference": key}))
            }
        }

        /// Ids are taken at insert and transactions commit in any order: a
        /// message with a lower id that commits after one with a higher id
        /// was claimed is still claimed (no id watermark skips it).
        #[tokio::test]
        async fn a_lower_id_committed_later_is_never_skipped() {
            let (_schema, s) = store().await;
            let mut first = s.begin().await.unwrap();
            let Submitted::Created(early) =
                Outbox::enqueue(&mut first, &charge("early-id"), 1).await.unwrap()
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
            let claimed = s.claim(2, 10, 60_000, &ClaimScope::All).await.unwrap();
            assert_eq!(claimed.len(), 1);
            assert_eq!(claimed[0].operation.idempotency_key, "late-id");
            first.commit().await.unwrap();
            let claimed = s.claim(3, 10, 60_000, &ClaimScope::All).await.unwrap();
            assert_eq!(claimed.len(), 1, "the lower id is claimed after it commits");
            assert_eq!(claimed[0].operation.idempotency_key, "early-id");
        }

        /// What the HTTP API would refuse, the contract refuses too, with
        /// `check_violation` and a message naming what is wrong; nothing is
        /// written.
        #[tokio::test]
        async fn the_sql_contract_refuses_what_the_api_would() {
            let (_schema, s) = store().await;
            for (payload, available_at, reference, says) in [
                ("[1, 2]", "NULL", "NULL", "payload must be a JSON object, not array"),
                ("\"text\"", "NULL", "NULL", "payload must be a JSON object, not string"),
                ("{\"a\": 1}", "'infinity'", "NULL", "is not a time within a year from now"),
                ("{\"a\": 1}", "now() + interval '2 years'", "NULL", "is not a time within a year from now"),
                ("{\"a\": 1}", "NULL", "''", "operations_reference_not_blank"),
                ("{\"a\": 1}", "NULL", "'  '", "operations_reference_not_blank"),
            ] {
                let error = sqlx::query(sqlx::AssertSqlSafe(format!(
                    "INSERT INTO failwell_outbox (provider, operation, payload, available_at, reference) \
                     VALUES ('payments', 'charge', '{payload}', {available_at}, {reference})"
                )))
                .execute(s.pool())
                .await
                .unwrap_err();
                let error = error.as_database_error().unwrap();
                assert_eq!(error.code().as_deref(), Some("23514"), "{error}");
                assert!(error.message().contains(says), "{error}");
            }
            let big = sqlx::query(
                "INSERT INTO failwell_outbox (provider, operation, payload) \
                 VALUES ('payments', 'charge', jsonb_build_object('x', repeat('x', 1100000)))",
            )
            .execute(s.pool())
            .await
            .unwrap_err();
            assert!(big.to_string().contains("at most 1048576"), "{big}");
            let count: i64 =
                sqlx::query_scalar("SELECT count(*) FROM operations").fetch_one(s.pool()).await.unwrap();
            assert_eq!(count, 0);
        }

        /// What the application inserts is what failwell stores and sends:
        /// numbers with all their digits and their notation, keys in their
        /// order, whitespace included (the column is `json`); a `jsonb`
        /// value still inserts. What failwell could not read back (nesting
        /// deeper than 127, `\u0000`) is refused at the insert.
        #[tokio::test]
        async fn the_sql_contract_stores_the_payload_as_written() {
            let (_schema, s) = store().await;
            let exact = r#"{"z": 1e-400, "a":123456789012345678901234567890,"m":0.1000000000000000055511151231257827,"n":-9223372036854775809,"big":1e309,"s":"\u00e9"}"#;
            sqlx::query(
                "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key) \
                 VALUES ('payments', 'charge', $1::json, 'exact'), ('payments', 'charge', $2::jsonb, 'binary')",
            )
            .bind(exact)
            .bind(r#"{"b": 1, "a": 2}"#)
            .execute(s.pool())
            .await
            .unwrap();
            let stored: String =
                sqlx::query_scalar("SELECT payload FROM operations WHERE idempotency_key = 'exact'")
                    .fetch_one(s.pool())
                    .await
                    .unwrap();
            assert_eq!(stored, exact);
            let op = s.operation("exact").await.unwrap().unwrap();
            assert_eq!(op.unreadable, None);
            assert_eq!(
                op.payload.to_string(),
                r#"{"z":1e-400,"a":123456789012345678901234567890,"m":0.1000000000000000055511151231257827,"n":-9223372036854775809,"big":1e+309,"s":"é"}"#
            );
            assert_eq!(s.operation("binary").await.unwrap().unwrap().payload.to_string(), r#"{"a":2,"b":1}"#);
            // The same request with its keys in another order is a replay.
            sqlx::query(
                "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key) \
                 VALUES ('payments', 'charge', '{\"a\": 2, \"b\": 1}', 'binary')",
            )
            .execute(s.pool())
            .await
            .unwrap();

            let nested =
                |depth: usize| format!("{{\"a\":{}{}}}", "[".repeat(depth - 1), "]".repeat(depth - 1));
            sqlx::query(
                "INSERT INTO failwell_outbox (provider, operation, payload) VALUES ('payments', 'charge', $1::json), \
                 ('payments', 'charge', '{\"note\": \"$serde_json::private::Number as text\"}')",
            )
                .bind(nested(127))
                .execute(s.pool())
                .await
                .unwrap();
            for (payload, says) in [
                (nested(128), "payload nests arrays and objects deeper than 127 levels"),
                (r#"{"a": "nul \u0000"}"#.to_string(), "unsupported Unicode escape sequence"),
                (
                    r#"{"a": [{"$serde_json::private::Number": "12"}]}"#.to_string(),
                    "serde_json::private::, which",
                ),
                (
                    r#"{"a": {"\u0024serde_json::private::Number": "12"}}"#.to_string(),
                    "serde_json::private::, which",
                ),
                (r#"{"a": 1e131072}"#.to_string(), "value overflows numeric format"),
                // Within numeric, but 131072 digits written out in full.
                (r#"{"a": [1, {"b": 1e131071}]}"#.to_string(), "more than 1000 digits"),
                (r#"{"a": -1.5e-1000}"#.to_string(), "more than 1000 digits"),
            ] {
                let error = sqlx::query(
                    "INSERT INTO failwell_outbox (provider, operation, payload) VALUES ('payments', 'charge', $1::json)",
                )
                .bind(&payload)
                .execute(s.pool())
                .await
                .unwrap_err();
                assert!(error.to_string().contains(says), "{error}");
            }
            let blank = sqlx::query(
                "INSERT INTO failwell_outbox (provider, operation, payload, idempotency_key) \
                 VALUES ('payments', 'charge', '{}', ' \t')",
            )
            .execute(s.pool())
            .await
            .unwrap_err();
            assert!(blank.to_string().contains("must not be empty or blank"), "{blank}");
            let claimed = s.claim(i64::MAX / 2, 10, 1_000, &ClaimScope::All).await.unwrap();
            assert_eq!(claimed.len(), 4, "every stored message reads back");
            assert!(claimed.iter().all(|c| c.operation.unreadable.is_none()));
        }

        /// A row another program damaged reads through the view as the
        /// JSON string of its text, and the other rows still read.
        #[tokio::test]
        async fn the_view_shows_a_damaged_row_as_its_text() {
            let (_schema, s) = store().await;
            Outbox::enqueue(&mut *s.pool().acquire().await.unwrap(), &charge("fine"), 1).await.unwrap();
            Outbox::enqueue(&mut *s.pool().acquire().await.unwrap(), &charge("damaged"), 1).await.unwrap();
            sqlx::query("UPDATE operations SET payload = '{\"amount\": ' WHERE idempotency_key = 'damaged'")
                .execute(s.pool())
                .await
                .unwrap();
            let rows: Vec<(String, serde_json::Value)> =
                sqlx::query_as("SELECT idempotency_key, payload::jsonb FROM failwell_outbox ORDER BY id")
                    .fetch_all(s.pool())
                    .await
                    .unwrap();
            assert_eq!(rows[0].1["reference"], "fine");
            assert_eq!(rows[1], ("damaged".to_string(), json!("{\"amount\": ")));
        }

        /// The SQL key derivation (for applications inserting with plain
        /// SQL) is the Rust one.
        #[tokio::test]
        async fn the_provider_key_in_sql_is_the_rust_one() {
            let (_schema, s) = store().await;
            for (provider, operation, intent, group) in
                [("payments", "charge", "order-1", 0), ("p", "o", "ключ ✓", 3), ("", "", "", 7)]
            {
                let sql: String = sqlx::query_scalar("SELECT failwell_provider_key($1, $2, $3, $4)")
                    .bind(provider)
                    .bind(operation)
                    .bind(intent)
                    .bind(group as i32)
                    .fetch_one(s.pool())
                    .await
                    .unwrap();
                assert_eq!(sql, failwell_policy::derive_key(provider, operation, intent, group));
            }
        }
    }

    /// PostgreSQL only: the webhook inbox with several failwell processes
    /// (two stores, each with its own pool, on one schema) receiving,
    /// relaying and forwarding at once. With a missing or misordered lock a
    /// round stores or applies something twice, lets the feed pass an
    /// event, or deadlocks (which PostgreSQL breaks by failing one side).
    mod inbox_races {
        use std::collections::HashMap;
        use std::time::{Duration, Instant};

        use failwell_policy::{Outcome, Reported};
        use serde_json::json;

        use crate::prelude::*;

        use crate::{
            ClaimScope, Completion, EventReport, ForwardCompletion, ForwardTransition, LedgerEffect,
            NewEvent, NewOperation, OperationStatus, PostgresStore, Received, Recorded, StoreError,
            Transition,
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
            sqlx::query_scalar(
                "SELECT count(*) FROM history WHERE subject = 'operation' AND subject_id = $1 \
                 AND change = 'pending -> succeeded'",
            )
            .bind(operation_id)
            .fetch_one(s.pool())
            .await
            .unwrap()
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
                let (first, second) = tokio::join!(
                    a.receive(vec![ex.clone(), ey.clone()], round),
                    b.receive(vec![ey, ex], round)
                );
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
            assert_eq!(
                (counts.inbox_events, counts.forwards_pending),
                (2 * ROUNDS as u64, 2 * ROUNDS as u64)
            );
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn the_feed_never_passes_an_event_still_being_stored() {
            let (_schema, url, a, b) = two_stores().await;
            a.submit(new_op("held"), 0).await.unwrap();
            let op = a.operation("held").await.unwrap().unwrap();
            // Another writer (the relay, say) holds the operation's message.
            let holder = sqlx::PgPool::connect(&url).await.unwrap();
            let mut held = holder.begin().await.unwrap();
            let holder_pid: i32 =
                sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut *held).await.unwrap();
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
                let mut events: Vec<NewEvent> =
                    keys.iter().map(|k| settles(&format!("evt_{k}"), k)).collect();
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
                    let message: String =
                        sqlx::query_scalar("SELECT state FROM outbox WHERE operation_id = $1")
                            .bind(op.id)
                            .fetch_one(relay.pool())
                            .await
                            .unwrap();
                    assert_eq!(message, "done", "round {round}: {key}");
                    // Whichever came first settled it; the other saw it settled.
                    let effects = ledger_effects(&relay, &format!("evt_{key}")).await;
                    let expected = match answered.get(key) {
                        Some(Recorded::Applied) => LedgerEffect::Confirmed,
                        Some(Recorded::SettledElsewhere) | None => LedgerEffect::Resolved,
                        Some(other) => panic!("round {round}: {key}: the answer was {other:?}"),
                    };
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
    }
}

/// PostgreSQL: operators racing each other and the other writers on one
/// database, as separate failwell processes do (two stores, each with its
/// own pool, on one schema). Each race is run many rounds; with a missing
/// or misordered lock some round applies both sides, or deadlocks (which
/// PostgreSQL breaks by failing one side). Last, both stores are shown the
/// same operator scenario and must answer alike.
mod operator_races {
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
                assert_eq!(
                    status,
                    OperationStatus::Failed,
                    "round {round}: a purge leaves the operation failed"
                );
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
                0 => tokio::join!(
                    a.replay(kind, id, Channel::Cli, LATER),
                    b.replay(kind, id, Channel::Api, LATER)
                ),
                1 => tokio::join!(
                    a.purge(kind, id, Channel::Cli, LATER),
                    b.purge(kind, id, Channel::Api, LATER)
                ),
                _ => tokio::join!(
                    a.purge(kind, id, Channel::Cli, LATER),
                    b.replay(kind, id, Channel::Api, LATER)
                ),
            };
            let (x, y) = (x.unwrap(), y.unwrap());
            assert!(x ^ y, "round {round}: exactly one succeeds, got {x} and {y}");
            let history: Vec<String> = sqlx::query_scalar(
                "SELECT change FROM history WHERE subject = 'forward' AND subject_id = $1",
            )
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
            let lookups =
                a.attempts(op).await.unwrap().iter().filter(|r| r.kind == AttemptKind::Lookup).count();
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
        let messages =
            DeadLetterFilter { kind: Some(DeadLetterKind::Message), ..DeadLetterFilter::default() };
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
        s.alert_sent(&alert, AlertSent::Failed { error: "sink down".into(), retry_at_ms: 608 })
            .await
            .unwrap();
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
        for (event, payload) in [("evt_json", &b"{\"type\":\"charge\"}"[..]), ("evt_text", &b"not json"[..])]
        {
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
        let last =
            on_sqlite["dead history"].as_array().unwrap().iter().rev().find(|h| h["subject"] == "report");
        assert_eq!(last.unwrap()["change"], json!("discrepancy missing_at_provider (report 1)"));
        for (key, value) in on_sqlite.as_object().unwrap() {
            assert_eq!(&on_postgres[key], value, "{key} differs between SQLite and PostgreSQL");
        }
        assert_eq!(on_postgres, on_sqlite);
    }
}
