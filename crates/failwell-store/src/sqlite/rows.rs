//! Reading operations back from rows, and the one SELECT that does it.

use serde_json::Value;
use sqlx::Row;
use sqlx::sqlite::{SqliteConnection, SqliteRow};

use crate::error::{Context, StoreError};
use crate::model::{Operation, OperationStatus};

/// `SELECT` of every operation column (and its dead-letter flag), followed
/// by `$tail` (a `WHERE …` clause).
macro_rules! select_operation {
    ($tail:literal) => {
        concat!(
            "SELECT o.id, o.idempotency_key, o.provider, o.operation, o.reference, o.payload, o.status, ",
            "o.key_group, o.provider_key, o.key_first_sent_at_ms, o.attempts, o.provider_ref, o.response, ",
            "o.last_error, x.state = 'dead' AS dead_letter, o.reconcile_attempts, o.effect_possible, o.lookup_misses, o.created_at_ms, ",
            "COALESCE(o.replayed_at_ms, o.created_at_ms) AS delivery_started_at_ms, o.updated_at_ms ",
            "FROM operations o LEFT JOIN outbox x ON x.operation_id = o.id ",
            $tail
        )
    };
}

pub(super) use select_operation;

pub(super) async fn operation_by_key(
    conn: &mut SqliteConnection,
    key: &str,
) -> Result<Option<Operation>, StoreError> {
    let row = sqlx::query(select_operation!("WHERE o.idempotency_key = ?1"))
        .bind(key)
        .fetch_optional(conn)
        .await
        .context("reading an operation")?;
    row.as_ref().map(operation_from_row).transpose()
}

fn json_column(row: &SqliteRow, column: &'static str) -> Result<Option<Value>, StoreError> {
    let text: Option<String> = row.try_get(column).context("reading a JSON column")?;
    text.map(|t| serde_json::from_str(&t))
        .transpose()
        .map_err(|e| StoreError::Corrupt { what: column, detail: e.to_string() })
}

pub(super) fn operation_from_row(row: &SqliteRow) -> Result<Operation, StoreError> {
    let get = |c: &'static str| -> Result<i64, StoreError> { row.try_get(c).context("reading an operation") };
    let status: String = row.try_get("status").context("reading an operation")?;
    Ok(Operation {
        id: get("id")?,
        idempotency_key: row.try_get("idempotency_key").context("reading an operation")?,
        provider: row.try_get("provider").context("reading an operation")?,
        operation: row.try_get("operation").context("reading an operation")?,
        reference: row.try_get("reference").context("reading an operation")?,
        payload: json_column(row, "payload")?.unwrap_or(Value::Null),
        status: OperationStatus::parse(&status)
            .ok_or(StoreError::Corrupt { what: "status", detail: status.clone() })?,
        key_group: get("key_group")? as u32,
        provider_key: row.try_get("provider_key").context("reading an operation")?,
        key_first_sent_at_ms: row.try_get("key_first_sent_at_ms").context("reading an operation")?,
        attempts: get("attempts")? as u32,
        provider_ref: row.try_get("provider_ref").context("reading an operation")?,
        response: json_column(row, "response")?,
        last_error: row.try_get("last_error").context("reading an operation")?,
        dead_letter: row
            .try_get::<Option<bool>, _>("dead_letter")
            .context("reading an operation")?
            .unwrap_or(false),
        reconcile_attempts: get("reconcile_attempts")? as u32,
        effect_possible: get("effect_possible")? != 0,
        lookup_misses: get("lookup_misses")? as u32,
        created_at_ms: get("created_at_ms")?,
        delivery_started_at_ms: get("delivery_started_at_ms")?,
        updated_at_ms: get("updated_at_ms")?,
    })
}
