//! Reading operations back from rows of either database, and the one
//! SELECT that does it.

use serde_json::Value;
use sqlx::Row;

use crate::error::{Context, StoreError};
use crate::model::{Operation, OperationStatus};

/// `SELECT` of every operation column (and its dead-letter flag), followed
/// by `$tail` (a `WHERE …` clause, in pieces).
macro_rules! select_operation {
    ($($tail:expr),+) => {
        concat!(
            "SELECT o.id, o.idempotency_key, o.provider, o.operation, o.reference, o.payload, o.status, ",
            "o.key_group, o.provider_key, o.key_first_sent_at_ms, o.attempts, o.provider_ref, o.response, ",
            "o.last_error, x.state = 'dead' AS dead_letter, o.reconcile_attempts, o.effect_possible, o.lookup_misses, o.created_at_ms, ",
            "COALESCE(o.replayed_at_ms, o.not_before_ms, o.created_at_ms) AS delivery_started_at_ms, o.updated_at_ms ",
            "FROM operations o LEFT JOIN outbox x ON x.operation_id = o.id ",
            $($tail),+
        )
    };
}

pub(crate) use select_operation;

/// The typed column reads [`operation_from_row`] needs, on a row of
/// either database (each decodes the same Rust types from its own column
/// types).
pub(crate) trait OperationRow {
    fn int(&self, column: &'static str) -> Result<i64, StoreError>;
    fn int_or_null(&self, column: &'static str) -> Result<Option<i64>, StoreError>;
    fn text(&self, column: &'static str) -> Result<String, StoreError>;
    fn text_or_null(&self, column: &'static str) -> Result<Option<String>, StoreError>;
    fn flag_or_null(&self, column: &'static str) -> Result<Option<bool>, StoreError>;
}

macro_rules! operation_row {
    ($row:ty) => {
        impl OperationRow for $row {
            fn int(&self, column: &'static str) -> Result<i64, StoreError> {
                self.try_get(column).context("reading an operation")
            }
            fn int_or_null(&self, column: &'static str) -> Result<Option<i64>, StoreError> {
                self.try_get(column).context("reading an operation")
            }
            fn text(&self, column: &'static str) -> Result<String, StoreError> {
                self.try_get(column).context("reading an operation")
            }
            fn text_or_null(&self, column: &'static str) -> Result<Option<String>, StoreError> {
                self.try_get(column).context("reading an operation")
            }
            fn flag_or_null(&self, column: &'static str) -> Result<Option<bool>, StoreError> {
                self.try_get(column).context("reading an operation")
            }
        }
    };
}

operation_row!(sqlx::sqlite::SqliteRow);
operation_row!(sqlx::postgres::PgRow);

/// The stored JSON of `column`, or its text as a JSON string and why it
/// cannot be read (`column: what serde_json says, with line and column`).
fn json_column<R: OperationRow>(
    row: &R,
    column: &'static str,
    unreadable: &mut Option<String>,
) -> Result<Option<Value>, StoreError> {
    Ok(row.text_or_null(column)?.map(|text| {
        let (value, error) = crate::stored::json_or_text(text);
        if let Some(e) = error {
            unreadable.get_or_insert_with(|| format!("{column}: {e}"));
        }
        value
    }))
}

/// An operation from a row of [`select_operation`]'s columns. A JSON
/// column that cannot be read does not fail the read: the operation comes
/// back with [`Operation::unreadable`] set (so one damaged row never fails
/// a list or a claim of many). Errors: a column missing or of another type,
/// a status outside the schema's own `CHECK`.
pub(crate) fn operation_from_row<R: OperationRow>(row: &R) -> Result<Operation, StoreError> {
    let get = |c: &'static str| row.int(c);
    let status = row.text("status")?;
    let mut unreadable = None;
    Ok(Operation {
        id: get("id")?,
        idempotency_key: row.text("idempotency_key")?,
        provider: row.text("provider")?,
        operation: row.text("operation")?,
        reference: row.text_or_null("reference")?,
        payload: json_column(row, "payload", &mut unreadable)?.unwrap_or(Value::Null),
        status: OperationStatus::parse(&status)
            .ok_or(StoreError::Corrupt { what: "status", detail: status.clone() })?,
        key_group: get("key_group")? as u32,
        provider_key: row.text("provider_key")?,
        key_first_sent_at_ms: row.int_or_null("key_first_sent_at_ms")?,
        attempts: get("attempts")? as u32,
        provider_ref: row.text_or_null("provider_ref")?,
        // A damaged response is shown as its text; only the payload decides
        // whether the operation can be sent.
        response: json_column(row, "response", &mut None)?,
        last_error: row.text_or_null("last_error")?,
        dead_letter: row.flag_or_null("dead_letter")?.unwrap_or(false),
        reconcile_attempts: get("reconcile_attempts")? as u32,
        effect_possible: get("effect_possible")? != 0,
        lookup_misses: get("lookup_misses")? as u32,
        created_at_ms: get("created_at_ms")?,
        delivery_started_at_ms: get("delivery_started_at_ms")?,
        updated_at_ms: get("updated_at_ms")?,
        unreadable,
    })
}
