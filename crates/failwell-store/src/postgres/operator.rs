//! What operators read and do on PostgreSQL: dead letters (list, replay,
//! purge, acknowledge), an operation's history, the four numbers per
//! integration, and the comparison reports.
//!
//! Other failwell processes (relays, reconcilers, other operators) write
//! the same rows at the same time. A write that depends on a row's state
//! either carries the condition in its own `WHERE` (an `UPDATE` locks the
//! row and re-checks the condition once a concurrent writer commits, so of
//! two racing operators exactly one finds the row still dead), or reads the
//! state `FOR UPDATE` first. Locks are taken in the order every writer
//! uses: the outbox message (or forward) before its operation, so an
//! operator never deadlocks with the relay or the reconciler.

use crate::error::{Context, StoreError};
use crate::model::Operation;
use crate::operator::{
    Channel, DeadLetter, DeadLetterFilter, DeadLetterKind, DiscrepancyColumns, HistoryEntry,
    ManualResolution, NewReport, Report, Reports, Stats, StatsBuilder, alert_columns, dead_letter_from_row,
    history_entry_from_row, report_from_row, resolution_note, resolution_refused, resolved_status, table,
};
use crate::rows::{operation_from_row, select_operation};

use super::PostgresStore;

/// Dead letters of both kinds as one relation: `kind, id, integration, key,
/// operation, attempts, last_error, dead_at_ms, created_at_ms, payload,
/// json_payload` (see [`dead_letter_from_row`]). A UNION needs one type per
/// column: the operation's request (`text`) is converted to `bytea` like
/// the event bodies.
const DEAD_LETTERS: &str = "SELECT * FROM (\
    SELECT 'message'::text AS kind, x.id, o.provider AS integration, o.idempotency_key AS key, o.operation, \
      x.attempts, x.last_error, x.dead_at_ms, x.created_at_ms, convert_to(o.payload, 'UTF8') AS payload, \
      TRUE AS json_payload \
    FROM outbox x JOIN operations o ON o.id = x.operation_id WHERE x.state = 'dead' \
    UNION ALL \
    SELECT 'forward', f.id, e.integration, e.event_id, NULL, f.attempts, f.last_error, f.dead_at_ms, \
      f.created_at_ms, e.payload, FALSE \
    FROM forwards f JOIN inbox_events e ON e.seq = f.event_seq WHERE f.state = 'dead') AS d";

