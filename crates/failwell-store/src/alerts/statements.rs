//! The alerts role's statements ([`alert_statements!`]).

/// Implements [`AlertStore`](crate::AlertStore) for `store`, in the
/// invoking module, with the same SQL on every database (`$N` parameters,
/// run by the backend's `sql` module). The store provides `pool()`,
/// `read_pool()` and `begin()`; the invoker gives the row-lock clause of
/// the claim's read (`lock`) and the insert of a firing alert that does
/// nothing when it is firing already (`firing`, parameters kind, subject,
/// since).
macro_rules! alert_statements {
    (store = $store:ty, lock = $lock:literal, firing = $firing:literal $(,)?) => {
        use crate::error::Context as _;

        use super::sql;

        #[async_trait::async_trait]
        impl crate::AlertStore for $store {
            async fn firing_alerts(&self, kind: &str) -> Result<Vec<String>, crate::error::StoreError> {
                sql::query_scalar("SELECT subject FROM alerts_firing WHERE kind = $1 ORDER BY subject")
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
                alert: Option<crate::alerts::NewAlert>,
            ) -> Result<bool, crate::error::StoreError> {
                self.alert_transition(Some((kind, subject, firing, now_ms)), alert.as_ref()).await
            }

            async fn queue_alert(&self, alert: crate::alerts::NewAlert) -> Result<(), crate::error::StoreError> {
                self.alert_transition(None, Some(&alert)).await.map(|_| ())
            }

            async fn claim_alert(
                &self,
                claim: crate::alerts::AlertClaim,
                now_ms: i64,
                lease_ms: i64,
            ) -> Result<Option<crate::alerts::Alert>, crate::error::StoreError> {
                let report = match claim {
                    crate::alerts::AlertClaim::Due => None,
                    crate::alerts::AlertClaim::Report(id) => Some(id),
                };
                // Due, not leased, and no earlier unsent alert of its kind
                // and subject, read under a row lock (`lock`): an alert
                // another process is claiming is skipped, or waited for and
                // then found leased, so two never both claim one.
                let mut tx = self.begin().await?;
                let id: Option<i64> = sql::query_scalar(concat!(
                    "SELECT a.id FROM alerts a WHERE a.sent_at_ms IS NULL AND a.gave_up_at_ms IS NULL \
                     AND a.next_at_ms <= $1 \
                     AND (a.locked_until_ms IS NULL OR a.locked_until_ms <= $1) \
                     AND ($2 IS NULL OR a.report_id = $2) \
                     AND NOT EXISTS (SELECT 1 FROM alerts e WHERE e.kind = a.kind AND e.subject = a.subject \
                       AND e.sent_at_ms IS NULL AND e.gave_up_at_ms IS NULL AND e.id < a.id) \
                     ORDER BY a.id LIMIT 1",
                    $lock
                ))
                .bind(now_ms)
                .bind(report)
                .fetch_optional(&mut *tx)
                .await
                .context("finding a due alert")?;
                let Some(id) = id else { return Ok(None) };
                sql::query("UPDATE alerts SET locked_until_ms = $2, attempts = attempts + 1 WHERE id = $1")
                    .bind(id)
                    .bind(now_ms + lease_ms)
                    .execute(&mut *tx)
                    .await
                    .context("claiming an alert")?;
                let row = sql::query(
                    "SELECT id, report_id, text, details, attempts, created_at_ms, locked_until_ms FROM alerts WHERE id = $1",
                )
                .bind(id)
                .fetch_one(&mut *tx)
                .await
                .context("reading a claimed alert")?;
                tx.commit().await.context("committing an alert's claim")?;
                crate::alerts::alert_from_row(&row).map(Some)
            }

            async fn alert_sent(
                &self,
                claimed: &crate::alerts::Alert,
                sent: crate::alerts::AlertSent,
            ) -> Result<bool, crate::error::StoreError> {
                let (at, error, retry_at, gave_up) = match sent {
                    crate::alerts::AlertSent::At(at) => (Some(at), None, None, None),
                    crate::alerts::AlertSent::Failed { error, retry_at_ms } => {
                        (None, Some(error), Some(retry_at_ms), None)
                    }
                    crate::alerts::AlertSent::GivenUp { error, at_ms } => {
                        (None, Some(format!("given up: {error}")), None, Some(at_ms))
                    }
                };
                let mut tx = self.begin().await?;
                // Only while this claim still holds it: a sender that
                // outlived its lease cannot undo what another one recorded.
                let held = sql::query(
                    "UPDATE alerts SET sent_at_ms = $2, last_error = $3, next_at_ms = COALESCE($4, next_at_ms), \
                     gave_up_at_ms = $6, locked_until_ms = NULL \
                     WHERE id = $1 AND locked_until_ms = $5 AND sent_at_ms IS NULL AND gave_up_at_ms IS NULL",
                )
                .bind(claimed.id)
                .bind(at)
                .bind(&error)
                .bind(retry_at)
                .bind(claimed.held_until_ms)
                .bind(gave_up)
                .execute(&mut *tx)
                .await
                .context("recording an alert's send")?
                .rows_affected()
                    > 0;
                if !held {
                    return Ok(false);
                }
                // A report's alert: the report shows it too (an earlier
                // success is kept; a success clears the error).
                sql::query(
                    "UPDATE reconciliation_reports SET alerted_at_ms = COALESCE($2, alerted_at_ms), alert_error = $3 \
                     WHERE id = (SELECT report_id FROM alerts WHERE id = $1)",
                )
                .bind(claimed.id)
                .bind(at)
                .bind(&error)
                .execute(&mut *tx)
                .await
                .context("recording a report's alert")?;
                tx.commit().await.context("committing an alert's send")?;
                Ok(true)
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
                alert: Option<&crate::alerts::NewAlert>,
            ) -> Result<bool, crate::error::StoreError> {
                let mut tx = self.begin().await?;
                let changed = match transition {
                    None => true,
                    Some((kind, subject, firing, now_ms)) => {
                        let query = if firing {
                            sql::query($firing)
                            .bind(kind)
                            .bind(subject)
                            .bind(now_ms)
                        } else {
                            sql::query("DELETE FROM alerts_firing WHERE kind = $1 AND subject = $2")
                                .bind(kind)
                                .bind(subject)
                        };
                        query.execute(&mut *tx).await.context("recording an alert")?.rows_affected() > 0
                    }
                };
                if let (true, Some(alert)) = (changed, alert) {
                    sql::query(
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

pub(crate) use alert_statements;
