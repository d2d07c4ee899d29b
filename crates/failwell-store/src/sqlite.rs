//! The SQLite store: the embedded default (one process, one file).
//!
//! Write transactions start with `BEGIN IMMEDIATE`, so a transaction that
//! reads before it writes cannot fail to upgrade its lock; the file runs in
//! WAL mode with a busy timeout. Batch statements pass id lists as a JSON
//! array (`json_each`) instead of building SQL strings.

use std::str::FromStr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use failwell_policy::derive_key;
use serde_json::Value;
use sha2::{Digest, Sha256};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Row, Sqlite, Transaction};

use crate::Store;
use crate::error::{Context, StoreError};
use crate::model::{
    AttemptKind, AttemptRecord, AttemptRow, Claimed, Completion, Counts, NewOperation, Operation,
    OperationStatus, Reconciled, Resolution, Submitted, Transition,
};

/// How hard SQLite pushes each commit to disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Synchronous {
    /// fsync on every commit: an acknowledged operation survives power loss.
    /// The default.
    Full,
    /// WAL without fsync per commit: survives a process crash (`kill -9`),
    /// may lose the last commits on power loss. Faster.
    Normal,
}

/// The SQLite [`Store`].
///
/// Writes go through one connection (`writer`), so concurrent writers wait
/// in the pool's fair queue instead of in SQLite's sleeping busy handler;
/// reads use a separate pool of up to four connections (WAL lets them run
/// beside the writer).
#[derive(Clone, Debug)]
pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
    tokens: std::sync::Arc<AtomicI64>,
}

macro_rules! select_operation {
    ($tail:literal) => {
        concat!(
            "SELECT o.id, o.idempotency_key, o.provider, o.operation, o.reference, o.payload, o.status, ",
            "o.key_group, o.provider_key, o.key_first_sent_at_ms, o.attempts, o.provider_ref, o.response, ",
            "o.last_error, x.state = 'dead' AS dead_letter, o.reconcile_attempts, o.created_at_ms, o.updated_at_ms ",
            "FROM operations o LEFT JOIN outbox x ON x.operation_id = o.id ",
            $tail
        )
    };
}

impl SqliteStore {
    /// Opens (creating if missing) the database file at `url`
    /// (`sqlite://path`), sets WAL mode, foreign keys and a 30 s busy
    /// timeout, and applies the migrations. Errors: the file cannot be
    /// opened, or a migration fails.
    pub async fn open(url: &str, synchronous: Synchronous) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)
            .context("parsing the SQLite URL")?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(match synchronous {
                Synchronous::Full => SqliteSynchronous::Full,
                Synchronous::Normal => SqliteSynchronous::Normal,
            })
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(30));
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .connect_with(options.clone())
            .await
            .context("opening the SQLite database")?;
        sqlx::migrate!("./migrations/sqlite").run(&writer).await.map_err(StoreError::Migrate)?;
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            .test_before_acquire(false)
            .connect_with(options.create_if_missing(false))
            .await
            .context("opening the SQLite database for reading")?;
        let tokens = std::sync::Arc::new(AtomicI64::new(rand::random::<i64>() >> 1));
        Ok(Self { writer, reader, tokens })
    }

    /// Begins a write transaction (`BEGIN IMMEDIATE`) in which an application
    /// can change its own tables and call [`Outbox::enqueue`], so both commit
    /// or neither does.
    pub async fn begin(&self) -> Result<Transaction<'static, Sqlite>, StoreError> {
        self.writer.begin_with("BEGIN IMMEDIATE").await.context("beginning a transaction")
    }

    /// The write connection's pool, for an application's own statements
    /// outside a transaction of [`Self::begin`].
    pub fn pool(&self) -> &SqlitePool {
        &self.writer
    }

    /// Closes both pools, waiting for connections to be returned.
    pub async fn close(&self) {
        self.writer.close().await;
        self.reader.close().await;
    }
}

/// The transactional outbox API: record an intent inside the caller's
/// transaction.
#[derive(Debug)]
pub struct Outbox;