impl PostgresStore {
    pub(super) async fn list_dead_letters(
        &self,
        filter: DeadLetterFilter,
        limit: u32,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        // `NULLS LAST`: SQLite's order, where NULL sorts below every value.
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{DEAD_LETTERS} WHERE ($1::text IS NULL OR kind = $1) AND ($2::text IS NULL OR integration = $2) \
             AND ($3::bigint IS NULL OR dead_at_ms > $3) ORDER BY dead_at_ms DESC NULLS LAST, id DESC LIMIT $4"
        )))
        .bind(filter.kind.map(DeadLetterKind::as_str))
        .bind(filter.integration)
        .bind(filter.since_ms)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .context("listing dead letters")?;
        rows.iter().map(dead_letter_from_row).collect()
    }

    pub(super) async fn one_dead_letter(
        &self,
        kind: DeadLetterKind,
        id: i64,
    ) -> Result<Option<DeadLetter>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!("{DEAD_LETTERS} WHERE kind = $1 AND id = $2")))
            .bind(kind.as_str())
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .context("reading a dead letter")?;
        row.as_ref().map(dead_letter_from_row).transpose()
    }

    /// Puts a dead letter back in its queue. The `UPDATE … WHERE state =
    /// 'dead'` locks the message (or forward) and decides alone: a
    /// concurrent replay or purge of it waits for this one to commit, then
    /// finds it no longer dead and changes nothing. The operation is locked
    /// second, in the relay's order.
    pub(super) async fn replay_dead_letter(
        &self,
        kind: DeadLetterKind,
        id: i64,
        channel: Channel,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let table = table(kind);
        let moved: Option<Option<i64>> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "UPDATE {table} SET state = 'pending', attempts = 0, previous_delay_ms = 0, available_at_ms = $2, \
             locked_until_ms = NULL, lease_token = NULL, dead_at_ms = NULL, changed_by = $3, updated_at_ms = $2, \
             last_error = 'replayed by ' || $3 WHERE id = $1 AND state = 'dead' RETURNING {}",
            match kind {
                DeadLetterKind::Message => "operation_id",
                DeadLetterKind::Forward => "NULL::bigint",
            }
        )))
        .bind(id)
        .bind(now_ms)
        .bind(channel.actor())
        .fetch_optional(&mut *tx)
        .await
        .context("replaying a dead letter")?;
        let Some(operation_id) = moved else { return Ok(false) };
        if let Some(operation_id) = operation_id {
            // The operation is delivered again from now on: its deadline and
            // attempts count from the replay.
            sqlx::query(
                "UPDATE operations SET status = 'pending', replayed_at_ms = $2, next_reconcile_at_ms = NULL, \
                 changed_by = $3, updated_at_ms = $2, last_error = 'replayed by ' || $3 WHERE id = $1",
            )
            .bind(operation_id)
            .bind(now_ms)
            .bind(channel.actor())
            .execute(&mut *tx)
            .await
            .context("reopening a replayed operation")?;
        }
        tx.commit().await.context("committing a replay")?;
        Ok(true)
    }

    /// Deletes a dead letter. As with a replay, the first `UPDATE … WHERE
    /// state = 'dead'` locks the row and decides: a concurrent replay or
    /// purge waits, then finds it gone or no longer dead.
    pub(super) async fn purge_dead_letter(
        &self,
        kind: DeadLetterKind,
        id: i64,
        channel: Channel,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let table = table(kind);
        let mut tx = self.begin().await?;
        // Who purged and when go into the row first, so the delete trigger
        // writes them into the history.
        let marked = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE {table} SET changed_by = $2, updated_at_ms = $3, last_error = 'purged by ' || $2 \
             WHERE id = $1 AND state = 'dead'"
        )))
        .bind(id)
        .bind(channel.actor())
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .context("purging a dead letter")?;
        if marked.rows_affected() == 0 {
            return Ok(false);
        }
        sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM {table} WHERE id = $1")))
            .bind(id)
            .execute(&mut *tx)
            .await
            .context("purging a dead letter")?;
        tx.commit().await.context("committing a purge")?;
        Ok(true)
    }

    /// Settles an open operation for an operator. Its message is locked
    /// first, then the operation, whose status is read under that lock: of
    /// two racing resolutions (or a resolution and a reconciliation, which
    /// locks in the same order) the second sees the first one's result.
    pub(super) async fn resolve_by_operator(
        &self,
        idempotency_key: &str,
        outcome: failwell_policy::Outcome,
        provider_ref: Option<String>,
        note: String,
        channel: Channel,
        now_ms: i64,
    ) -> Result<ManualResolution, StoreError> {
        let status = resolved_status(outcome)?;
        let mut tx = self.begin().await?;
        // An operation's id never changes, so finding its message without a
        // lock on the operation is safe; the message may be missing (purged).
        sqlx::query(
            "SELECT id FROM outbox WHERE operation_id = \
             (SELECT id FROM operations WHERE idempotency_key = $1) FOR UPDATE",
        )
        .bind(idempotency_key)
        .fetch_optional(&mut *tx)
        .await
        .context("locking an outbox message")?;
        let current: Option<(i64, String)> =
            sqlx::query_as("SELECT id, status FROM operations WHERE idempotency_key = $1 FOR UPDATE")
                .bind(idempotency_key)
                .fetch_optional(&mut *tx)
                .await
                .context("reading an operation")?;
        let operation_id = current.as_ref().map(|(id, _)| *id);
        if let Some(refused) = resolution_refused(current.map(|(_, status)| status))? {
            return Ok(refused);
        }
        let error = resolution_note(channel, &note);
        sqlx::query(
            "UPDATE operations SET status = $2, provider_ref = COALESCE($3, provider_ref), last_error = $4, \
             next_reconcile_at_ms = NULL, changed_by = $5, updated_at_ms = $6 WHERE id = $1",
        )
        .bind(operation_id)
        .bind(status)
        .bind(provider_ref)
        .bind(&error)
        .bind(channel.actor())
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .context("resolving an operation")?;
        // A message still waiting is closed: nothing is sent for it again.
        sqlx::query(
            "UPDATE outbox SET state = 'done', in_flight = 0, locked_until_ms = NULL, lease_token = NULL, \
             last_error = $2, changed_by = $3, updated_at_ms = $4 WHERE state = 'pending' AND operation_id = $1",
        )
        .bind(operation_id)
        .bind(&error)
        .bind(channel.actor())
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .context("closing a resolved operation's message")?;
        tx.commit().await.context("committing a resolution")?;
        Ok(ManualResolution::Resolved)
    }

    pub(super) async fn acknowledge(&self, channel: Channel, now_ms: i64) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO dead_letter_acks (at_ms, actor) VALUES ($1, $2)")
            .bind(now_ms)
            .bind(channel.actor())
            .execute(&self.pool)
            .await
            .context("acknowledging dead letters")?;
        Ok(())
    }

    /// The four numbers, read in one read-only snapshot so they agree with
    /// each other however many processes write meanwhile.
    pub(super) async fn integration_stats(
        &self,
        now_ms: i64,
        window_ms: u64,
        known: &[String],
    ) -> Result<Stats, StoreError> {
        let mut tx = self
            .pool
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await
            .context("reading the numbers")?;
        let last_ack_ms: Option<i64> = sqlx::query_scalar("SELECT MAX(at_ms) FROM dead_letter_acks")
            .fetch_one(&mut *tx)
            .await
            .context("reading the last acknowledgement")?;
        let mut stats = StatsBuilder::new(known);
        // One row per (provider, duration): a few thousand rows however
        // many calls the window holds.
        let calls = sqlx::query(
            "SELECT o.provider AS name, a.duration_ms, COUNT(*) AS calls, \
             COUNT(*) FILTER (WHERE a.outcome = 'succeeded' OR a.classification = 'permanent') AS answered \
             FROM attempts a JOIN operations o ON o.id = a.operation_id \
             WHERE a.kind = 'call' AND a.started_at_ms >= $1 AND a.started_at_ms <= $2 \
             GROUP BY o.provider, a.duration_ms",
        )
        .bind(StatsBuilder::window_start(now_ms, window_ms))
        .bind(now_ms)
        .fetch_all(&mut *tx)
        .await
        .context("reading recent calls")?;
        stats.add_calls(&calls)?;
        let entries = sqlx::query(
            "SELECT o.provider AS name, COUNT(*) AS depth, MIN(x.created_at_ms) AS oldest, \
               0::bigint AS dead, 0::bigint AS unacked \
             FROM outbox x JOIN operations o ON o.id = x.operation_id WHERE x.state = 'pending' GROUP BY o.provider \
             UNION ALL \
             SELECT e.integration, COUNT(*), MIN(f.created_at_ms), 0, 0 \
             FROM forwards f JOIN inbox_events e ON e.seq = f.event_seq WHERE f.state = 'pending' GROUP BY e.integration \
             UNION ALL \
             SELECT o.provider, 0, NULL, COUNT(*), COUNT(*) FILTER (WHERE x.dead_at_ms > $1) \
             FROM outbox x JOIN operations o ON o.id = x.operation_id WHERE x.state = 'dead' GROUP BY o.provider \
             UNION ALL \
             SELECT e.integration, 0, NULL, COUNT(*), COUNT(*) FILTER (WHERE f.dead_at_ms > $1) \
             FROM forwards f JOIN inbox_events e ON e.seq = f.event_seq WHERE f.state = 'dead' GROUP BY e.integration",
        )
        .bind(last_ack_ms.unwrap_or(i64::MIN))
        .fetch_all(&mut *tx)
        .await
        .context("reading open and dead entries")?;
        stats.add_entries(&entries, now_ms)?;
        let unsettled = sqlx::query(
            "SELECT provider AS name, status, COUNT(*) AS n FROM operations \
             WHERE status IN ('unknown', 'needs_human') GROUP BY provider, status",
        )
        .fetch_all(&mut *tx)
        .await
        .context("counting unknown operations")?;
        stats.add_unsettled(&unsettled)?;
        tx.commit().await.context("reading the numbers")?;
        Ok(stats.finish(now_ms, window_ms, last_ack_ms))
    }

    pub(super) async fn operation_history(&self, operation_id: i64) -> Result<Vec<HistoryEntry>, StoreError> {
        let rows = sqlx::query(
            "SELECT at_ms, subject, actor, change, detail, 0 AS source, id FROM history WHERE operation_id = $1 \
             UNION ALL \
             SELECT started_at_ms, 'attempt', CASE kind WHEN 'lookup' THEN 'reconciler' ELSE 'relay' END, \
               kind || CASE WHEN kind = 'call' THEN ' ' || attempt_no ELSE '' END || ': ' || \
               COALESCE('HTTP ' || status_code, error_kind, 'no answer') || \
               COALESCE(' (' || classification || ')', '') || ', ' || outcome || ', ' || duration_ms || ' ms', \
               decision, 1, id \
             FROM attempts WHERE operation_id = $1 \
             UNION ALL \
             SELECT s.at_ms, 'event', 'webhook', 'event ' || e.event_id || ': ' || s.effect, s.detail, 2, s.id \
             FROM inbox_steps s JOIN inbox_events e ON e.seq = s.event_seq \
             WHERE s.operation_id = $1 AND s.kind = 'ledger' \
             UNION ALL \
             SELECT r.finished_at_ms, 'report', 'comparison', 'discrepancy ' || d.kind || ' (report ' || r.id || ')', \
               d.detail, 3, d.id \
             FROM discrepancies d JOIN reconciliation_reports r ON r.id = d.report_id WHERE d.operation_id = $1 \
             ORDER BY 1, 6, 7",
        )
        .bind(operation_id)
        .fetch_all(&self.pool)
        .await
        .context("reading an operation's history")?;
        rows.iter().map(history_entry_from_row).collect()
    }

    pub(super) async fn operations_created_between(
        &self,
        provider: &str,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<Operation>, StoreError> {
        let rows = sqlx::query(select_operation!(
            "WHERE o.provider = $1 AND o.created_at_ms >= $2 AND o.created_at_ms < $3 ORDER BY o.id"
        ))
        .bind(provider)
        .bind(from_ms)
        .bind(to_ms)
        .fetch_all(&self.pool)
        .await
        .context("reading operations of a window")?;
        rows.iter().map(operation_from_row).collect()
    }

    pub(super) async fn operations_with_references(
        &self,
        provider: &str,
        references: &[String],
    ) -> Result<Vec<Operation>, StoreError> {
        let rows =
            sqlx::query(select_operation!("WHERE o.provider = $1 AND o.reference = ANY($2) ORDER BY o.id"))
                .bind(provider)
                .bind(references)
                .fetch_all(&self.pool)
                .await
                .context("reading operations by reference")?;
        rows.iter().map(operation_from_row).collect()
    }

    /// Stores a report and its discrepancies in one transaction: the
    /// discrepancies in one statement, whatever their number, from one
    /// array per column.
    pub(super) async fn insert_report(&self, report: NewReport) -> Result<i64, StoreError> {
        let mut tx = self.begin().await?;
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO reconciliation_reports (provider, window_from_ms, window_to_ms, started_at_ms, \
             finished_at_ms, actor, ours, theirs, discrepancies, report, text) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id",
        )
        .bind(&report.provider)
        .bind(report.window_from_ms)
        .bind(report.window_to_ms)
        .bind(report.started_at_ms)
        .bind(report.finished_at_ms)
        .bind(&report.actor)
        .bind(report.ours as i64)
        .bind(report.theirs as i64)
        .bind(report.discrepancies.len() as i64)
        .bind(report.report.to_string())
        .bind(&report.text)
        .fetch_one(&mut *tx)
        .await
        .context("storing a comparison report")?;
        let d = DiscrepancyColumns::of(&report.discrepancies);
        sqlx::query(
            "INSERT INTO discrepancies (report_id, provider, kind, reference, operation_id, provider_ref, detail) \
             SELECT $1, $2, d.kind, d.reference, d.operation_id, d.provider_ref, d.detail \
             FROM unnest($3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[]) \
               AS d (kind, reference, operation_id, provider_ref, detail)",
        )
        .bind(id)
        .bind(&report.provider)
        .bind(&d.kind)
        .bind(&d.reference)
        .bind(&d.operation_id)
        .bind(&d.provider_ref)
        .bind(&d.detail)
        .execute(&mut *tx)
        .await
        .context("storing discrepancies")?;
        tx.commit().await.context("committing a comparison report")?;
        Ok(id)
    }

    pub(super) async fn list_reports(&self, which: Reports) -> Result<Vec<Report>, StoreError> {
        let (sql, value) = which.query();
        let query = sqlx::query(sqlx::AssertSqlSafe(sql));
        let query = match value {
            Some(value) => query.bind(value),
            None => query,
        };
        let rows = query.fetch_all(&self.pool).await.context("reading comparison reports")?;
        rows.iter().map(report_from_row).collect()
    }

    pub(super) async fn set_report_alerted(
        &self,
        id: i64,
        result: Result<i64, String>,
    ) -> Result<(), StoreError> {
        let (at, error) = alert_columns(result);
        sqlx::query(
            "UPDATE reconciliation_reports SET alerted_at_ms = COALESCE($2, alerted_at_ms), alert_error = $3 \
             WHERE id = $1",
        )
        .bind(id)
        .bind(at)
        .bind(error)
        .execute(&self.pool)
        .await
        .context("recording a report's alert")?;
        Ok(())
    }
}
