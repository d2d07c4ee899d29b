//! A batch of relay results on SQLite in five statements, whatever its size.
//!
//! Each statement sqlx runs on SQLite is a round trip to the connection's
//! own thread, and the single writer waits for every one: four statements
//! per message (the attempt, its count, the message, the operation) kept
//! the writer, and with it every order an application commits, waiting on
//! thread hand-offs. The batch goes in as one JSON array read with
//! `json_each`, as PostgreSQL's goes in as arrays (`postgres::store`).

use sqlx::sqlite::SqliteConnection;

use super::writes::not_applied;
use crate::error::{Context, StoreError};

/// The batch's rows, from the JSON array bound as `$1` (see [`completion_json`]), in
/// the order given (`n`).
const ROWS: &str = "(SELECT key AS n, value ->> 'outbox_id' AS outbox_id, value ->> 'token' AS token, \
     value ->> 'operation_id' AS operation_id, value ->> 'kind' AS kind, value ->> 'started_at_ms' AS started_at_ms, \
     value ->> 'duration_ms' AS duration_ms, value ->> 'status_code' AS status_code, \
     value ->> 'error_kind' AS error_kind, value ->> 'classification' AS classification, \
     value ->> 'outcome' AS outcome, value ->> 'decision' AS decision, value ->> 'maybe_acted' AS maybe_acted, \
     value ->> 'state' AS state, value ->> 'available_at_ms' AS available_at_ms, value ->> 'delay_ms' AS delay_ms, \
     value ->> 'error' AS error, value ->> 'dead_at_ms' AS dead_at_ms, value ->> 'given_back' AS given_back, \
     value ->> 'status' AS status, value ->> 'provider_ref' AS provider_ref, value ->> 'response' AS response, \
     value ->> 'op_error' AS op_error, value ->> 'reconcile_at_ms' AS reconcile_at_ms, value ->> 'leaves' AS leaves \
     FROM json_each($1))";

crate::outbox::changes::complete_by_rounds!(super::SqliteStore, sqlx::sqlite::SqliteConnection);

/// The five statements of one round (`rows`: results of distinct
/// operations); returns the ids of the messages whose lease held.
async fn settle(
    conn: &mut SqliteConnection,
    rows: &str,
    now_ms: i64,
) -> Result<std::collections::HashSet<i64>, StoreError> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO attempts (operation_id, kind, attempt_no, provider_key, started_at_ms, duration_ms, \
         status_code, error_kind, classification, outcome, decision) \
         SELECT o.id, i.kind, o.attempts + CASE WHEN i.kind = 'call' THEN 1 ELSE 0 END, \
         CASE WHEN i.kind = 'call' THEN o.provider_key END, i.started_at_ms, i.duration_ms, i.status_code, \
         i.error_kind, i.classification, i.outcome, i.decision \
         FROM {ROWS} i JOIN operations o ON o.id = i.operation_id WHERE i.kind IS NOT NULL ORDER BY i.n"
    )))
    .bind(rows)
    .execute(&mut *conn)
    .await
    .context("appending to the attempt history")?;
    // A call counts whatever became of its message: the attempts, the key
    // group's "may have acted" mark, and the key's first use.
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE operations SET attempts = attempts + 1, \
         effect_possible = CASE WHEN i.maybe_acted THEN 1 ELSE effect_possible END, \
         key_first_sent_at_ms = COALESCE(key_first_sent_at_ms, i.started_at_ms) \
         FROM {ROWS} i WHERE operations.id = i.operation_id AND i.kind = 'call'"
    )))
    .bind(rows)
    .execute(&mut *conn)
    .await
    .context("counting attempts")?;
    let moved: Vec<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "UPDATE outbox SET state = i.state, available_at_ms = COALESCE(i.available_at_ms, outbox.available_at_ms), \
         previous_delay_ms = COALESCE(i.delay_ms, outbox.previous_delay_ms), last_error = i.error, \
         dead_at_ms = i.dead_at_ms, in_flight = 0, locked_until_ms = NULL, lease_token = NULL, updated_at_ms = $2, \
         attempts = CASE WHEN typeof(outbox.attempts) = 'integer' THEN outbox.attempts - i.given_back \
           ELSE outbox.attempts END, changed_by = 'relay' \
         FROM {ROWS} i WHERE outbox.id = i.outbox_id AND outbox.lease_token = i.token AND outbox.state = 'pending' \
         RETURNING outbox.id"
    )))
    .bind(rows)
    .bind(now_ms)
    .fetch_all(&mut *conn)
    .await
    .context("completing outbox messages")?;
    if !moved.is_empty() {
        let moved_ids = serde_json::to_string(&moved).unwrap_or_default();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE operations SET status = i.status, provider_ref = COALESCE(i.provider_ref, operations.provider_ref), \
             response = COALESCE(i.response, operations.response), last_error = i.op_error, \
             next_reconcile_at_ms = i.reconcile_at_ms, reconcile_attempts = CASE WHEN i.reconcile_at_ms IS NULL \
               THEN operations.reconcile_attempts ELSE 0 END, updated_at_ms = $2, changed_by = 'relay' \
             FROM {ROWS} i WHERE operations.id = i.operation_id AND i.outbox_id IN (SELECT value FROM json_each($3))"
        )))
        .bind(rows)
        .bind(now_ms)
        .bind(moved_ids.as_str())
        .execute(&mut *conn)
        .await
        .context("updating operations")?;
        // A delivered message leaves the outbox; its operation keeps the
        // outcome. It is `done` by now, so no purge is written for it.
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM outbox WHERE id IN (SELECT i.outbox_id FROM {ROWS} i WHERE i.leaves) \
             AND id IN (SELECT value FROM json_each($2)) AND state = 'done'"
        )))
        .bind(rows)
        .bind(moved_ids.as_str())
        .execute(&mut *conn)
        .await
        .context("deleting delivered messages")?;
    }
    Ok(moved.into_iter().collect())
}