impl Outbox {
    /// Records `op` and its outbox message on `conn` (typically `&mut *tx`
    /// of a transaction from [`SqliteStore::begin`]), next to the caller's
    /// own writes. The provider idempotency key is derived from the intent
    /// ([`derive_key`]). When the key exists with the same request this
    /// returns [`Submitted::Replayed`] and writes nothing; with a different
    /// request, [`StoreError::KeyReused`].
    pub async fn enqueue(
        conn: &mut SqliteConnection,
        op: &NewOperation,
        now_ms: i64,
    ) -> Result<Submitted, StoreError> {
        let hash = request_hash(op);
        let provider_key = derive_key(&op.provider, &op.operation, &op.idempotency_key, 0);
        let inserted = sqlx::query(
            "INSERT INTO operations (idempotency_key, provider, operation, reference, payload, request_hash, \
             provider_key, created_at_ms, updated_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8) \
             ON CONFLICT (idempotency_key) DO NOTHING RETURNING id, idempotency_key, provider, operation, \
             reference, payload, status, key_group, provider_key, key_first_sent_at_ms, attempts, provider_ref, \
             response, last_error, FALSE AS dead_letter, reconcile_attempts, created_at_ms, updated_at_ms",
        )
        .bind(&op.idempotency_key)
        .bind(&op.provider)
        .bind(&op.operation)
        .bind(&op.reference)
        .bind(op.payload.to_string())
        .bind(&hash)
        .bind(&provider_key)
        .bind(now_ms)
        .fetch_optional(&mut *conn)
        .await;
        let inserted = match inserted {
            Ok(row) => row,
            // Another operation holds the reference; this may still be a
            // replay of that very operation, which the key check below finds.
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() && e.message().contains("reference") => {
                None
            }
            Err(source) => return Err(StoreError::Database { context: "inserting an operation", source }),
        };
        // The outbox message is inserted by the `operations_outbox` trigger.
        if let Some(row) = inserted {
            return operation_from_row(&row).map(Submitted::Created);
        }
        let stored: Option<String> =
            sqlx::query_scalar("SELECT request_hash FROM operations WHERE idempotency_key = ?1")
                .bind(&op.idempotency_key)
                .fetch_optional(&mut *conn)
                .await
                .context("reading an existing operation")?;
        match stored {
            None => {
                return Err(StoreError::ReferenceReused {
                    reference: op.reference.clone().unwrap_or_default(),
                });
            }
            Some(stored) if stored != hash => {
                return Err(StoreError::KeyReused { key: op.idempotency_key.clone() });
            }
            Some(_) => {}
        }
        let existing = operation_by_key(conn, &op.idempotency_key).await?;
        existing.map(Submitted::Replayed).ok_or_else(|| StoreError::Corrupt {
            what: "operation",
            detail: "vanished while being read".into(),
        })
    }
}

/// SHA-256 over the canonical JSON of (provider, operation, payload):
/// serde_json sorts object keys, so key order in the caller's JSON does not
/// matter.
fn request_hash(op: &NewOperation) -> String {
    let canonical = serde_json::json!([op.provider, op.operation, op.payload]).to_string();
    hex::encode(Sha256::digest(canonical.as_bytes()))
}

async fn operation_by_key(conn: &mut SqliteConnection, key: &str) -> Result<Option<Operation>, StoreError> {
    let row = sqlx::query(select_operation!("WHERE o.idempotency_key = ?1"))
        .bind(key)
        .fetch_optional(conn)
        .await
        .context("reading an operation")?;
    row.as_ref().map(operation_from_row).transpose()
}

fn json_column(row: &SqliteRow, column: &'static str) -> Result<Option<Value>, StoreError> {
    let text: Option<String> = row.try_get(column).context("reading a JSON column")?;
    text.map(|t| serde_json::from_str(&t))
        .transpose()
        .map_err(|e| StoreError::Corrupt { what: column, detail: e.to_string() })
}

