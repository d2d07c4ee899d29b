//! A batch of attempt results on MySQL ([`complete_batch`]): SQLite's
//! statements per round, with PostgreSQL's locks.

use sqlx::mysql::MySqlConnection;

use super::sql;
use super::writes::not_applied;
use crate::error::{Context, StoreError};

/// The batch's rows, from the JSON array bound as `$1` (see
/// [`completion_json`]), in the order given (`n`). Every statement joins
/// them first (`STRAIGHT_JOIN`) to a table read by primary key (`FORCE
/// INDEX`): InnoDB then reads, and locks, only the batch's rows, never
/// waiting for a row an application has inserted and not committed.
const ROWS: &str = "JSON_TABLE($1, '$[*]' COLUMNS (n FOR ORDINALITY, outbox_id BIGINT PATH '$.outbox_id', \
     token BIGINT PATH '$.token', operation_id BIGINT PATH '$.operation_id', kind LONGTEXT PATH '$.kind', \
     started_at_ms BIGINT PATH '$.started_at_ms', duration_ms BIGINT PATH '$.duration_ms', \
     status_code BIGINT PATH '$.status_code', error_kind LONGTEXT PATH '$.error_kind', \
     classification LONGTEXT PATH '$.classification', outcome LONGTEXT PATH '$.outcome', \
     decision LONGTEXT PATH '$.decision', maybe_acted BOOLEAN PATH '$.maybe_acted', state LONGTEXT PATH '$.state', \
     available_at_ms BIGINT PATH '$.available_at_ms', delay_ms BIGINT PATH '$.delay_ms', error LONGTEXT PATH '$.error', \
     dead_at_ms BIGINT PATH '$.dead_at_ms', given_back BIGINT PATH '$.given_back', status LONGTEXT PATH '$.status', \
     provider_ref LONGTEXT PATH '$.provider_ref', response LONGTEXT PATH '$.response', op_error LONGTEXT PATH '$.op_error', \
     reconcile_at_ms BIGINT PATH '$.reconcile_at_ms', leaves BOOLEAN PATH '$.leaves')) AS i";

crate::outbox::changes::complete_by_rounds!(super::MySqlStore, sqlx::mysql::MySqlConnection);

/// The statements of one round of results of distinct operations; returns
/// the ids of the messages whose lease held.
async fn settle(
    conn: &mut MySqlConnection,
    rows: &str,
    now_ms: i64,
) -> Result<std::collections::HashSet<i64>, StoreError> {
    let moved: Vec<i64> = sql::query_scalar(sql::AssertSqlSafe(format!(
        "SELECT x.id FROM {ROWS} STRAIGHT_JOIN outbox x FORCE INDEX (PRIMARY) ON x.id = i.outbox_id \
         WHERE x.lease_token = i.token AND x.state = 'pending' ORDER BY x.id FOR UPDATE"
    )))
    .bind(rows)
    .fetch_all(&mut *conn)
    .await
    .context("locking outbox messages")?;
    sql::query(sql::AssertSqlSafe(format!(
        "INSERT INTO attempts (operation_id, kind, attempt_no, provider_key, started_at_ms, duration_ms, \
         status_code, error_kind, classification, outcome, decision) \
         SELECT o.id, i.kind, o.attempts + CASE WHEN i.kind = 'call' THEN 1 ELSE 0 END, \
         CASE WHEN i.kind = 'call' THEN o.provider_key END, i.started_at_ms, i.duration_ms, i.status_code, \
         i.error_kind, i.classification, i.outcome, i.decision \
         FROM {ROWS} STRAIGHT_JOIN operations o FORCE INDEX (PRIMARY) ON o.id = i.operation_id WHERE i.kind IS NOT NULL ORDER BY i.n"
    )))
    .bind(rows)
    .execute(&mut *conn)
    .await
    .context("appending to the attempt history")?;
    sql::query(sql::AssertSqlSafe(format!(
        "UPDATE {ROWS} STRAIGHT_JOIN operations o FORCE INDEX (PRIMARY) ON o.id = i.operation_id SET o.attempts = o.attempts + 1, \
         o.effect_possible = CASE WHEN i.maybe_acted THEN 1 ELSE o.effect_possible END, \
         o.key_first_sent_at_ms = COALESCE(o.key_first_sent_at_ms, i.started_at_ms) WHERE i.kind = 'call'"
    )))
    .bind(rows)
    .execute(&mut *conn)
    .await
    .context("counting attempts")?;
    if moved.is_empty() {
        return Ok(Default::default());
    }
    let moved_ids = serde_json::to_string(&moved).unwrap_or_default();
    let held = "i.outbox_id IN (SELECT id FROM JSON_TABLE($3, '$[*]' COLUMNS (id BIGINT PATH '$')) AS m)";
    sql::query(sql::AssertSqlSafe(format!(
        "UPDATE {ROWS} STRAIGHT_JOIN outbox x FORCE INDEX (PRIMARY) ON x.id = i.outbox_id SET x.state = i.state, \
         x.available_at_ms = COALESCE(i.available_at_ms, x.available_at_ms), \
         x.previous_delay_ms = COALESCE(i.delay_ms, x.previous_delay_ms), x.last_error = i.error, \
         x.dead_at_ms = i.dead_at_ms, x.in_flight = 0, x.locked_until_ms = NULL, x.lease_token = NULL, \
         x.updated_at_ms = $2, x.attempts = x.attempts - i.given_back, x.changed_by = 'relay' WHERE {held}"
    )))
    .bind(rows)
    .bind(now_ms)
    .bind(moved_ids.as_str())
    .execute(&mut *conn)
    .await
    .context("completing outbox messages")?;
    sql::query(sql::AssertSqlSafe(format!(
        "UPDATE {ROWS} STRAIGHT_JOIN operations o FORCE INDEX (PRIMARY) ON o.id = i.operation_id SET o.status = i.status, \
         o.provider_ref = COALESCE(i.provider_ref, o.provider_ref), o.response = COALESCE(i.response, o.response), \
         o.last_error = i.op_error, o.next_reconcile_at_ms = i.reconcile_at_ms, \
         o.reconcile_attempts = CASE WHEN i.reconcile_at_ms IS NULL THEN o.reconcile_attempts ELSE 0 END, \
         o.updated_at_ms = $2, o.changed_by = 'relay' WHERE {held}"
    )))
    .bind(rows)
    .bind(now_ms)
    .bind(moved_ids.as_str())
    .execute(&mut *conn)
    .await
    .context("updating operations")?;
    // A delivered message leaves the outbox; its operation keeps the
    // outcome. It is `done` by now, so no purge is written for it.
    sql::query(sql::AssertSqlSafe(format!(
        "DELETE x FROM {ROWS} STRAIGHT_JOIN outbox x FORCE INDEX (PRIMARY) ON x.id = i.outbox_id \
         WHERE {held} AND i.leaves AND x.state = 'done'"
    )))
    .bind(rows)
    .bind(now_ms)
    .bind(moved_ids.as_str())
    .execute(&mut *conn)
    .await
    .context("deleting delivered messages")?;
    Ok(moved.into_iter().collect())
}
