//! The webhook inbox on SQLite: storing events once, applying them to the
//! operations ledger in the same transaction, and the forwarding queue.
//! What is decided and read back is shared ([`crate::inbox`]); this module
//! runs the statements, passing batches as JSON arrays (`json_each`).

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};
use sqlx::Row;
use sqlx::sqlite::SqliteConnection;

use super::SqliteStore;
use crate::error::{Context, StoreError};
use crate::inbox::{
    Batch, CONFLICT_NOTE, Ledger, StepColumns, claimed_forward, completion_steps, forward_changes,
    interrupted_steps, judge, lease_until,
};
use crate::model::{
    ClaimedForward, EventRecord, EventStep, ForwardCompletion, NewEvent, OperationEvent, Received, Recorded,
    StoredEvent,
};

crate::inbox::inbox_reads!(sqlx::SqlitePool, "length(payload)");

impl SqliteStore {
    /// Stores a batch of events in a fixed number of statements, whatever
    /// its size: one insert of every event, one read of the operations the
    /// new events name, one update of those that change, one close of their
    /// outbox messages, one insert of the history steps and one of the
    /// forwards. The ledger rule runs in between, in arrival order, on the
    /// rows read under the transaction's write lock.
    pub(super) async fn receive_events(
        &self,
        events: Vec<NewEvent>,
        now_ms: i64,
    ) -> Result<Vec<Received>, StoreError> {
        let mut tx = self.begin().await?;
        let rows: Vec<Value> = events
            .iter()
            .map(|e| json!([e.integration, e.event_id, hex::encode(&e.payload), e.headers.to_string()]))
            .collect();
        // `WHERE true` lets SQLite parse the upsert after a SELECT.
        let inserted = sqlx::query(
            "INSERT INTO inbox_events (integration, event_id, payload, headers, received_at_ms) \
             SELECT value ->> 0, value ->> 1, unhex(value ->> 2), value ->> 3, ?2 FROM json_each(?1) WHERE true \
             ON CONFLICT (integration, event_id) DO NOTHING RETURNING seq, integration, event_id",
        )
        .bind(Value::Array(rows).to_string())
        .bind(now_ms)
        .fetch_all(&mut *tx)
        .await
        .context("storing webhook events")?;
        let mut batch = Batch::new(&events, &inserted, now_ms)?;
        apply_reports(&mut tx, &mut batch, now_ms).await?;
        insert_steps(&mut tx, &batch.steps).await?;
        if !batch.forwards.is_empty() {
            sqlx::query(
                "INSERT INTO forwards (event_seq, available_at_ms, created_at_ms, updated_at_ms) \
                 SELECT value, ?2, ?2, ?2 FROM json_each(?1)",
            )
            .bind(serde_json::to_string(&batch.forwards).unwrap_or_default())
            .bind(now_ms)
            .execute(&mut *tx)
            .await
            .context("queueing events for forwarding")?;
        }
        tx.commit().await.context("committing webhook events")?;
        Ok(batch.received())
    }

    pub(super) async fn stored_events_after(
        &self,
        after: i64,
        limit: u32,
        max_bytes: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        reads::events_after(&self.reader, after, limit, max_bytes).await
    }

    pub(super) async fn events_of_operation(
        &self,
        operation_id: i64,
    ) -> Result<Vec<OperationEvent>, StoreError> {
        reads::operation_events(&self.reader, operation_id).await
    }

    pub(super) async fn event_record(
        &self,
        integration: &str,
        event_id: &str,
    ) -> Result<Option<EventRecord>, StoreError> {
        reads::event(&self.reader, integration, event_id).await
    }