fn operation_from_row(row: &SqliteRow) -> Result<Operation, StoreError> {
    let get = |c: &'static str| -> Result<i64, StoreError> { row.try_get(c).context("reading an operation") };
    let status: String = row.try_get("status").context("reading an operation")?;
    Ok(Operation {
        id: get("id")?,
        idempotency_key: row.try_get("idempotency_key").context("reading an operation")?,
        provider: row.try_get("provider").context("reading an operation")?,
        operation: row.try_get("operation").context("reading an operation")?,
        reference: row.try_get("reference").context("reading an operation")?,
        payload: json_column(row, "payload")?.unwrap_or(Value::Null),
        status: OperationStatus::parse(&status)
            .ok_or(StoreError::Corrupt { what: "status", detail: status.clone() })?,
        key_group: get("key_group")? as u32,
        provider_key: row.try_get("provider_key").context("reading an operation")?,
        key_first_sent_at_ms: row.try_get("key_first_sent_at_ms").context("reading an operation")?,
        attempts: get("attempts")? as u32,
        provider_ref: row.try_get("provider_ref").context("reading an operation")?,
        response: json_column(row, "response")?,
        last_error: row.try_get("last_error").context("reading an operation")?,
        dead_letter: row
            .try_get::<Option<bool>, _>("dead_letter")
            .context("reading an operation")?
            .unwrap_or(false),
        reconcile_attempts: get("reconcile_attempts")? as u32,
        created_at_ms: get("created_at_ms")?,
        updated_at_ms: get("updated_at_ms")?,
    })
}

async fn insert_attempt(
    conn: &mut SqliteConnection,
    operation_id: i64,
    attempt: &AttemptRecord,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO attempts (operation_id, kind, attempt_no, provider_key, started_at_ms, duration_ms, \
         status_code, error_kind, classification, outcome, decision) \
         SELECT o.id, ?2, o.attempts + (?2 = 'call'), CASE WHEN ?2 = 'call' THEN o.provider_key END, \
         ?3, ?4, ?5, ?6, ?7, ?8, ?9 FROM operations o WHERE o.id = ?1",
    )
    .bind(operation_id)
    .bind(attempt.kind.as_str())
    .bind(attempt.started_at_ms)
    .bind(attempt.duration_ms as i64)
    .bind(attempt.status_code.map(i64::from))
    .bind(&attempt.error_kind)
    .bind(attempt.classification)
    .bind(attempt.outcome.as_str())
    .bind(&attempt.decision)
    .execute(&mut *conn)
    .await
    .context("appending to the attempt history")?;
    if attempt.kind == AttemptKind::Call {
        sqlx::query("UPDATE operations SET attempts = attempts + 1 WHERE id = ?1")
            .bind(operation_id)
            .execute(&mut *conn)
            .await
            .context("counting an attempt")?;
    }
    Ok(())
}

/// Applies a transition to the message (compare-and-set on the lease) and,
/// if that succeeded, to its operation.
async fn apply(conn: &mut SqliteConnection, c: &Completion, now_ms: i64) -> Result<bool, StoreError> {
    let (state, available_at, delay, error, dead_at) = match &c.transition {
        Transition::Succeeded { .. } => ("done", None, None, None, None),
        Transition::Failed { error, .. } | Transition::Unknown { error, .. } => {
            ("done", None, None, Some(error), None)
        }
        Transition::Retry { available_at_ms, delay_ms, error } => {
            ("pending", Some(*available_at_ms), Some(*delay_ms as i64), Some(error), None)
        }
        Transition::DeadLetter { error } => ("dead", None, None, Some(error), Some(now_ms)),
    };
    let moved = sqlx::query(
        "UPDATE outbox SET state = ?3, available_at_ms = COALESCE(?4, available_at_ms), \
         previous_delay_ms = COALESCE(?5, previous_delay_ms), last_error = ?6, dead_at_ms = ?7, \
         in_flight = 0, locked_until_ms = NULL, lease_token = NULL, updated_at_ms = ?8 \
         WHERE id = ?1 AND lease_token = ?2 AND state = 'pending'",
    )
    .bind(c.outbox_id)
    .bind(c.lease_token)
    .bind(state)
    .bind(available_at)
    .bind(delay)
    .bind(error)
    .bind(dead_at)
    .bind(now_ms)
    .execute(&mut *conn)
    .await
    .context("completing an outbox message")?;
    if moved.rows_affected() == 0 {
        return Ok(false);
    }
    let (status, provider_ref, response, error, reconcile_at) = match &c.transition {
        Transition::Succeeded { provider_ref, response } => {
            (OperationStatus::Succeeded, provider_ref.as_deref(), response.as_ref(), None, None)
        }
        Transition::Failed { error, response } => {
            (OperationStatus::Failed, None, response.as_ref(), Some(error), None)
        }
        Transition::Retry { error, .. } => (OperationStatus::Pending, None, None, Some(error), None),
        Transition::Unknown { error, reconcile_at_ms } => {
            (OperationStatus::Unknown, None, None, Some(error), Some(*reconcile_at_ms))
        }
        Transition::DeadLetter { error } => (OperationStatus::Failed, None, None, Some(error), None),
    };
    set_operation(
        conn,
        c.operation_id,
        status,
        provider_ref,
        response,
        error.map(String::as_str),
        reconcile_at,
        now_ms,
    )
    .await?;
    Ok(true)
}

