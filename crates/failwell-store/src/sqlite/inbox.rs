//! The webhook inbox on SQLite: storing events once, applying them to the
//! operations ledger in the same transaction, and the forwarding queue.

use std::sync::atomic::Ordering;

use failwell_policy::{EventEffect, Ledger, Outcome, apply_event};
use sqlx::Row;
use sqlx::sqlite::{SqliteConnection, SqliteRow};

use super::SqliteStore;
use crate::error::{Context, StoreError};
use crate::model::{
    ClaimedForward, EventRecord, EventReport, EventStep, ForwardCompletion, ForwardTransition, LedgerEffect,
    NewEvent, OperationStatus, Received, StoredEvent,
};

impl SqliteStore {
    pub(super) async fn receive_events(
        &self,
        events: Vec<NewEvent>,
        now_ms: i64,
    ) -> Result<Vec<Received>, StoreError> {
        let mut tx = self.begin().await?;
        let mut received = Vec::with_capacity(events.len());
        for event in &events {
            let seq: Option<i64> = sqlx::query_scalar(
                "INSERT INTO inbox_events (integration, event_id, payload, headers, received_at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (integration, event_id) DO NOTHING RETURNING seq",
            )
            .bind(&event.integration)
            .bind(&event.event_id)
            .bind(&event.payload)
            .bind(event.headers.to_string())
            .bind(now_ms)
            .fetch_optional(&mut *tx)
            .await
            .context("storing a webhook event")?;
            let Some(seq) = seq else {
                received.push(Received::Duplicate);
                continue;
            };
            match &event.report {
                None => {}
                Some(Ok(report)) => apply_report(&mut tx, seq, report, now_ms).await?,
                Some(Err(why)) => {
                    let step = EventStep {
                        effect: Some(LedgerEffect::NotApplicable),
                        ..EventStep::new("ledger", now_ms, why.clone())
                    };
                    insert_step(&mut tx, seq, &step).await?;
                }
            }
            if event.forward {
                sqlx::query(
                    "INSERT INTO forwards (event_seq, available_at_ms, created_at_ms, updated_at_ms) \
                     VALUES (?1, ?2, ?2, ?2)",
                )
                .bind(seq)
                .bind(now_ms)
                .execute(&mut *tx)
                .await
                .context("queueing an event for forwarding")?;
            }
            received.push(Received::New);
        }
        tx.commit().await.context("committing webhook events")?;
        Ok(received)
    }

    pub(super) async fn stored_events_after(
        &self,
        after: i64,
        limit: u32,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let rows = sqlx::query(
            "SELECT seq, integration, event_id, payload, headers, received_at_ms FROM inbox_events \
             WHERE seq > ?1 ORDER BY seq LIMIT ?2",
        )
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.reader)
        .await
        .context("reading the event feed")?;
        rows.iter().map(event_from_row).collect()
    }

    pub(super) async fn event_record(
        &self,
        integration: &str,
        event_id: &str,
    ) -> Result<Option<EventRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT e.seq, e.integration, e.event_id, e.payload, e.headers, e.received_at_ms, \
             f.state AS forward_state, COALESCE(f.attempts, 0) AS forward_attempts \
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
            "SELECT f.id, f.attempts, f.previous_delay_ms, e.seq, e.integration, e.event_id, e.payload, \
             e.headers, e.received_at_ms FROM forwards f JOIN inbox_events e ON e.seq = f.event_seq \
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
    ) -> Result<Vec<bool>, StoreError> {
        let mut tx = self.begin().await?;
        let mut applied = Vec::with_capacity(completions.len());
        for c in &completions {
            if let Some(step) = &c.step {
                insert_step(&mut tx, c.event_seq, step).await?;
            }
            let (state, available_at, delay, error, dead_at, given_back) = match &c.transition {
                ForwardTransition::Delivered => ("done", None, None, None, None, 0),
                ForwardTransition::Retry { available_at_ms, delay_ms, error } => {
                    ("pending", Some(*available_at_ms), Some(*delay_ms as i64), Some(error), None, 0)
                }
                ForwardTransition::Defer { available_at_ms, reason } => {
                    ("pending", Some(*available_at_ms), None, Some(reason), None, 1)
                }
                ForwardTransition::DeadLetter { error } => ("dead", None, None, Some(error), Some(now_ms), 0),
            };
            let moved = sqlx::query(
                "UPDATE forwards SET state = ?3, available_at_ms = COALESCE(?4, available_at_ms), \
                 previous_delay_ms = COALESCE(?5, previous_delay_ms), last_error = ?6, dead_at_ms = ?7, \
                 locked_until_ms = NULL, lease_token = NULL, attempts = attempts - ?8, updated_at_ms = ?9 \
                 WHERE id = ?1 AND lease_token = ?2 AND state = 'pending'",
            )
            .bind(c.id)
            .bind(c.lease_token)
            .bind(state)
            .bind(available_at)
            .bind(delay)
            .bind(error)
            .bind(dead_at)
            .bind(given_back)
            .bind(now_ms)
            .execute(&mut *tx)
            .await
            .context("completing a forward")?;
            applied.push(moved.rows_affected() == 1);
        }
        tx.commit().await.context("committing forward results")?;
        Ok(applied)
    }
}

