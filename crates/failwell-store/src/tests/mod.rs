//! Store tests on SQLite (a temporary file), on PostgreSQL
//! (`DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/test`,
//! each test in a schema of its own, dropped afterwards) and on MySQL
//! (`MYSQL_URL`, each test in a database of its own).

mod cases;
mod contract_cases;
mod ledger_contract_cases;
mod sqlite_checks;
mod sqlite_contract;

use cases::store_tests;

/// A call's attempt with `outcome`: answered 200, started at 1 ms, 2 ms
/// long.
pub(crate) fn record(outcome: failwell_policy::Outcome) -> crate::AttemptRecord {
    crate::AttemptRecord {
        kind: crate::AttemptKind::Call,
        started_at_ms: 1,
        duration_ms: 2,
        status_code: Some(200),
        error_kind: None,
        classification: None,
        outcome,
        decision: "done".into(),
    }
}

/// The result of the attempt on claimed message `c`: its `attempt` record
/// and its operation's `transition`.
pub(crate) fn completion(
    c: &crate::Claimed,
    attempt: Option<crate::AttemptRecord>,
    transition: crate::Transition,
) -> crate::Completion {
    crate::Completion {
        outbox_id: c.outbox_id,
        lease_token: c.lease_token,
        operation_id: c.operation.id,
        attempt,
        transition,
    }
}

/// Claims what is due at `at` and completes each `(idempotency key,
/// transition)` at `at + 1`, without an attempt record.
pub(crate) async fn settle<S: crate::OutboxStore + ?Sized>(
    s: &S,
    outcomes: Vec<(&str, crate::Transition)>,
    at: i64,
) {
    let claimed = s.claim(at, outcomes.len() as u32, 60_000, &crate::ClaimScope::All).await.unwrap();
    let done = outcomes
        .into_iter()
        .map(|(key, transition)| {
            let c = claimed.iter().find(|c| c.operation.idempotency_key == key).expect("claimed");
            crate::Completion {
                outbox_id: c.outbox_id,
                lease_token: c.lease_token,
                operation_id: c.operation.id,
                attempt: None,
                transition,
            }
        })
        .collect();
    s.complete(done, at + 1).await.unwrap();
}

mod sqlite {
    use crate::{SqliteStore, Synchronous};

    type S = SqliteStore;

    /// Statements that switch off the schema's checks of counts.
    const COUNT_CHECKS_OFF: &[&str] = &["DROP TRIGGER outbox_attempts_checked"];
    /// What the schema says when it refuses a count out of range.
    const COUNT_CHECK_SAYS: &str = "outbox.attempts must be a count";
    /// An application's own table, for the cases that write one.
    const ORDERS_TABLE: &str = "CREATE TABLE orders (id TEXT PRIMARY KEY)";

    async fn store() -> (tempfile::TempDir, S) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("t.db").display());
        (dir, SqliteStore::open(&url, Synchronous::Normal).await.unwrap())
    }

    super::store_tests!();

    /// A database written by the previous schema (migrations 0001–0004)
    /// keeps every operation and message through the upgrade: pending
    /// work is claimed under its provider, dead letters stay listed, and
    /// outbox ids are not reused afterwards. An operation's creation reads
    /// the same whether it was stored before or after the upgrade.
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
            hold: None,
        };
        let Submitted::Created(created) = s.submit(op, 20).await.unwrap() else { panic!("not created") };
        let id: i64 = sqlx::query_scalar("SELECT id FROM outbox WHERE operation_id = $1")
            .bind(created.id)
            .fetch_one(s.pool())
            .await
            .unwrap();
        assert!(id > highest, "outbox id {id} reused (the deleted one was {highest})");
        // Recorded before the upgrade (a history row) or after it
        // (`created_by`): one `created` entry each, first in its history.
        for operation_id in [1, created.id] {
            let history = s.history(operation_id).await.unwrap();
            let creations = history.iter().filter(|h| h.change == "created").count();
            assert_eq!((creations, history[0].change.as_str()), (1, "created"), "{history:?}");
        }
    }
}

mod mysql;
mod mysql_contract;
mod operator_races;
mod postgres;

/// Runs `cleanup` to its end on a runtime of its own, on a thread of its
/// own: a test's guard is dropped inside the test's runtime, which cannot
/// run it. On an error, what it would drop is left behind, and said.
fn clean_up<F>(cleanup: impl FnOnce() -> F + Send + 'static)
where
    F: std::future::Future<Output = Result<(), sqlx::Error>>,
{
    let done = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(cleanup())
    });
    if let Ok(Err(e)) = done.join() {
        eprintln!("left behind, the clean-up failed: {e}");
    }
}