#[allow(clippy::too_many_arguments)]
async fn set_operation(
    conn: &mut SqliteConnection,
    id: i64,
    status: OperationStatus,
    provider_ref: Option<&str>,
    response: Option<&Value>,
    error: Option<&str>,
    reconcile_at_ms: Option<i64>,
    now_ms: i64,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE operations SET status = ?2, provider_ref = COALESCE(?3, provider_ref), \
         response = COALESCE(?4, response), last_error = ?5, next_reconcile_at_ms = ?6, \
         reconcile_attempts = CASE WHEN ?6 IS NULL THEN reconcile_attempts ELSE 0 END, updated_at_ms = ?7 \
         WHERE id = ?1",
    )
    .bind(id)
    .bind(status.as_str())
    .bind(provider_ref)
    .bind(response.map(Value::to_string))
    .bind(error)
    .bind(reconcile_at_ms)
    .bind(now_ms)
    .execute(conn)
    .await
    .context("updating an operation")?;
    Ok(())
}

impl Store for SqliteStore {
    async fn submit(&self, op: NewOperation, now_ms: i64) -> Result<Submitted, StoreError> {
        let mut tx = self.begin().await?;
        let submitted = Outbox::enqueue(&mut tx, &op, now_ms).await?;
        if matches!(submitted, Submitted::Created(_)) {
            tx.commit().await.context("committing an operation")?;
        }
        Ok(submitted)
    }

    async fn claim(&self, now_ms: i64, limit: u32, lease_ms: u64) -> Result<Vec<Claimed>, StoreError> {
        let mut tx = self.begin().await?;
        let due = sqlx::query(
            "SELECT id, operation_id, attempts, previous_delay_ms, in_flight FROM outbox \
             WHERE state = 'pending' AND available_at_ms <= ?1 AND (locked_until_ms IS NULL OR locked_until_ms <= ?1) \
             ORDER BY available_at_ms, id LIMIT ?2",
        )
        .bind(now_ms)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await
        .context("finding due outbox messages")?;
        if due.is_empty() {
            return Ok(Vec::new());
        }
        let token = self.tokens.fetch_add(1, Ordering::Relaxed);
        let ids: Vec<i64> = due.iter().map(|r| r.get::<i64, _>("id")).collect();
        let op_ids: Vec<i64> = due.iter().map(|r| r.get::<i64, _>("operation_id")).collect();
        let ids_json = serde_json::to_string(&ids).unwrap_or_default();
        let op_ids_json = serde_json::to_string(&op_ids).unwrap_or_default();
        // An attempt whose lease expired in flight may have reached the
        // provider: it goes into the history before the message is leased again.
        sqlx::query(
            "INSERT INTO attempts (operation_id, kind, attempt_no, provider_key, started_at_ms, duration_ms, \
             status_code, error_kind, classification, outcome, decision) \
             SELECT o.id, 'call', o.attempts + 1, o.provider_key, x.updated_at_ms, ?2 - x.updated_at_ms, NULL, \
             'interrupted', 'ambiguous', 'unknown', 'interrupted: the lease expired before a result was recorded' \
             FROM outbox x JOIN operations o ON o.id = x.operation_id \
             WHERE x.id IN (SELECT value FROM json_each(?1)) AND x.in_flight = 1",
        )
        .bind(&ids_json)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .context("recording interrupted attempts")?;
        sqlx::query(
            "UPDATE operations SET attempts = attempts + 1 WHERE id IN \
             (SELECT operation_id FROM outbox WHERE id IN (SELECT value FROM json_each(?1)) AND in_flight = 1)",
        )
        .bind(&ids_json)
        .execute(&mut *tx)
        .await
        .context("counting interrupted attempts")?;
        let lease_until = now_ms.saturating_add(i64::try_from(lease_ms).unwrap_or(i64::MAX));
        sqlx::query(
            "UPDATE outbox SET locked_until_ms = ?2, lease_token = ?3, attempts = attempts + 1, in_flight = 1, \
             updated_at_ms = ?4 WHERE id IN (SELECT value FROM json_each(?1))",
        )
        .bind(&ids_json)
        .bind(lease_until)
        .bind(token)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .context("leasing outbox messages")?;
        sqlx::query(
            "UPDATE operations SET key_first_sent_at_ms = COALESCE(key_first_sent_at_ms, ?2) \
             WHERE id IN (SELECT value FROM json_each(?1))",
        )
        .bind(&op_ids_json)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .context("stamping first key use")?;
        let rows = sqlx::query(select_operation!("WHERE o.id IN (SELECT value FROM json_each(?1))"))
            .bind(&op_ids_json)
            .fetch_all(&mut *tx)
            .await
            .context("reading claimed operations")?;
        tx.commit().await.context("committing a claim")?;
        let mut operations = std::collections::HashMap::with_capacity(rows.len());
        for row in &rows {
            let op = operation_from_row(row)?;
            operations.insert(op.id, op);
        }
        due.iter()
            .map(|r| {
                let operation_id: i64 = r.get("operation_id");
                let operation = operations.remove(&operation_id).ok_or(StoreError::Corrupt {
                    what: "outbox message",
                    detail: format!("operation {operation_id} is missing"),
                })?;
                Ok(Claimed {
                    outbox_id: r.get("id"),
                    lease_token: token,
                    attempts: r.get::<i64, _>("attempts") as u32 + 1,
                    previous_delay_ms: r.get::<i64, _>("previous_delay_ms") as u64,
                    interrupted: r.get::<i64, _>("in_flight") != 0,
                    operation,
                })
            })
            .collect()
    }