/// Applies one event's report to the operation it names, under the write
/// lock of the transaction (SQLite has one writer), and records what it did.
async fn apply_report(
    conn: &mut SqliteConnection,
    seq: i64,
    report: &EventReport,
    now_ms: i64,
) -> Result<(), StoreError> {
    let row = sqlx::query(
        "SELECT id, status, event_version FROM operations WHERE provider = ?1 AND reference = ?2",
    )
    .bind(&report.provider)
    .bind(&report.reference)
    .fetch_optional(&mut *conn)
    .await
    .context("finding an event's operation")?;
    let Some(row) = row else {
        let detail = format!("no {:?} operation has reference {:?}", report.provider, report.reference);
        let step =
            EventStep { effect: Some(LedgerEffect::NoOperation), ..EventStep::new("ledger", now_ms, detail) };
        return insert_step(conn, seq, &step).await;
    };
    let id: i64 = row.get("id");
    let status: String = row.get("status");
    let status =
        OperationStatus::parse(&status).ok_or(StoreError::Corrupt { what: "status", detail: status })?;
    let settled = match status {
        OperationStatus::Succeeded => Some(Outcome::Succeeded),
        OperationStatus::Failed => Some(Outcome::Failed),
        OperationStatus::Pending | OperationStatus::Unknown => None,
    };
    let ledger = Ledger { settled, version: row.get("event_version") };
    let effect = apply_event(ledger, report.reported, report.version);
    let recorded = match effect {
        EventEffect::Settle(outcome) => {
            sqlx::query(
                "UPDATE operations SET status = ?2, event_version = ?3, last_error = NULL, \
                 next_reconcile_at_ms = NULL, updated_at_ms = ?4 WHERE id = ?1",
            )
            .bind(id)
            .bind(OperationStatus::from(outcome).as_str())
            .bind(report.version)
            .bind(now_ms)
            .execute(&mut *conn)
            .await
            .context("settling an operation by event")?;
            // Nothing more to deliver; an attempt in flight loses its lease,
            // so its late result cannot overwrite what the provider said.
            sqlx::query(
                "UPDATE outbox SET state = 'done', in_flight = 0, locked_until_ms = NULL, lease_token = NULL, \
                 updated_at_ms = ?2 WHERE operation_id = ?1 AND state <> 'done'",
            )
            .bind(id)
            .bind(now_ms)
            .execute(&mut *conn)
            .await
            .context("closing a settled operation's message")?;
            match settled {
                None => LedgerEffect::Resolved,
                Some(before) if before == outcome => LedgerEffect::Confirmed,
                Some(_) => LedgerEffect::Changed,
            }
        }
        EventEffect::Note => {
            sqlx::query("UPDATE operations SET event_version = ?2 WHERE id = ?1")
                .bind(id)
                .bind(report.version)
                .execute(&mut *conn)
                .await
                .context("noting an event's version")?;
            LedgerEffect::Noted
        }
        EventEffect::Stale => LedgerEffect::Stale,
        EventEffect::WouldRegress => LedgerEffect::WouldRegress,
    };
    let detail =
        format!("{} (version {}, operation was {})", effect.describe(), report.version, status.as_str());
    let step = EventStep {
        operation_id: Some(id),
        effect: Some(recorded),
        ..EventStep::new("ledger", now_ms, detail)
    };
    insert_step(conn, seq, &step).await
}

async fn insert_step(conn: &mut SqliteConnection, seq: i64, step: &EventStep) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO inbox_steps (event_seq, kind, at_ms, duration_ms, status_code, operation_id, effect, detail) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )
    .bind(seq)
    .bind(&step.kind)
    .bind(step.at_ms)
    .bind(step.duration_ms.map(|d| d as i64))
    .bind(step.status_code.map(i64::from))
    .bind(step.operation_id)
    .bind(step.effect.map(|e| e.as_str()))
    .bind(&step.detail)
    .execute(conn)
    .await
    .context("appending to an event's history")?;
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
