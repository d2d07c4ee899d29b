//! The webhook inbox on SQLite: storing events once, applying them to the
//! operations ledger in the same transaction, and the forwarding queue.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use failwell_policy::{EventEffect, Ledger, Outcome, apply_event};
use serde_json::{Value, json};
use sqlx::Row;
use sqlx::sqlite::{SqliteConnection, SqliteRow};

use super::SqliteStore;
use crate::error::{Context, StoreError};
use crate::model::{
    ClaimedForward, EventRecord, EventReport, EventStep, ForwardCompletion, ForwardTransition, LedgerEffect,
    NewEvent, OperationEvent, OperationStatus, Received, Recorded, StoredEvent,
};

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
        let mut new: HashMap<(String, String), i64> =
            inserted.iter().map(|r| ((r.get("integration"), r.get("event_id")), r.get("seq"))).collect();
        // The first delivery of each inserted event is the new one; any
        // other, in this batch or later, is a duplicate.
        let fresh: Vec<Option<i64>> =
            events.iter().map(|e| new.remove(&(e.integration.clone(), e.event_id.clone()))).collect();
        let mut steps = Vec::new();
        let reports: Vec<(i64, &EventReport)> = events
            .iter()
            .zip(&fresh)
            .filter_map(|(e, seq)| match (seq, &e.report) {
                (Some(seq), Some(Ok(report))) => Some((*seq, report)),
                (Some(seq), Some(Err(why))) => {
                    let step = EventStep::new("ledger", now_ms, why.clone());
                    steps.push((*seq, EventStep { effect: Some(LedgerEffect::NotApplicable), ..step }));
                    None
                }
                _ => None,
            })
            .collect();
        apply_reports(&mut tx, &reports, &mut steps, now_ms).await?;
        insert_steps(&mut tx, &steps).await?;
        let forwards: Vec<i64> =
            events.iter().zip(&fresh).filter(|(e, _)| e.forward).filter_map(|(_, seq)| *seq).collect();
        if !forwards.is_empty() {
            sqlx::query(
                "INSERT INTO forwards (event_seq, available_at_ms, created_at_ms, updated_at_ms) \
                 SELECT value, ?2, ?2, ?2 FROM json_each(?1)",
            )
            .bind(serde_json::to_string(&forwards).unwrap_or_default())
            .bind(now_ms)
            .execute(&mut *tx)
            .await
            .context("queueing events for forwarding")?;
        }
        tx.commit().await.context("committing webhook events")?;
        Ok(fresh.iter().map(|seq| if seq.is_some() { Received::New } else { Received::Duplicate }).collect())
    }

    pub(super) async fn stored_events_after(
        &self,
        after: i64,
        limit: u32,
        max_bytes: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        // Sizes first (SQLite reads a blob's length from the record
        // header), so the page stops at `max_bytes` before any payload is
        // loaded.
        let sizes: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT seq, length(payload) FROM inbox_events WHERE seq > ?1 ORDER BY seq LIMIT ?2",
        )
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await
        .context("reading the event feed")?;
        let mut bytes = 0usize;
        let last = sizes
            .iter()
            .take_while(|(_, size)| {
                let first = bytes == 0;
                bytes = bytes.saturating_add((*size).max(1) as usize);
                first || bytes <= max_bytes
            })
            .last();
        let Some((last, _)) = last else { return Ok(Vec::new()) };
        let rows = sqlx::query(
            "SELECT seq, integration, event_id, payload, headers, received_at_ms FROM inbox_events \
             WHERE seq > ?1 AND seq <= ?2 ORDER BY seq",
        )
        .bind(after)
        .bind(last)
        .fetch_all(&self.reader)
        .await
        .context("reading the event feed")?;
        rows.iter().map(event_from_row).collect()
    }

    pub(super) async fn events_of_operation(
        &self,
        operation_id: i64,
    ) -> Result<Vec<OperationEvent>, StoreError> {
        let rows = sqlx::query(
            "SELECT e.integration, e.event_id, s.kind, s.at_ms, s.duration_ms, s.status_code, s.operation_id, \
             s.effect, s.detail FROM inbox_steps s JOIN inbox_events e ON e.seq = s.event_seq \
             WHERE s.operation_id = ?1 ORDER BY s.id",
        )
        .bind(operation_id)
        .fetch_all(&self.reader)
        .await
        .context("reading an operation's events")?;
        rows.iter()
            .map(|r| {
                Ok(OperationEvent {
                    integration: r.get("integration"),
                    event_id: r.get("event_id"),
                    step: step_from_row(r)?,
                })
            })
            .collect()
    }

    pub(super) async fn event_record(
        &self,
        integration: &str,
        event_id: &str,
    ) -> Result<Option<EventRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT e.seq, e.integration, e.event_id, e.payload, e.headers, e.received_at_ms, \
             f.state AS forward_state, COALESCE(f.attempts, 0) AS forward_attempts, \
             f.last_error AS forward_last_error, \
             CASE WHEN f.state = 'pending' THEN f.available_at_ms END AS forward_due_at_ms \
             FROM inbox_events e LEFT JOIN forwards f ON f.event_seq = e.seq \
             WHERE e.integration = ?1 AND e.event_id = ?2",
        )
        .bind(integration)
        .bind(event_id)
        .fetch_optional(&self.reader)
        .await
        .context("reading an event")?;
        let Some(row) = row else { return Ok(None) };
        let event = event_from_row(&row)?;
        let steps = sqlx::query(
            "SELECT kind, at_ms, duration_ms, status_code, operation_id, effect, detail FROM inbox_steps \
             WHERE event_seq = ?1 ORDER BY id",
        )
        .bind(event.seq)
        .fetch_all(&self.reader)
        .await
        .context("reading an event's history")?;
        let steps = steps.iter().map(step_from_row).collect::<Result<_, _>>()?;
        Ok(Some(EventRecord {
            event,
            steps,
            forward_state: row.get("forward_state"),
            forward_attempts: row.get::<i64, _>("forward_attempts") as u32,
            forward_last_error: row.get("forward_last_error"),
            forward_due_at_ms: row.get("forward_due_at_ms"),
        }))
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
        // A forward still leased when claimed again was cut short (its
        // worker stopped): that attempt may have been delivered.
        let interrupted: Vec<(i64, EventStep)> = due
            .iter()
            .filter(|r| r.get::<Option<i64>, _>("locked_until_ms").is_some())
            .map(|r| {
                let detail = format!(
                    "interrupted: the lease expired before attempt {} recorded a result (it may have been delivered)",
                    r.get::<i64, _>("attempts")
                );
                (r.get("seq"), EventStep::new("forward", r.get("updated_at_ms"), detail))
            })
            .collect();
        insert_steps(&mut tx, &interrupted).await?;
        let token = self.tokens.fetch_add(1, Ordering::Relaxed);
        let ids: Vec<i64> = due.iter().map(|r| r.get::<i64, _>("id")).collect();
        sqlx::query(
            "UPDATE forwards SET locked_until_ms = ?2, lease_token = ?3, attempts = attempts + 1, \
             updated_at_ms = ?4 WHERE id IN (SELECT value FROM json_each(?1))",
        )
        .bind(serde_json::to_string(&ids).unwrap_or_default())
        .bind(now_ms.saturating_add(i64::try_from(lease_ms).unwrap_or(i64::MAX)))
        .bind(token)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .context("leasing forwards")?;
        tx.commit().await.context("committing a forward claim")?;
        due.iter()
            .map(|r| {
                Ok(ClaimedForward {
                    id: r.get("id"),
                    lease_token: token,
                    attempts: r.get::<i64, _>("attempts") as u32 + 1,
                    previous_delay_ms: r.get::<i64, _>("previous_delay_ms") as u64,
                    event: event_from_row(r)?,
                })
            })
            .collect()
    }

    pub(super) async fn complete_claimed_forwards(
        &self,
        completions: Vec<ForwardCompletion>,
        now_ms: i64,
    ) -> Result<Vec<Recorded>, StoreError> {
        let mut tx = self.begin().await?;
        let steps: Vec<(i64, EventStep)> =
            completions.iter().filter_map(|c| c.step.clone().map(|step| (c.event_seq, step))).collect();
        insert_steps(&mut tx, &steps).await?;
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
        let recorded: Vec<Recorded> = completions
            .iter()
            .map(|c| {
                if tokens.get(&c.id) == Some(&c.lease_token) {
                    Recorded::Applied
                } else {
                    Recorded::LeaseLost
                }
            })
            .collect();
        let rows: Vec<Value> = completions
            .iter()
            .zip(&recorded)
            .filter(|(_, r)| **r == Recorded::Applied)
            .map(|(c, _)| {
                let (state, available_at, delay, error, dead_at, given_back) = match &c.transition {
                    ForwardTransition::Delivered => ("done", None, None, None, None, 0),
                    ForwardTransition::Retry { available_at_ms, delay_ms, error } => {
                        ("pending", Some(*available_at_ms), Some(*delay_ms), Some(error), None, 0)
                    }
                    ForwardTransition::Defer { available_at_ms, reason } => {
                        ("pending", Some(*available_at_ms), None, Some(reason), None, 1)
                    }
                    ForwardTransition::DeadLetter { error } => {
                        ("dead", None, None, Some(error), Some(now_ms), 0)
                    }
                };
                json!([c.id, state, available_at, delay, error, dead_at, given_back])
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

/// One operation as the events of a batch find and leave it.
struct LedgerRow {
    id: i64,
    status: OperationStatus,
    version: Option<i64>,
    changed: bool,
    settled: bool,
    conflict: bool,
    provider_ref: Option<String>,
    dead: bool,
}

/// Applies the new events' reports, in arrival order, to the operations
/// they name (read once, under the write lock), writes the operations that
/// changed and closes the outbox messages of those an event settled, and
/// adds a ledger step per report to `steps`.
async fn apply_reports(
    conn: &mut SqliteConnection,
    reports: &[(i64, &EventReport)],
    steps: &mut Vec<(i64, EventStep)>,
    now_ms: i64,
) -> Result<(), StoreError> {
    if reports.is_empty() {
        return Ok(());
    }
    let keys: Vec<Value> = reports.iter().map(|(_, r)| json!([r.provider, r.reference])).collect();
    let rows = sqlx::query(
        "SELECT o.id, o.provider, o.reference, o.status, o.event_version, \
         EXISTS (SELECT 1 FROM outbox x WHERE x.operation_id = o.id AND x.state = 'dead') AS dead \
         FROM json_each(?1) k JOIN operations o ON o.provider = k.value ->> 0 AND o.reference = k.value ->> 1",
    )
    .bind(Value::Array(keys).to_string())
    .fetch_all(&mut *conn)
    .await
    .context("finding the events' operations")?;
    let mut ledger: HashMap<(String, String), LedgerRow> = HashMap::with_capacity(rows.len());
    for r in &rows {
        let status: String = r.get("status");
        let status =
            OperationStatus::parse(&status).ok_or(StoreError::Corrupt { what: "status", detail: status })?;
        let row = LedgerRow {
            id: r.get("id"),
            status,
            version: r.get("event_version"),
            changed: false,
            settled: false,
            conflict: false,
            provider_ref: None,
            dead: r.get("dead"),
        };
        ledger.insert((r.get("provider"), r.get("reference")), row);
    }
    for (seq, report) in reports {
        let Some(row) = ledger.get_mut(&(report.provider.clone(), report.reference.clone())) else {
            let detail = format!("no {:?} operation has reference {:?}", report.provider, report.reference);
            let step = EventStep::new("ledger", now_ms, detail);
            steps.push((*seq, EventStep { effect: Some(LedgerEffect::NoOperation), ..step }));
            continue;
        };
        // A dead letter's `failed` is failwell giving up, not the provider's
        // answer: the operation is as open as an unknown one.
        let before = match row.status {
            OperationStatus::Succeeded => Some(Outcome::Succeeded),
            OperationStatus::Failed if !row.dead => Some(Outcome::Failed),
            OperationStatus::Failed
            | OperationStatus::Pending
            | OperationStatus::Unknown
            | OperationStatus::NeedsHuman => None,
        };
        let effect =
            apply_event(Ledger { settled: before, version: row.version }, report.reported, report.version);
        let detail = format!(
            "{} (version {}, operation was {})",
            effect.describe(),
            report.version,
            row.status.as_str()
        );
        let recorded = match effect {
            EventEffect::Settle(outcome) => {
                (row.status, row.version, row.changed, row.settled) =
                    (OperationStatus::from(outcome), Some(report.version), true, true);
                row.provider_ref = report.provider_ref.clone().or(row.provider_ref.take());
                match before {
                    None => LedgerEffect::Resolved,
                    Some(b) if b == outcome => LedgerEffect::Confirmed,
                    Some(_) => LedgerEffect::Changed,
                }
            }
            EventEffect::Note => {
                (row.version, row.changed) = (Some(report.version), true);
                LedgerEffect::Noted
            }
            EventEffect::Stale => LedgerEffect::Stale,
            EventEffect::WouldRegress => LedgerEffect::WouldRegress,
            // Two statements of the provider that nothing orders: back to
            // unknown, and a status lookup decides.
            EventEffect::Conflict => {
                (row.status, row.changed, row.conflict) = (OperationStatus::Unknown, true, true);
                row.version = Some(report.version);
                LedgerEffect::Conflict
            }
        };
        let step = EventStep::new("ledger", now_ms, detail);
        steps.push((*seq, EventStep { operation_id: Some(row.id), effect: Some(recorded), ..step }));
    }
    let changed: Vec<Value> = ledger
        .values()
        .filter(|row| row.changed)
        .map(|row| {
            json!([row.id, row.status.as_str(), row.version, row.settled, row.provider_ref, row.conflict])
        })
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
         last_error = CASE WHEN u.value ->> 3 THEN NULL \
           WHEN u.value ->> 5 THEN 'conflict: an event contradicts the provider''s answer to our call; looking it up' \
           ELSE last_error END, \
         next_reconcile_at_ms = CASE WHEN u.value ->> 3 THEN NULL WHEN u.value ->> 5 THEN ?2 \
           ELSE next_reconcile_at_ms END, \
         reconcile_attempts = CASE WHEN u.value ->> 5 THEN 0 ELSE reconcile_attempts END, \
         updated_at_ms = CASE WHEN u.value ->> 3 OR u.value ->> 5 THEN ?2 ELSE updated_at_ms END, \
         changed_by = 'webhook' \
         FROM json_each(?1) u WHERE operations.id = u.value ->> 0",
    )
    .bind(Value::Array(changed.clone()).to_string())
    .bind(now_ms)
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
        .map(|(seq, s)| {
            json!([
                seq,
                s.kind,
                s.at_ms,
                s.duration_ms,
                s.status_code,
                s.operation_id,
                s.effect.map(|e| e.as_str()),
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

fn event_from_row(r: &SqliteRow) -> Result<StoredEvent, StoreError> {
    let headers: String = r.get("headers");
    Ok(StoredEvent {
        seq: r.get("seq"),
        integration: r.get("integration"),
        event_id: r.get("event_id"),
        payload: r.get("payload"),
        headers: serde_json::from_str(&headers).map_err(|e| StoreError::Corrupt {
            what: "inbox event",
            detail: format!("headers are not JSON: {e}"),
        })?,
        received_at_ms: r.get("received_at_ms"),
    })
}

fn step_from_row(r: &SqliteRow) -> Result<EventStep, StoreError> {
    let effect: Option<String> = r.get("effect");
    let effect = effect
        .map(|e| LedgerEffect::parse(&e).ok_or(StoreError::Corrupt { what: "ledger effect", detail: e }))
        .transpose()?;
    Ok(EventStep {
        kind: r.get("kind"),
        at_ms: r.get("at_ms"),
        duration_ms: r.get::<Option<i64>, _>("duration_ms").map(|d| d as u64),
        status_code: r.get::<Option<i64>, _>("status_code").map(|s| s as u16),
        operation_id: r.get("operation_id"),
        effect,
        detail: r.get("detail"),
    })
}
