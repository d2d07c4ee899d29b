//! The operator role's statements ([`operator_statements!`]).

/// Implements [`OperatorStore`](crate::OperatorStore) for `store`, in the
/// invoking module, with the same SQL on every database (`$N` parameters,
/// run by the backend's `sql` module). The store provides `pool()`
/// (single writes), `read_pool()` and `begin()` (write transactions). What
/// differs is passed in:
/// - `lock`: the row-lock clause (`[" FOR UPDATE"]`) of the reads that
///   decide a write, or none (`[]`: SQLite, whose single writer, `BEGIN
///   IMMEDIATE`, already excludes every other); a statement that only
///   locks is left out without one;
/// - `snapshot`: the statement that begins the read-only transaction the
///   four numbers are read in;
/// - `message_payload`: an operation's request (text) as the type of the
///   event bodies it shares a dead-letter column with;
/// - `unsettled`: the condition of an operation that is `unknown` or
///   `needs_human`, as the backend's index of them answers it.
macro_rules! operator_statements {
    (
        store = $store:ty,
        lock = [$($lock:literal)?],
        snapshot = $snapshot:literal,
        message_payload = $message_payload:literal,
        unsettled = $unsettled:literal $(,)?
    ) => {
        use crate::error::Context as _;
        use sqlx::Row as _;

        use super::sql;

        /// Dead letters of both kinds as one relation: `kind, id, integration,
        /// key, operation, attempts, last_error, dead_at_ms, created_at_ms,
        /// payload, json_payload` (see [`crate::operator::rows::dead_letter_from_row`]).
        /// A UNION needs one type per column: the operation's request is
        /// converted to the event bodies' type (`message_payload`).
        const DEAD_LETTERS: &str = concat!(
            "SELECT * FROM (\
             SELECT CAST('message' AS text) AS kind, x.id, o.provider AS integration, \
               o.idempotency_key AS \"key\", o.operation, x.attempts, x.last_error, x.dead_at_ms, \
               x.created_at_ms, ",
            $message_payload,
            " AS payload, TRUE AS json_payload \
             FROM outbox x LEFT JOIN operations o ON o.id = x.operation_id WHERE x.state = 'dead' \
             UNION ALL \
             SELECT 'forward', f.id, e.integration, e.event_id, NULL, f.attempts, f.last_error, \
               f.dead_at_ms, f.created_at_ms, e.payload, FALSE \
             FROM forwards f JOIN inbox_events e ON e.seq = f.event_seq WHERE f.state = 'dead') AS d"
        );

        #[async_trait::async_trait]
        impl crate::OperatorStore for $store {
            async fn counts(&self) -> Result<crate::Counts, crate::error::StoreError> {
                let row = sql::query(
                    "SELECT o.pending, o.succeeded, o.failed, o.unknown, o.needs_human, \
                       (SELECT COUNT(*) FROM outbox WHERE state = 'dead') AS dead_letters, \
                       (SELECT COUNT(*) FROM attempts WHERE kind = 'call') AS attempts, \
                       (SELECT COUNT(*) FROM inbox_events) AS inbox_events, \
                       (SELECT COUNT(*) FROM inbox_steps WHERE effect = 'resolved') AS resolved_by_events, \
                       (SELECT COUNT(*) FROM forwards WHERE state = 'pending') AS forwards_pending, \
                       (SELECT COUNT(*) FROM forwards WHERE state = 'dead') AS forward_dead_letters \
                     FROM (SELECT COUNT(*) FILTER (WHERE status = 'pending') AS pending, \
                       COUNT(*) FILTER (WHERE status = 'succeeded') AS succeeded, \
                       COUNT(*) FILTER (WHERE status = 'failed') AS failed, \
                       COUNT(*) FILTER (WHERE status = 'unknown') AS unknown, \
                       COUNT(*) FILTER (WHERE status = 'needs_human') AS needs_human FROM operations) o",
                )
                .fetch_one(self.read_pool())
                .await
                .context("counting operations")?;
                let n = |c: &str| row.get::<i64, _>(c) as u64;
                Ok(crate::Counts {
                    pending: n("pending"),
                    succeeded: n("succeeded"),
                    failed: n("failed"),
                    unknown: n("unknown"),
                    needs_human: n("needs_human"),
                    dead_letters: n("dead_letters"),
                    attempts: n("attempts"),
                    inbox_events: n("inbox_events"),
                    resolved_by_events: n("resolved_by_events"),
                    forwards_pending: n("forwards_pending"),
                    forward_dead_letters: n("forward_dead_letters"),
                })
            }

            async fn dead_letters(
                &self,
                filter: crate::operator::DeadLetterFilter,
                limit: u32,
            ) -> Result<Vec<crate::operator::DeadLetter>, crate::error::StoreError> {
                // `NULLS LAST`: SQLite's order, where NULL sorts below every value.
                let rows = sql::query(sqlx::AssertSqlSafe(format!(
                    "{DEAD_LETTERS} WHERE (CAST($1 AS text) IS NULL OR kind = $1) \
                     AND (CAST($2 AS text) IS NULL OR integration = $2) \
                     AND (CAST($3 AS bigint) IS NULL OR dead_at_ms > $3) \
                     ORDER BY dead_at_ms DESC NULLS LAST, id DESC LIMIT $4"
                )))
                .bind(filter.kind.map(crate::operator::DeadLetterKind::as_str))
                .bind(filter.integration)
                .bind(filter.since_ms)
                .bind(i64::from(limit))
                .fetch_all(self.read_pool())
                .await
                .context("listing dead letters")?;
                rows.iter().map(crate::operator::rows::dead_letter_from_row).collect()
            }

            async fn dead_letter(
                &self,
                kind: crate::operator::DeadLetterKind,
                id: i64,
            ) -> Result<Option<crate::operator::DeadLetter>, crate::error::StoreError> {
                let row =
                    sql::query(sqlx::AssertSqlSafe(format!("{DEAD_LETTERS} WHERE kind = $1 AND id = $2")))
                        .bind(kind.as_str())
                        .bind(id)
                        .fetch_optional(self.read_pool())
                        .await
                        .context("reading a dead letter")?;
                row.as_ref().map(crate::operator::rows::dead_letter_from_row).transpose()
            }

            /// Puts a dead letter back in its queue. The `UPDATE … WHERE state =
            /// 'dead'` decides alone: on PostgreSQL it locks the message (or
            /// forward), so a concurrent replay or purge of it waits for this one
            /// to commit, then finds it no longer dead and changes nothing. The
            /// operation is changed second, in the relay's lock order.
            async fn replay(
                &self,
                kind: crate::operator::DeadLetterKind,
                id: i64,
                channel: crate::operator::Channel,
                now_ms: i64,
            ) -> Result<bool, crate::error::StoreError> {
                let mut tx = self.begin().await?;
                if kind == crate::operator::DeadLetterKind::Message {
                    // A payload set aside as never to be sent (an application's
                    // plain-SQL insert failwell refuses), or gone with its
                    // operation, stays a dead letter.
                    let payload: Option<Option<String>> = sql::query_scalar(
                        "SELECT CAST(o.payload AS text) FROM outbox x LEFT JOIN operations o ON o.id = x.operation_id \
                         WHERE x.id = $1",
                    )
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await
                    .context("reading a dead letter's payload")?;
                    match payload {
                        Some(Some(payload)) => {
                            crate::outbox::stored::sendable(&payload)?;
                        }
                        Some(None) => {
                            return Err(crate::error::StoreError::InvalidPayload {
                                reason: "is gone with the message's operation".into(),
                            });
                        }
                        None => {}
                    }
                    // A hold its failure voided is gone: sent again, the
                    // operation would take effect without it. Locked, so the
                    // sweep of holds (which locks it first) sees the replay.
                    let hold: Option<(String, String)> = sql::query_as(concat!(
                        "SELECT t.id, t.state FROM outbox x JOIN operations o ON o.id = x.operation_id \
                         JOIN ledger_transfers t ON t.id = o.hold_id WHERE x.id = $1 AND x.state = 'dead'"
                        $(, $lock)?
                    ))
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await
                    .context("reading a dead letter's hold")?;
                    if let Some((hold, state)) = hold.filter(|(_, state)| state != "pending") {
                        return Err(crate::error::StoreError::HoldEnded { hold, state });
                    }
                }
                let table = crate::operator::rows::table(kind);
                let moved = sql::query(sqlx::AssertSqlSafe(format!(
                    "UPDATE {table} SET state = 'pending', attempts = 0, previous_delay_ms = 0, \
                     available_at_ms = $2, locked_until_ms = NULL, lease_token = NULL, dead_at_ms = NULL, \
                     changed_by = $3, updated_at_ms = $2, last_error = 'replayed by ' || $3{replayed} \
                     WHERE id = $1 AND state = 'dead'",
                    // A message's replay is kept on its operation (below).
                    replayed = match kind {
                        crate::operator::DeadLetterKind::Message => "",
                        crate::operator::DeadLetterKind::Forward => ", replayed_at_ms = $2",
                    },
                )))
                .bind(id)
                .bind(now_ms)
                .bind(channel.actor())
                .execute(&mut *tx)
                .await
                .context("replaying a dead letter")?;
                if moved.rows_affected() == 0 {
                    return Ok(false);
                }
                let operation_id: Option<i64> = match kind {
                    crate::operator::DeadLetterKind::Message => {
                        sql::query_scalar("SELECT operation_id FROM outbox WHERE id = $1")
                            .bind(id)
                            .fetch_optional(&mut *tx)
                            .await
                            .context("reading a replayed message's operation")?
                    }
                    crate::operator::DeadLetterKind::Forward => None,
                };
                if let Some(operation_id) = operation_id {
                    // The operation is delivered again from now on: its deadline and
                    // attempts count from the replay.
                    sql::query(
                        "UPDATE operations SET status = 'pending', replayed_at_ms = $2, \
                         next_reconcile_at_ms = NULL, changed_by = $3, updated_at_ms = $2, \
                         last_error = 'replayed by ' || $3 WHERE id = $1",
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
            /// state = 'dead'` decides (and on PostgreSQL locks the row): a
            /// concurrent replay or purge waits, then finds it gone or no longer
            /// dead.
            async fn purge(
                &self,
                kind: crate::operator::DeadLetterKind,
                id: i64,
                channel: crate::operator::Channel,
                now_ms: i64,
            ) -> Result<bool, crate::error::StoreError> {
                let table = crate::operator::rows::table(kind);
                let mut tx = self.begin().await?;
                // Who purged and when go into the row first, so the delete trigger
                // writes them into the history.
                let marked = sql::query(sqlx::AssertSqlSafe(format!(
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
                sql::query(sqlx::AssertSqlSafe(format!("DELETE FROM {table} WHERE id = $1")))
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .context("purging a dead letter")?;
                tx.commit().await.context("committing a purge")?;
                Ok(true)
            }

            /// Settles an open operation for an operator. Where rows are locked,
            /// its message is locked first, then the operation, whose status is
            /// read under that lock: of two racing resolutions (or a resolution
            /// and a reconciliation, which locks in the same order) the second
            /// sees the first one's result.
            async fn resolve(
                &self,
                idempotency_key: &str,
                outcome: failwell_policy::Outcome,
                provider_ref: Option<String>,
                note: String,
                channel: crate::operator::Channel,
                now_ms: i64,
            ) -> Result<crate::operator::ManualResolution, crate::error::StoreError> {
                let status = crate::operator::resolved_status(outcome)?;
                let mut tx = self.begin().await?;
                $(
                    // An operation's id never changes, so finding its message without
                    // a lock on the operation is safe; the message may be missing
                    // (purged).
                    sql::query(concat!(
                        "SELECT id FROM outbox WHERE operation_id = \
                         (SELECT id FROM operations WHERE idempotency_key = $1)",
                        $lock
                    ))
                    .bind(idempotency_key)
                    .fetch_optional(&mut *tx)
                    .await
                    .context("locking an outbox message")?;
                )?
                let current: Option<(i64, String)> = sql::query_as(concat!(
                    "SELECT id, status FROM operations WHERE idempotency_key = $1",
                    $($lock)?
                ))
                .bind(idempotency_key)
                .fetch_optional(&mut *tx)
                .await
                .context("reading an operation")?;
                let operation_id = current.as_ref().map(|(id, _)| *id);
                let current = current.map(|(_, status)| status);
                if let Some(refused) = crate::operator::resolution_refused(current)? {
                    return Ok(refused);
                }
                let error = crate::operator::resolution_note(channel, &note);
                sql::query(
                    "UPDATE operations SET status = $2, provider_ref = COALESCE($3, provider_ref), \
                     last_error = $4, next_reconcile_at_ms = NULL, changed_by = $5, updated_at_ms = $6 \
                     WHERE id = $1",
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
                sql::query(
                    "UPDATE outbox SET state = 'done', in_flight = 0, locked_until_ms = NULL, \
                     lease_token = NULL, last_error = $2, changed_by = $3, updated_at_ms = $4 \
                     WHERE state = 'pending' AND operation_id = $1",
                )
                .bind(operation_id)
                .bind(&error)
                .bind(channel.actor())
                .bind(now_ms)
                .execute(&mut *tx)
                .await
                .context("closing a resolved operation's message")?;
                tx.commit().await.context("committing a resolution")?;
                Ok(crate::operator::ManualResolution::Resolved)
            }

            async fn ack_dead_letters(
                &self,
                channel: crate::operator::Channel,
                now_ms: i64,
            ) -> Result<(), crate::error::StoreError> {
                sql::query("INSERT INTO dead_letter_acks (at_ms, actor) VALUES ($1, $2)")
                    .bind(now_ms)
                    .bind(channel.actor())
                    .execute(self.pool())
                    .await
                    .context("acknowledging dead letters")?;
                Ok(())
            }

            /// The four numbers, read in one read-only snapshot (`snapshot`) so
            /// they agree with each other however many processes write
            /// meanwhile.
            async fn stats(
                &self,
                now_ms: i64,
                window_ms: u64,
                known: &[String],
            ) -> Result<crate::operator::Stats, crate::error::StoreError> {
                use crate::operator::stats::StatsBuilder;

                let mut tx = self.read_pool().begin_with($snapshot).await.context("reading the numbers")?;
                let last_ack_ms: Option<i64> = sql::query_scalar("SELECT MAX(at_ms) FROM dead_letter_acks")
                    .fetch_one(&mut *tx)
                    .await
                    .context("reading the last acknowledgement")?;
                let mut stats = StatsBuilder::new(known);
                // One row per (provider, duration): a few thousand rows however
                // many calls the window holds.
                let calls = sql::query(
                    "SELECT o.provider AS name, a.duration_ms, COUNT(*) AS calls, \
                     COUNT(*) FILTER (WHERE a.outcome = 'succeeded' OR a.classification = 'permanent') \
                       AS answered \
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
                let entries = sql::query(
                    // A message's age counts from when it was due to be
                    // delivered: its creation, its `available_at` when the
                    // application scheduled it later, or its replay.
                    "SELECT o.provider AS name, COUNT(*) AS depth, \
                       MIN(COALESCE(o.replayed_at_ms, o.not_before_ms, x.created_at_ms)) AS oldest, \
                       CAST(0 AS bigint) AS dead, CAST(0 AS bigint) AS unacked \
                     FROM outbox x JOIN operations o ON o.id = x.operation_id WHERE x.state = 'pending' \
                     GROUP BY o.provider \
                     UNION ALL \
                     SELECT e.integration, COUNT(*), MIN(COALESCE(f.replayed_at_ms, f.created_at_ms)), 0, 0 \
                     FROM forwards f JOIN inbox_events e ON e.seq = f.event_seq WHERE f.state = 'pending' \
                     GROUP BY e.integration \
                     UNION ALL \
                     SELECT o.provider, 0, NULL, COUNT(*), COUNT(*) FILTER (WHERE x.dead_at_ms > $1) \
                     FROM outbox x JOIN operations o ON o.id = x.operation_id WHERE x.state = 'dead' \
                     GROUP BY o.provider \
                     UNION ALL \
                     SELECT e.integration, 0, NULL, COUNT(*), COUNT(*) FILTER (WHERE f.dead_at_ms > $1) \
                     FROM forwards f JOIN inbox_events e ON e.seq = f.event_seq WHERE f.state = 'dead' \
                     GROUP BY e.integration",
                )
                .bind(last_ack_ms.unwrap_or(i64::MIN))
                .fetch_all(&mut *tx)
                .await
                .context("reading open and dead entries")?;
                stats.add_entries(&entries, now_ms)?;
                let unsettled = sql::query(
                    concat!(
                        "SELECT provider AS name, status, COUNT(*) AS n FROM operations WHERE ",
                        $unsettled,
                        " GROUP BY provider, status"
                    ),
                )
                .fetch_all(&mut *tx)
                .await
                .context("counting unknown operations")?;
                stats.add_unsettled(&unsettled)?;
                tx.commit().await.context("reading the numbers")?;
                Ok(stats.finish(now_ms, window_ms, last_ack_ms))
            }

            async fn history(
                &self,
                operation_id: i64,
            ) -> Result<Vec<crate::operator::HistoryEntry>, crate::error::StoreError> {
                let rows = sql::query(
                    "SELECT at_ms, subject, actor, \"change\", detail, 0 AS source, id, 0 AS part FROM history \
                     WHERE operation_id = $1 \
                     UNION ALL \
                     SELECT created_at_ms, 'operation', created_by, 'created', NULL, 0, 0, 0 \
                     FROM operations WHERE id = $1 AND created_by IS NOT NULL \
                     UNION ALL \
                     SELECT started_at_ms, 'attempt', \
                       CASE kind WHEN 'lookup' THEN 'reconciler' ELSE 'relay' END, \
                       kind || CASE WHEN kind = 'call' THEN ' ' || attempt_no ELSE '' END || ': ' || \
                       COALESCE('HTTP ' || status_code, error_kind, 'no answer') || \
                       COALESCE(' (' || classification || ')', '') || ', ' || outcome || ', ' || \
                       duration_ms || ' ms', \
                       decision, 1, id, 0 \
                     FROM attempts WHERE operation_id = $1 \
                     UNION ALL \
                     SELECT started_at_ms + duration_ms, 'message', 'relay', 'pending -> done', NULL, 1, id, 1 \
                     FROM attempts WHERE operation_id = $1 AND settled_from IS NOT NULL \
                     UNION ALL \
                     SELECT started_at_ms + duration_ms, 'operation', 'relay', settled_from || ' -> succeeded', \
                       NULL, 1, id, 2 \
                     FROM attempts WHERE operation_id = $1 AND settled_from <> 'succeeded' \
                     UNION ALL \
                     SELECT s.at_ms, 'event', 'webhook', 'event ' || e.event_id || ': ' || s.effect, \
                       s.detail, 2, s.id, 0 \
                     FROM inbox_steps s JOIN inbox_events e ON e.seq = s.event_seq \
                     WHERE s.operation_id = $1 AND s.kind = 'ledger' \
                     UNION ALL \
                     SELECT r.finished_at_ms, 'report', 'comparison', \
                       'discrepancy ' || d.kind || ' (report ' || r.id || ')', d.detail, 3, d.id, 0 \
                     FROM discrepancies d JOIN reconciliation_reports r ON r.id = d.report_id \
                     WHERE d.operation_id = $1 \
                     ORDER BY 1, 6, 7, 8",
                )
                .bind(operation_id)
                .fetch_all(self.read_pool())
                .await
                .context("reading an operation's history")?;
                rows.iter().map(crate::operator::rows::history_entry_from_row).collect()
            }
        }
    };
}

pub(crate) use operator_statements;