    pub(super) async fn claim_due_forwards(
        &self,
        now_ms: i64,
        limit: u32,
        lease_ms: u64,
    ) -> Result<Vec<ClaimedForward>, StoreError> {
        let mut tx = self.begin().await?;
        let due = sqlx::query(
            "SELECT f.id, f.attempts, f.previous_delay_ms, f.locked_until_ms, f.updated_at_ms, e.seq, \
             e.integration, e.event_id, e.payload, e.headers, e.received_at_ms \
             FROM forwards f JOIN inbox_events e ON e.seq = f.event_seq \
             WHERE f.state = 'pending' AND f.available_at_ms <= ?1 \
             AND (f.locked_until_ms IS NULL OR f.locked_until_ms <= ?1) \
             ORDER BY f.available_at_ms, f.id LIMIT ?2",
        )
        .bind(now_ms)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await
        .context("finding due forwards")?;
        if due.is_empty() {
            return Ok(Vec::new());
        }
        insert_steps(&mut tx, &interrupted_steps(&due)?).await?;
        let token = self.tokens.fetch_add(1, Ordering::Relaxed);
        let ids: Vec<i64> = due.iter().map(|r| r.get::<i64, _>("id")).collect();
        sqlx::query(
            "UPDATE forwards SET locked_until_ms = ?2, lease_token = ?3, attempts = attempts + 1, \
             updated_at_ms = ?4 WHERE id IN (SELECT value FROM json_each(?1))",
        )
        .bind(serde_json::to_string(&ids).unwrap_or_default())
        .bind(lease_until(now_ms, lease_ms))
        .bind(token)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .context("leasing forwards")?;
        tx.commit().await.context("committing a forward claim")?;
        due.iter().map(|r| claimed_forward(r, token)).collect()
    }

    pub(super) async fn complete_claimed_forwards(
        &self,
        completions: Vec<ForwardCompletion>,
        now_ms: i64,
    ) -> Result<Vec<Recorded>, StoreError> {
        let mut tx = self.begin().await?;
        insert_steps(&mut tx, &completion_steps(&completions)).await?;
        // Each transition applies only while the forward still carries its
        // claim's lease token (compare-and-set), read first so that each
        // result is judged by its own token.
        let ids: Vec<i64> = completions.iter().map(|c| c.id).collect();
        let tokens: HashMap<i64, i64> = sqlx::query(
            "SELECT id, lease_token FROM forwards WHERE state = 'pending' AND lease_token IS NOT NULL \
             AND id IN (SELECT value FROM json_each(?1))",
        )
        .bind(serde_json::to_string(&ids).unwrap_or_default())
        .fetch_all(&mut *tx)
        .await
        .context("reading forward leases")?
        .iter()
        .map(|r| (r.get("id"), r.get("lease_token")))
        .collect();
        let recorded = judge(&completions, &tokens);
        let rows: Vec<Value> = forward_changes(&completions, &recorded, now_ms)
            .iter()
            .map(|c| {
                json!([c.id, c.state, c.available_at_ms, c.delay_ms, c.error, c.dead_at_ms, c.given_back])
            })
            .collect();
        sqlx::query(
            "UPDATE forwards SET state = u.value ->> 1, \
             available_at_ms = COALESCE(u.value ->> 2, available_at_ms), \
             previous_delay_ms = COALESCE(u.value ->> 3, previous_delay_ms), last_error = u.value ->> 4, \
             dead_at_ms = u.value ->> 5, locked_until_ms = NULL, lease_token = NULL, \
             attempts = attempts - (u.value ->> 6), updated_at_ms = ?2, changed_by = 'forwarder' \
             FROM json_each(?1) u WHERE forwards.id = u.value ->> 0",
        )
        .bind(Value::Array(rows).to_string())
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .context("completing forwards")?;
        tx.commit().await.context("committing forward results")?;
        Ok(recorded)
    }
}

