//! Reading the operator's views from rows of either database: the one
//! typed column read ([`OperatorRow`]) the comparison and alert rows use
//! too, and the dead-letter and history mappings.

use sqlx::{Decode, MySql, Postgres, Sqlite, Type};

use super::{DeadLetter, DeadLetterKind, HistoryEntry};
use serde_json::Value;

use crate::error::{Context, StoreError};

/// A Rust type every database decodes their own column types into (e.g.
/// `i64` from SQLite's INTEGER and PostgreSQL's `bigint`, `Vec<u8>` from
/// TEXT, BLOB or `bytea`).
pub(crate) trait Column:
    for<'r> Decode<'r, Sqlite>
    + Type<Sqlite>
    + for<'r> Decode<'r, Postgres>
    + Type<Postgres>
    + for<'r> Decode<'r, MySql>
    + Type<MySql>
{
}

impl<T> Column for T where
    T: for<'r> Decode<'r, Sqlite>
        + Type<Sqlite>
        + for<'r> Decode<'r, Postgres>
        + Type<Postgres>
        + for<'r> Decode<'r, MySql>
        + Type<MySql>
{
}

/// A row of either database, read by the shared `*_from_row` functions and
/// [`StatsBuilder`] below, so the mapping from columns to values is written
/// once whatever the backend's SQL looks like.
pub(crate) trait OperatorRow {
    /// The value of `column`, decoded as `T`.
    fn value<T: Column>(&self, column: &str) -> Result<T, sqlx::Error>;
}

macro_rules! operator_row {
    ($row:ty) => {
        impl OperatorRow for $row {
            fn value<T: Column>(&self, column: &str) -> Result<T, sqlx::Error> {
                sqlx::Row::try_get(self, column)
            }
        }
    };
}

operator_row!(sqlx::sqlite::SqliteRow);
operator_row!(sqlx::postgres::PgRow);
operator_row!(sqlx::mysql::MySqlRow);

/// The table a dead letter of `kind` lives in.
pub(crate) fn table(kind: DeadLetterKind) -> &'static str {
    match kind {
        DeadLetterKind::Message => "outbox",
        DeadLetterKind::Forward => "forwards",
    }
}

/// A dead letter from a row of the dead-letter relation of either store:
/// `kind, id, integration, key, operation, attempts, last_error,
/// dead_at_ms, created_at_ms, payload, json_payload`, where `payload` holds
/// the operation's request (JSON text, `json_payload` true) or the event's
/// body (any bytes, `json_payload` false). A column that cannot be read
/// (changed behind failwell's back, or the message's operation gone) reads
/// as a stand-in, and the last error ends with which column and why, so
/// one damaged dead letter is shown, never a failed list.
/// Errors: only a `kind` or `id` that cannot be read.
pub(crate) fn dead_letter_from_row<R: OperatorRow>(row: &R) -> Result<DeadLetter, StoreError> {
    const CONTEXT: &str = "reading a dead letter";
    let kind: String = row.value("kind").context(CONTEXT)?;
    let kind =
        DeadLetterKind::parse(&kind).ok_or(StoreError::Corrupt { what: "dead letter kind", detail: kind })?;
    let mut d = crate::outbox::rows::Damage::default();
    let read = |column: &'static str| row.value::<Option<i64>>(column).map_err(|e| e.to_string());
    let attempts = read("attempts").and_then(|n| {
        let n = n.unwrap_or_default();
        u32::try_from(n).map_err(|_| format!("{n} is out of range"))
    });
    let attempts = d.or("attempts", attempts, 0);
    // A dead letter always has both times: a missing one is damage, shown
    // as 0 (1970) with the reason, never a time that looks real.
    let time = |column: &'static str| read(column).and_then(|t| t.ok_or_else(|| "is NULL".to_string()));
    let dead_at_ms = d.or("dead_at_ms", time("dead_at_ms"), 0);
    let created_at_ms = d.or("created_at_ms", time("created_at_ms"), 0);
    let text = |d: &mut crate::outbox::rows::Damage, column: &'static str| {
        d.or(column, row.value::<Option<String>>(column).map_err(|e| e.to_string()), None)
    };
    let integration = text(&mut d, "integration").unwrap_or_default();
    let key = text(&mut d, "key").unwrap_or_default();
    let operation = text(&mut d, "operation");
    let last_error = text(&mut d, "last_error");
    let bytes = d.or("payload", row.value::<Option<Vec<u8>>>("payload").map_err(|e| e.to_string()), None);
    let payload = match bytes {
        None => Value::Null,
        // We wrote the request as JSON: anything else is damage, shown as
        // its text (the dead letter's last error says why it was set aside).
        Some(bytes) if row.value::<bool>("json_payload").unwrap_or(true) => {
            crate::outbox::stored::json_or_text(String::from_utf8_lossy(&bytes).into_owned()).0
        }
        // A webhook body is whatever the provider sent.
        Some(bytes) => serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned())),
    };
    let last_error = match (last_error, d.into_reason()) {
        (error, None) => error,
        (None, Some(damage)) => Some(format!("stored {damage}")),
        (Some(error), Some(damage)) => Some(format!("{error}; stored {damage}")),
    };
    Ok(DeadLetter {
        kind,
        id: row.value("id").context(CONTEXT)?,
        integration,
        key,
        operation,
        attempts,
        last_error,
        dead_at_ms,
        created_at_ms,
        payload,
    })
}

/// An entry of an operation's history from a row of either store's
/// history relation: `at_ms, subject, actor, change, detail`.
/// Text that is not UTF-8 is read as [`lossy_text`] does; a time that is
/// not an integer (written behind failwell's back) reads as 0, with the
/// damage named in `detail`, so one damaged row never hides the others.
pub(crate) fn history_entry_from_row<R: OperatorRow>(row: &R) -> Result<HistoryEntry, StoreError> {
    const CONTEXT: &str = "reading an operation's history";
    let text = |column| lossy_text(row, column).context(CONTEXT);
    let subject = text("subject")?.unwrap_or_default();
    let mut detail = text("detail")?;
    let at_ms = row.value::<i64>("at_ms").unwrap_or_else(|e| {
        let damage = format!("stored at_ms: {e}");
        detail = Some(detail.take().map_or_else(|| damage.clone(), |d| format!("{d}; {damage}")));
        0
    });
    Ok(HistoryEntry {
        at_ms,
        subject: match subject.as_str() {
            "operation" => "operation",
            "message" => "message",
            "forward" => "forward",
            "attempt" => "attempt",
            "event" => "event",
            _ => "report",
        },
        actor: text("actor")?.unwrap_or_default(),
        change: text("change")?.unwrap_or_default(),
        detail,
    })
}

/// The text `column` of a row (`None`: NULL). Text that is not UTF-8
/// (SQLite keeps whatever bytes another program wrote) is shown with U+FFFD
/// for what cannot be read, so one damaged row never fails a view of many.
pub(crate) fn lossy_text<R: OperatorRow>(row: &R, column: &str) -> Result<Option<String>, sqlx::Error> {
    row.value::<Option<String>>(column).or_else(|e| {
        row.value::<Option<Vec<u8>>>(column)
            .map(|bytes| bytes.map(|b| String::from_utf8_lossy(&b).into_owned()))
            .map_err(|_| e)
    })
}
