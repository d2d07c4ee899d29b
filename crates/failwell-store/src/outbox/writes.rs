//! The statements one attempt result goes through, on either database:
//! the history row, the operation's new state, and what a result whose
//! lease did not hold still records. The SQL is the same on both (`$N`
//! parameters, which sqlx binds by number on SQLite too);
//! [`attempt_writes!`] defines the functions for one connection type. (The
//! relay's results are recorded a batch at a time by each backend's
//! `complete_batch`: one statement on PostgreSQL, four per round of
//! distinct operations on SQLite, both reading the batch as JSON.)

/// Defines `insert_attempt`, `count_attempt`, `set_operation` and
/// `not_applied` (and the private `late_answer`) in the invoking module, for
/// connections of type `$conn`.
macro_rules! attempt_writes {
    ($conn:ty) => {
        use serde_json::Value;

        use super::sql;

        use crate::outbox::changes::{conflict_note, settling_answer};
        use crate::error::{Context, StoreError};
        use crate::{AttemptKind, AttemptRecord, Completion, OperationStatus, Recorded};

        pub(super) async fn insert_attempt(
            conn: &mut $conn,
            operation_id: i64,
            attempt: &AttemptRecord,
        ) -> Result<(), StoreError> {
            sql::query(
                "INSERT INTO attempts (operation_id, kind, attempt_no, provider_key, started_at_ms, duration_ms, \
                 status_code, error_kind, classification, outcome, decision) \
                 SELECT o.id, $2, o.attempts + CASE WHEN $2 = 'call' THEN 1 ELSE 0 END, CASE WHEN $2 = 'call' THEN o.provider_key END, \
                 $3, $4, $5, $6, $7, $8, $9 FROM operations o WHERE o.id = $1",
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
            count_attempt(conn, operation_id, attempt).await
        }

        /// Counts `attempt` on its operation if it was a call (a call counts
        /// whatever became of its message): the attempts, the key group's
        /// "may have acted" mark (kept until a lookup clears it), and the
        /// key's first use unless an earlier call was.
        pub(super) async fn count_attempt(
            conn: &mut $conn,
            operation_id: i64,
            attempt: &AttemptRecord,
        ) -> Result<(), StoreError> {
            if attempt.kind == AttemptKind::Call {
                sql::query("UPDATE operations SET attempts = attempts + 1, \
                     effect_possible = CASE WHEN $2 THEN 1 ELSE effect_possible END, \
                     key_first_sent_at_ms = COALESCE(key_first_sent_at_ms, $3) WHERE id = $1")
                    .bind(operation_id)
                    .bind(attempt.maybe_acted())
                    .bind(attempt.started_at_ms)
                    .execute(&mut *conn)
                    .await
                    .context("counting an attempt")?;
            }
            Ok(())
        }

        /// A result whose compare-and-set on the lease found the message
        /// changed: says why (an event settled the operation, or a newer claim
        /// took the lease over) and keeps what a late answer still tells.
        pub(super) async fn not_applied(
            conn: &mut $conn,
            c: &Completion,
            now_ms: i64,
        ) -> Result<Recorded, StoreError> {
            let settled_by_event: Option<String> = sql::query_scalar(
                "SELECT status FROM operations WHERE id = $1 AND event_version IS NOT NULL \
                 AND status IN ('succeeded', 'failed')",
            )
            .bind(c.operation_id)
            .fetch_optional(&mut *conn)
            .await
            .context("reading why a result came too late")?;
            let Some(settled) = settled_by_event else { return Ok(Recorded::LeaseLost) };
            late_answer(conn, c, &settled, now_ms).await
        }

        /// The provider's answer to our call arrived after an event settled the
        /// operation. The same answer keeps the call's provider id and response
        /// where the event gave none; the opposite answer is a conflict between
        /// two statements of the provider that nothing orders, so the operation
        /// goes back to `unknown` and a status lookup decides (at once).
        async fn late_answer(
            conn: &mut $conn,
            c: &Completion,
            settled: &str,
            now_ms: i64,
        ) -> Result<Recorded, StoreError> {
            let Some((answer, provider_ref, response)) = settling_answer(&c.transition) else {
                return Ok(Recorded::SettledElsewhere);
            };
            if answer.as_str() == settled {
                sql::query(
                    "UPDATE operations SET provider_ref = COALESCE(provider_ref, $2), \
                     response = COALESCE(response, $3) WHERE id = $1",
                )
                .bind(c.operation_id)
                .bind(provider_ref)
                .bind(response.map(Value::to_string))
                .execute(&mut *conn)
                .await
                .context("keeping a late answer's provider id")?;
                return Ok(Recorded::SettledElsewhere);
            }
            // Events that already confirmed or changed a settled state were sent
            // after the effect our call answered for: they order it, no conflict.
            let ordered: bool = sql::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM inbox_steps WHERE operation_id = $1 AND effect IN ('changed', 'confirmed'))",
            )
            .bind(c.operation_id)
            .fetch_one(&mut *conn)
            .await
            .context("reading an operation's events")?;
            if ordered {
                return Ok(Recorded::SettledElsewhere);
            }
            let error = conflict_note(answer, settled);
            sql::query(
                "UPDATE operations SET status = 'unknown', provider_ref = COALESCE(provider_ref, $2), \
                 last_error = $3, next_reconcile_at_ms = $4, reconcile_attempts = 0, updated_at_ms = $4, \
                 changed_by = 'relay' WHERE id = $1",
            )
            .bind(c.operation_id)
            .bind(provider_ref)
            .bind(&error)
            .bind(now_ms)
            .execute(&mut *conn)
            .await
            .context("recording a conflict")?;
            Ok(Recorded::Conflict)
        }

        #[allow(clippy::too_many_arguments)]
        pub(super) async fn set_operation(
            conn: &mut $conn,
            id: i64,
            status: OperationStatus,
            provider_ref: Option<&str>,
            response: Option<&Value>,
            error: Option<&str>,
            reconcile_at_ms: Option<i64>,
            now_ms: i64,
            actor: &str,
        ) -> Result<(), StoreError> {
            sql::query(
                "UPDATE operations SET status = $2, provider_ref = COALESCE($3, provider_ref), \
                 response = COALESCE($4, response), last_error = $5, next_reconcile_at_ms = $6, \
                 reconcile_attempts = CASE WHEN $6 IS NULL THEN reconcile_attempts ELSE 0 END, updated_at_ms = $7, \
                 changed_by = $8 WHERE id = $1",
            )
            .bind(id)
            .bind(status.as_str())
            .bind(provider_ref)
            .bind(response.map(Value::to_string))
            .bind(error)
            .bind(reconcile_at_ms)
            .bind(now_ms)
            .bind(actor)
            .execute(conn)
            .await
            .context("updating an operation")?;
            Ok(())
        }
    };
}

pub(crate) use attempt_writes;