    async fn complete(&self, completions: Vec<Completion>, now_ms: i64) -> Result<Vec<bool>, StoreError> {
        let mut tx = self.begin().await?;
        let mut applied = Vec::with_capacity(completions.len());
        for c in &completions {
            insert_attempt(&mut tx, c.operation_id, &c.attempt).await?;
            applied.push(apply(&mut tx, c, now_ms).await?);
        }
        tx.commit().await.context("committing attempt results")?;
        Ok(applied)
    }

    async fn due_unknown(&self, now_ms: i64, limit: u32) -> Result<Vec<Operation>, StoreError> {
        let rows = sqlx::query(select_operation!(
            "WHERE o.status = 'unknown' AND o.next_reconcile_at_ms <= ?1 ORDER BY o.next_reconcile_at_ms LIMIT ?2"
        ))
        .bind(now_ms)
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await
        .context("finding unknown operations")?;
        rows.iter().map(operation_from_row).collect()
    }

    async fn reconcile(&self, r: Reconciled, now_ms: i64) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        let status: Option<String> = sqlx::query_scalar("SELECT status FROM operations WHERE id = ?1")
            .bind(r.operation_id)
            .fetch_optional(&mut *tx)
            .await
            .context("reading an operation")?;
        if status.as_deref() != Some("unknown") {
            return Ok(());
        }
        insert_attempt(&mut tx, r.operation_id, &r.attempt).await?;
        match &r.resolution {
            Resolution::Found { outcome, provider_ref, response } => {
                let status = OperationStatus::from(*outcome);
                set_operation(
                    &mut tx,
                    r.operation_id,
                    status,
                    provider_ref.as_deref(),
                    response.as_ref(),
                    None,
                    None,
                    now_ms,
                )
                .await?;
            }
            Resolution::Requeue { key_group, provider_key } => {
                sqlx::query(
                    "UPDATE operations SET status = 'pending', provider_key = ?3, \
                     key_first_sent_at_ms = CASE WHEN key_group = ?2 THEN key_first_sent_at_ms END, \
                     key_group = ?2, next_reconcile_at_ms = NULL, updated_at_ms = ?4 WHERE id = ?1",
                )
                .bind(r.operation_id)
                .bind(i64::from(*key_group))
                .bind(provider_key)
                .bind(now_ms)
                .execute(&mut *tx)
                .await
                .context("requeueing an operation")?;
                sqlx::query(
                    "UPDATE outbox SET state = 'pending', available_at_ms = ?2, in_flight = 0, \
                     locked_until_ms = NULL, lease_token = NULL, updated_at_ms = ?2 WHERE operation_id = ?1",
                )
                .bind(r.operation_id)
                .bind(now_ms)
                .execute(&mut *tx)
                .await
                .context("requeueing an outbox message")?;
            }
            Resolution::DeadLetter { error } => {
                set_operation(
                    &mut tx,
                    r.operation_id,
                    OperationStatus::Failed,
                    None,
                    None,
                    Some(error),
                    None,
                    now_ms,
                )
                .await?;
                sqlx::query(
                    "UPDATE outbox SET state = 'dead', dead_at_ms = ?2, last_error = ?3, updated_at_ms = ?2 \
                     WHERE operation_id = ?1",
                )
                .bind(r.operation_id)
                .bind(now_ms)
                .bind(error)
                .execute(&mut *tx)
                .await
                .context("dead-lettering an outbox message")?;
            }
            Resolution::Later { retry_at_ms, error } => {
                sqlx::query(
                    "UPDATE operations SET next_reconcile_at_ms = ?2, reconcile_attempts = reconcile_attempts + 1, \
                     last_error = ?3, updated_at_ms = ?4 WHERE id = ?1",
                )
                .bind(r.operation_id)
                .bind(retry_at_ms)
                .bind(error)
                .bind(now_ms)
                .execute(&mut *tx)
                .await
                .context("postponing a reconciliation")?;
            }
        }
        tx.commit().await.context("committing a reconciliation")?;
        Ok(())
    }

    async fn operation(&self, idempotency_key: &str) -> Result<Option<Operation>, StoreError> {
        let mut conn = self.reader.acquire().await.context("acquiring a connection")?;
        operation_by_key(&mut conn, idempotency_key).await
    }

    async fn attempts(&self, operation_id: i64) -> Result<Vec<AttemptRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT kind, attempt_no, provider_key, started_at_ms, duration_ms, status_code, error_kind, \
             classification, outcome, decision FROM attempts WHERE operation_id = ?1 ORDER BY id",
        )
        .bind(operation_id)
        .fetch_all(&self.reader)
        .await
        .context("reading the attempt history")?;
        rows.iter()
            .map(|r| {
                let kind: String = r.get("kind");
                Ok(AttemptRow {
                    kind: match kind.as_str() {
                        "call" => AttemptKind::Call,
                        "lookup" => AttemptKind::Lookup,
                        _ => AttemptKind::Skipped,
                    },
                    attempt_no: r.get::<i64, _>("attempt_no") as u32,
                    provider_key: r.get("provider_key"),
                    started_at_ms: r.get("started_at_ms"),
                    duration_ms: r.get::<i64, _>("duration_ms") as u64,
                    status_code: r.get::<Option<i64>, _>("status_code").map(|s| s as u16),
                    error_kind: r.get("error_kind"),
                    classification: r.get("classification"),
                    outcome: r.get("outcome"),
                    decision: r.get("decision"),
                })
            })
            .collect()
    }

    async fn counts(&self) -> Result<Counts, StoreError> {
        let row = sqlx::query(
            "SELECT \
               (SELECT COUNT(*) FROM operations WHERE status = 'pending') AS pending, \
               (SELECT COUNT(*) FROM operations WHERE status = 'succeeded') AS succeeded, \
               (SELECT COUNT(*) FROM operations WHERE status = 'failed') AS failed, \
               (SELECT COUNT(*) FROM operations WHERE status = 'unknown') AS unknown, \
               (SELECT COUNT(*) FROM outbox WHERE state = 'dead') AS dead_letters, \
               (SELECT COUNT(*) FROM attempts WHERE kind = 'call') AS attempts",
        )
        .fetch_one(&self.reader)
        .await
        .context("counting operations")?;
        let n = |c: &str| row.get::<i64, _>(c) as u64;
        Ok(Counts {
            pending: n("pending"),
            succeeded: n("succeeded"),
            failed: n("failed"),
            unknown: n("unknown"),
            dead_letters: n("dead_letters"),
            attempts: n("attempts"),
        })
    }
}

#[cfg(test)]
mod tests;
