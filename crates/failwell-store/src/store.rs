//! The [`Store`](crate::Store) implementation both databases share: the
//! same statements (`$N` parameters, which sqlx binds by number on SQLite
//! too), with what differs passed in — the lock clause — and each
//! backend's claim, batch completion and lease renewal.

/// Implements [`Store`](crate::Store) for `store`, whose module provides
/// `lease_due(conn, now_ms, limit, until_ms, token, scope)` (the claim),
/// `complete_batch(conn, completions, now_ms)` and
/// `renew_leases(pool, queue, leases, until_ms)`. `lock` is appended to the
/// reads that decide a write (`" FOR UPDATE"` on PostgreSQL, `""` on
/// SQLite, whose single writer already excludes every other).
macro_rules! store_impl {
    (store = $store:ty, lock = $lock:literal $(,)?) => {
        use std::sync::atomic::Ordering;

        use sqlx::Row;

        use super::rows::operation_by_key;
        use super::writes::{insert_attempt, set_operation};
        use crate::Store;
        use crate::error::{Context, StoreError};
        use crate::model::{
            AttemptRow, ClaimScope, Claimed, ClaimedForward, Completion, Counts, EventRecord,
            ForwardCompletion, Leased, NewEvent, NewOperation, Operation, OperationEvent, OperationStatus, Received,
            Reconciled, Recorded, Resolution, StoredEvent, Submitted,
        };
        use crate::operator::{
            Channel, DeadLetter, DeadLetterFilter, DeadLetterKind, HistoryEntry, ManualResolution, NewReport,
            Report, Reports, Stats,
        };
        use crate::outbox::OutboxConnection;
        use crate::rows::{operation_from_row, select_operation};

        impl Store for $store {
            async fn submit(&self, op: NewOperation, now_ms: i64) -> Result<Submitted, StoreError> {
                crate::stored::check_object(&op.payload)?;
                crate::stored::check_payload(&op.payload)?;
                let mut tx = self.begin().await?;
                let submitted = tx.record(&op, now_ms, "api").await?;
                if matches!(submitted, Submitted::Created(_)) {
                    tx.commit().await.context("committing an operation")?;
                }
                Ok(submitted)
            }

            async fn claim(
                &self,
                now_ms: i64,
                limit: u32,
                lease_ms: u64,
                scope: &ClaimScope,
            ) -> Result<Vec<Claimed>, StoreError> {
                let mut tx = self.begin().await?;
                let token = self.tokens.fetch_add(1, Ordering::Relaxed);
                let until_ms = crate::inbox::lease_until(now_ms, lease_ms);
                let (claimed, unreadable): (Vec<Claimed>, Vec<Claimed>) =
                    lease_due(&mut tx, now_ms, limit, until_ms, token, scope)
                        .await?
                        .into_iter()
                        .partition(|c| c.operation.unreadable.is_none());
                if !unreadable.is_empty() {
                    let set_aside: Vec<Completion> =
                        unreadable.iter().map(|c| crate::stored::set_aside(c, now_ms)).collect();
                    complete_batch(&mut tx, &set_aside, now_ms).await?;
                }
                if !claimed.is_empty() || !unreadable.is_empty() {
                    tx.commit().await.context("committing a claim")?;
                }
                Ok(claimed)
            }

            async fn complete(&self, completions: Vec<Completion>, now_ms: i64) -> Result<Vec<Recorded>, StoreError> {
                let mut tx = self.begin().await?;
                let recorded = complete_batch(&mut tx, &completions, now_ms).await?;
                tx.commit().await.context("committing attempt results")?;
                Ok(recorded)
            }

            async fn due_unknown(&self, now_ms: i64, limit: u32) -> Result<Vec<Operation>, StoreError> {
                let rows = sqlx::query(select_operation!(
                    "WHERE o.status = 'unknown' AND o.next_reconcile_at_ms <= $1 ORDER BY o.next_reconcile_at_ms LIMIT $2"
                ))
                .bind(now_ms)
                .bind(i64::from(limit))
                .fetch_all(self.read_pool())
                .await
                .context("finding unknown operations")?;
                rows.iter().map(operation_from_row).collect()
            }

            async fn reconcile(&self, r: Reconciled, now_ms: i64) -> Result<(), StoreError> {
                let mut tx = self.begin().await?;
                // Locks in the order every writer takes them (the message, then the
                // operation), so two processes reconciling it apply one result.
                sqlx::query(concat!("SELECT id FROM outbox WHERE operation_id = $1", $lock))
                    .bind(r.operation_id)
                    .fetch_optional(&mut *tx)
                    .await
                    .context("locking an outbox message")?;
                let status: Option<String> =
                    sqlx::query_scalar(concat!("SELECT status FROM operations WHERE id = $1", $lock))
                        .bind(r.operation_id)
                        .fetch_optional(&mut *tx)
                        .await
                        .context("reading an operation")?;
                if status.as_deref() != Some("unknown") {
                    return Ok(());
                }
                if let Some(attempt) = &r.attempt {
                    insert_attempt(&mut tx, r.operation_id, attempt).await?;
                }
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
                            "reconciler",
                        )
                        .await?;
                    }
                    Resolution::Requeue { key_group, provider_key } => {
                        sqlx::query(
                            "UPDATE operations SET status = 'pending', provider_key = $3, \
                             key_first_sent_at_ms = CASE WHEN key_group = $2 THEN key_first_sent_at_ms END, \
                             key_group = $2, next_reconcile_at_ms = NULL, lookup_misses = 0, \
                             effect_possible = CASE WHEN key_group = $2 THEN effect_possible ELSE 0 END, \
                             updated_at_ms = $4, changed_by = 'reconciler' WHERE id = $1",
                        )
                        .bind(r.operation_id)
                        .bind(i64::from(*key_group))
                        .bind(provider_key)
                        .bind(now_ms)
                        .execute(&mut *tx)
                        .await
                        .context("requeueing an operation")?;
                        // Retention may have deleted a delivered message whose
                        // operation an event reopened since: created again.
                        sqlx::query(
                            "INSERT INTO outbox (operation_id, provider, available_at_ms, created_at_ms, \
                             updated_at_ms, changed_by) SELECT id, provider, $2, $2, $2, 'reconciler' \
                             FROM operations WHERE id = $1 \
                             ON CONFLICT (operation_id) DO UPDATE SET state = 'pending', available_at_ms = $2, \
                             in_flight = 0, locked_until_ms = NULL, lease_token = NULL, updated_at_ms = $2, \
                             changed_by = 'reconciler'",
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
                            "reconciler",
                        )
                        .await?;
                        sqlx::query(
                            "UPDATE outbox SET state = 'dead', dead_at_ms = $2, last_error = $3, updated_at_ms = $2, \
                             changed_by = 'reconciler' WHERE operation_id = $1",
                        )
                        .bind(r.operation_id)
                        .bind(now_ms)
                        .bind(error)
                        .execute(&mut *tx)
                        .await
                        .context("dead-lettering an outbox message")?;
                    }
                    Resolution::Confirm { retry_at_ms } => {
                        sqlx::query(
                            "UPDATE operations SET next_reconcile_at_ms = $2, lookup_misses = lookup_misses + 1, \
                             updated_at_ms = $3 WHERE id = $1",
                        )
                        .bind(r.operation_id)
                        .bind(retry_at_ms)
                        .bind(now_ms)
                        .execute(&mut *tx)
                        .await
                        .context("scheduling a confirming lookup")?;
                    }
                    Resolution::Postpone { retry_at_ms } => {
                        sqlx::query("UPDATE operations SET next_reconcile_at_ms = $2 WHERE id = $1")
                            .bind(r.operation_id)
                            .bind(retry_at_ms)
                            .execute(&mut *tx)
                            .await
                            .context("postponing a reconciliation")?;
                    }
                    Resolution::NeedsHuman { reason } => {
                        sqlx::query(
                            "UPDATE operations SET status = 'needs_human', next_reconcile_at_ms = NULL, last_error = $2, \
                             changed_by = 'reconciler', updated_at_ms = $3 WHERE id = $1",
                        )
                        .bind(r.operation_id)
                        .bind(reason)
                        .bind(now_ms)
                        .execute(&mut *tx)
                        .await
                        .context("handing an operation to a human")?;
                    }
                    Resolution::Later { retry_at_ms, error } => {
                        sqlx::query(
                            "UPDATE operations SET next_reconcile_at_ms = $2, reconcile_attempts = reconcile_attempts + 1, \
                             last_error = $3, updated_at_ms = $4 WHERE id = $1",
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
                let mut conn = self.read_pool().acquire().await.context("acquiring a connection")?;
                operation_by_key(&mut conn, idempotency_key).await
            }

            async fn attempts(&self, operation_id: i64) -> Result<Vec<AttemptRow>, StoreError> {
                let rows = sqlx::query(
                    "SELECT kind, attempt_no, provider_key, started_at_ms, duration_ms, status_code, error_kind, \
                     classification, outcome, decision FROM attempts WHERE operation_id = $1 ORDER BY id",
                )
                .bind(operation_id)
                .fetch_all(self.read_pool())
                .await
                .context("reading the attempt history")?;
                Ok(rows.iter().map(crate::rows::attempt_from_row).collect())
            }

            async fn renew(
                &self,
                queue: Leased,
                leases: Vec<(i64, i64)>,
                until_ms: i64,
            ) -> Result<u64, StoreError> {
                if leases.is_empty() {
                    return Ok(0);
                }
                renew_leases(self.pool(), queue, &leases, until_ms).await
            }

            async fn delete_delivered(&self, before_ms: i64, limit: u32) -> Result<u64, StoreError> {
                let deleted = sqlx::query(
                    "DELETE FROM outbox WHERE id IN (SELECT x.id FROM outbox x \
                     JOIN operations o ON o.id = x.operation_id WHERE x.state = 'done' \
                     AND x.updated_at_ms < $1 AND o.status IN ('succeeded', 'failed') ORDER BY x.id LIMIT $2)",
                )
                .bind(before_ms)
                .bind(i64::from(limit))
                .execute(self.pool())
                .await
                .context("deleting delivered messages")?;
                Ok(deleted.rows_affected())
            }

            async fn counts(&self) -> Result<Counts, StoreError> {
                let row = sqlx::query(
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
                Ok(Counts {
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

            async fn receive(&self, events: Vec<NewEvent>, now_ms: i64) -> Result<Vec<Received>, StoreError> {
                self.receive_events(events, now_ms).await
            }

            async fn events_after(
                &self,
                after: i64,
                limit: u32,
                max_bytes: usize,
            ) -> Result<Vec<StoredEvent>, StoreError> {
                self.stored_events_after(after, limit, max_bytes).await
            }

            async fn operation_events(&self, operation_id: i64) -> Result<Vec<OperationEvent>, StoreError> {
                self.events_of_operation(operation_id).await
            }

            async fn event(&self, integration: &str, event_id: &str) -> Result<Option<EventRecord>, StoreError> {
                self.event_record(integration, event_id).await
            }

            async fn claim_forwards(
                &self,
                now_ms: i64,
                limit: u32,
                lease_ms: u64,
            ) -> Result<Vec<ClaimedForward>, StoreError> {
                self.claim_due_forwards(now_ms, limit, lease_ms).await
            }

            async fn complete_forwards(
                &self,
                completions: Vec<ForwardCompletion>,
                now_ms: i64,
            ) -> Result<Vec<Recorded>, StoreError> {
                self.complete_claimed_forwards(completions, now_ms).await
            }

            async fn dead_letters(
                &self,
                filter: DeadLetterFilter,
                limit: u32,
            ) -> Result<Vec<DeadLetter>, StoreError> {
                self.list_dead_letters(filter, limit).await
            }

            async fn dead_letter(&self, kind: DeadLetterKind, id: i64) -> Result<Option<DeadLetter>, StoreError> {
                self.one_dead_letter(kind, id).await
            }

            async fn replay(
                &self,
                kind: DeadLetterKind,
                id: i64,
                channel: Channel,
                now_ms: i64,
            ) -> Result<bool, StoreError> {
                self.replay_dead_letter(kind, id, channel, now_ms).await
            }

            async fn purge(
                &self,
                kind: DeadLetterKind,
                id: i64,
                channel: Channel,
                now_ms: i64,
            ) -> Result<bool, StoreError> {
                self.purge_dead_letter(kind, id, channel, now_ms).await
            }

            async fn resolve(
                &self,
                idempotency_key: &str,
                outcome: failwell_policy::Outcome,
                provider_ref: Option<String>,
                note: String,
                channel: Channel,
                now_ms: i64,
            ) -> Result<ManualResolution, StoreError> {
                self.resolve_by_operator(idempotency_key, outcome, provider_ref, note, channel, now_ms).await
            }

            async fn ack_dead_letters(&self, channel: Channel, now_ms: i64) -> Result<(), StoreError> {
                self.acknowledge(channel, now_ms).await
            }

            async fn stats(&self, now_ms: i64, window_ms: u64, known: &[String]) -> Result<Stats, StoreError> {
                self.integration_stats(now_ms, window_ms, known).await
            }

            async fn history(&self, operation_id: i64) -> Result<Vec<HistoryEntry>, StoreError> {
                self.operation_history(operation_id).await
            }

            async fn operations_between(
                &self,
                provider: &str,
                from_ms: i64,
                to_ms: i64,
            ) -> Result<Vec<Operation>, StoreError> {
                self.operations_created_between(provider, from_ms, to_ms).await
            }

            async fn operations_by_reference(
                &self,
                provider: &str,
                references: &[String],
            ) -> Result<Vec<Operation>, StoreError> {
                self.operations_with_references(provider, references).await
            }

            async fn save_report(&self, report: NewReport) -> Result<i64, StoreError> {
                self.insert_report(report).await
            }

            async fn reports(&self, limit: u32) -> Result<Vec<Report>, StoreError> {
                self.list_reports(Reports::Newest(limit)).await
            }

            async fn latest_reports(&self) -> Result<Vec<Report>, StoreError> {
                self.list_reports(Reports::LatestPerProvider).await
            }

            async fn report(&self, id: i64) -> Result<Option<Report>, StoreError> {
                Ok(self.list_reports(Reports::One(id)).await?.pop())
            }

            async fn firing_alerts(&self, kind: &str) -> Result<Vec<String>, StoreError> {
                sqlx::query_scalar("SELECT subject FROM alerts_firing WHERE kind = $1 ORDER BY subject")
                    .bind(kind)
                    .fetch_all(self.read_pool())
                    .await
                    .context("reading firing alerts")
            }

            async fn set_alert(
                &self,
                kind: &str,
                subject: &str,
                firing: bool,
                now_ms: i64,
                alert: Option<crate::operator::NewAlert>,
            ) -> Result<bool, StoreError> {
                self.alert_transition(Some((kind, subject, firing, now_ms)), alert.as_ref()).await
            }

            async fn queue_alert(&self, alert: crate::operator::NewAlert) -> Result<(), StoreError> {
                self.alert_transition(None, Some(&alert)).await.map(|_| ())
            }

            async fn claim_alert(
                &self,
                claim: crate::operator::AlertClaim,
                now_ms: i64,
                lease_ms: i64,
            ) -> Result<Option<crate::operator::Alert>, StoreError> {
                self.claim_alert_row(claim, now_ms, lease_ms).await
            }

            async fn alert_sent(
                &self,
                claimed: &crate::operator::Alert,
                sent: crate::operator::AlertSent,
            ) -> Result<bool, StoreError> {
                self.record_alert(claimed, sent).await
            }

            async fn claim_comparison(
                &self,
                provider: &str,
                window: (i64, i64),
                now_ms: i64,
                lease_ms: i64,
            ) -> Result<bool, StoreError> {
                // New, or claimed earlier by a run that never finished.
                let claimed = sqlx::query(
                    "INSERT INTO comparison_runs (provider, window_from_ms, window_to_ms, claimed_at_ms) \
                     VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (provider, window_from_ms, window_to_ms) DO UPDATE SET claimed_at_ms = $4 \
                     WHERE comparison_runs.finished_at_ms IS NULL AND comparison_runs.claimed_at_ms <= $5",
                )
                .bind(provider)
                .bind(window.0)
                .bind(window.1)
                .bind(now_ms)
                .bind(now_ms - lease_ms)
                .execute(self.pool())
                .await
                .context("claiming a comparison")?;
                Ok(claimed.rows_affected() > 0)
            }

            async fn finish_comparison(
                &self,
                provider: &str,
                window: (i64, i64),
                now_ms: i64,
            ) -> Result<(), StoreError> {
                sqlx::query(
                    "UPDATE comparison_runs SET finished_at_ms = $4 \
                     WHERE provider = $1 AND window_from_ms = $2 AND window_to_ms = $3",
                )
                .bind(provider)
                .bind(window.0)
                .bind(window.1)
                .bind(now_ms)
                .execute(self.pool())
                .await
                .context("finishing a comparison")?;
                Ok(())
            }

            async fn last_comparison_window(&self, provider: &str) -> Result<Option<crate::Window>, StoreError> {
                sqlx::query_as(
                    "SELECT window_from_ms, window_to_ms FROM comparison_runs WHERE provider = $1 \
                     ORDER BY window_to_ms DESC LIMIT 1",
                )
                .bind(provider)
                .fetch_optional(self.read_pool())
                .await
                .context("reading the last compared window")
            }

            async fn abandoned_comparisons(
                &self,
                claimed_before_ms: i64,
            ) -> Result<Vec<(String, crate::Window)>, StoreError> {
                let rows: Vec<(String, i64, i64)> = sqlx::query_as(
                    "SELECT provider, window_from_ms, window_to_ms FROM comparison_runs \
                     WHERE finished_at_ms IS NULL AND claimed_at_ms <= $1 ORDER BY window_from_ms, provider",
                )
                .bind(claimed_before_ms)
                .fetch_all(self.read_pool())
                .await
                .context("reading unfinished comparisons")?;
                Ok(rows.into_iter().map(|(p, from, to)| (p, (from, to))).collect())
            }
        }

        impl $store {
            /// In one transaction: the alert `(kind, subject)` raised or
            /// resolved (when `transition` is given), and `alert` queued if
            /// that changed it (always without a transition). Returns
            /// whether it changed.
            async fn alert_transition(
                &self,
                transition: Option<(&str, &str, bool, i64)>,
                alert: Option<&crate::operator::NewAlert>,
            ) -> Result<bool, StoreError> {
                let mut tx = self.begin().await?;
                let changed = match transition {
                    None => true,
                    Some((kind, subject, firing, now_ms)) => {
                        let query = if firing {
                            sqlx::query(
                                "INSERT INTO alerts_firing (kind, subject, since_ms) VALUES ($1, $2, $3) \
                                 ON CONFLICT DO NOTHING",
                            )
                            .bind(kind)
                            .bind(subject)
                            .bind(now_ms)
                        } else {
                            sqlx::query("DELETE FROM alerts_firing WHERE kind = $1 AND subject = $2")
                                .bind(kind)
                                .bind(subject)
                        };
                        query.execute(&mut *tx).await.context("recording an alert")?.rows_affected() > 0
                    }
                };
                if let (true, Some(alert)) = (changed, alert) {
                    sqlx::query(
                        "INSERT INTO alerts (kind, subject, text, details, created_at_ms, next_at_ms) \
                         VALUES ($1, $2, $3, $4, $5, $5)",
                    )
                    .bind(&alert.kind)
                    .bind(&alert.subject)
                    .bind(&alert.text)
                    .bind(alert.details.to_string())
                    .bind(alert.at_ms)
                    .execute(&mut *tx)
                    .await
                    .context("queueing an alert")?;
                }
                tx.commit().await.context("committing an alert")?;
                Ok(changed)
            }
        }
    };
}

pub(crate) use store_impl;