/// Applies the new events' reports ([`Ledger::apply`]) to the operations
/// they name (read once, under the write lock), writes the operations that
/// changed and closes the outbox messages of those an event settled; the
/// ledger steps go to `batch.steps`.
async fn apply_reports(
    conn: &mut SqliteConnection,
    batch: &mut Batch<'_>,
    now_ms: i64,
) -> Result<(), StoreError> {
    if batch.reports.is_empty() {
        return Ok(());
    }
    let keys: Vec<Value> = batch.reports.iter().map(|(_, r)| json!([r.provider, r.reference])).collect();
    let rows = sqlx::query(
        "SELECT o.id, o.provider, o.reference, o.status, o.event_version, \
         EXISTS (SELECT 1 FROM outbox x WHERE x.operation_id = o.id AND x.state = 'dead') AS dead \
         FROM json_each(?1) k JOIN operations o ON o.provider = k.value ->> 0 AND o.reference = k.value ->> 1",
    )
    .bind(Value::Array(keys).to_string())
    .fetch_all(&mut *conn)
    .await
    .context("finding the events' operations")?;
    let mut ledger = Ledger::read(&rows)?;
    ledger.apply(&batch.reports, &mut batch.steps, now_ms);
    let changed: Vec<Value> = ledger
        .changes()
        .iter()
        .map(|c| json!([c.id, c.status, c.version, c.settled, c.provider_ref, c.conflict]))
        .collect();
    if changed.is_empty() {
        return Ok(());
    }
    // A settled operation needs no lookup and keeps no error; an attempt
    // still in flight loses its lease, so its late result cannot overwrite
    // what the provider said.
    sqlx::query(
        "UPDATE operations SET status = u.value ->> 1, event_version = u.value ->> 2, \
         provider_ref = COALESCE(provider_ref, u.value ->> 4), \
         last_error = CASE WHEN u.value ->> 3 THEN NULL WHEN u.value ->> 5 THEN ?3 ELSE last_error END, \
         next_reconcile_at_ms = CASE WHEN u.value ->> 3 THEN NULL WHEN u.value ->> 5 THEN ?2 \
           ELSE next_reconcile_at_ms END, \
         reconcile_attempts = CASE WHEN u.value ->> 5 THEN 0 ELSE reconcile_attempts END, \
         updated_at_ms = CASE WHEN u.value ->> 3 OR u.value ->> 5 THEN ?2 ELSE updated_at_ms END, \
         changed_by = 'webhook' \
         FROM json_each(?1) u WHERE operations.id = u.value ->> 0",
    )
    .bind(Value::Array(changed.clone()).to_string())
    .bind(now_ms)
    .bind(CONFLICT_NOTE)
    .execute(&mut *conn)
    .await
    .context("applying events to operations")?;
    // A dead letter stays one unless the provider says the operation
    // succeeded (replaying it then would be wrong).
    sqlx::query(
        "UPDATE outbox SET state = 'done', in_flight = 0, locked_until_ms = NULL, lease_token = NULL, \
         dead_at_ms = NULL, updated_at_ms = ?2, changed_by = 'webhook' FROM json_each(?1) u \
         WHERE outbox.operation_id = u.value ->> 0 AND u.value ->> 3 \
         AND (outbox.state = 'pending' OR (outbox.state = 'dead' AND u.value ->> 1 = 'succeeded'))",
    )
    .bind(Value::Array(changed).to_string())
    .bind(now_ms)
    .execute(&mut *conn)
    .await
    .context("closing settled operations' messages")?;
    Ok(())
}

/// Appends history steps, `(event seq, step)`, in one statement.
async fn insert_steps(conn: &mut SqliteConnection, steps: &[(i64, EventStep)]) -> Result<(), StoreError> {
    if steps.is_empty() {
        return Ok(());
    }
    let rows: Vec<Value> = steps
        .iter()
        .map(StepColumns::of)
        .map(|s| {
            json!([
                s.event_seq,
                s.kind,
                s.at_ms,
                s.duration_ms,
                s.status_code,
                s.operation_id,
                s.effect,
                s.detail
            ])
        })
        .collect();
    sqlx::query(
        "INSERT INTO inbox_steps (event_seq, kind, at_ms, duration_ms, status_code, operation_id, effect, detail) \
         SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5, value ->> 6, \
         value ->> 7 FROM json_each(?1)",
    )
    .bind(Value::Array(rows).to_string())
    .execute(conn)
    .await
    .context("appending to events' histories")?;
    Ok(())
}
