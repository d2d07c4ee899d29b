//! Reading operations back from rows of either database, and the one
//! SELECT that does it.

use serde_json::Value;
use sqlx::Row;

use crate::error::{Context, StoreError};
use crate::{AttemptKind, AttemptRow, Claimed, Operation, OperationStatus};

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
    fn bytes_or_null(&self, column: &'static str) -> Result<Option<Vec<u8>>, StoreError>;
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
            fn bytes_or_null(&self, column: &'static str) -> Result<Option<Vec<u8>>, StoreError> {
                self.try_get(column).context("reading an operation")
            }
        }
    };
}

operation_row!(sqlx::sqlite::SqliteRow);
operation_row!(sqlx::postgres::PgRow);
operation_row!(sqlx::mysql::MySqlRow);

/// The count (of attempts, lookups) from which a stored value is damage:
/// far beyond any configured limit. PostgreSQL's claim no longer adds to a
/// message's attempts from here, so its checks (at most 2^31 - 1) hold.
pub(crate) const DAMAGED_COUNT: u32 = 1_000_000;

/// What could not be read of one row: the first column that failed and why
/// (`attempts: 9223372036854775807 is out of range`). A column that fails
/// reads as a stand-in, so the row is still shown and can be set aside.
#[derive(Default)]
pub(crate) struct Damage(Option<String>);

impl Damage {
    /// `read`'s value, or `stand_in` with the failure noted.
    pub(crate) fn or<T>(&mut self, column: &str, read: Result<T, String>, stand_in: T) -> T {
        read.unwrap_or_else(|why| {
            self.0.get_or_insert_with(|| format!("{column}: {why}"));
            stand_in
        })
    }

    /// The integer `column` as a `T` (a count or a duration), or `stand_in`
    /// with the failure noted.
    pub(crate) fn count<R: OperationRow, T: TryFrom<i64>>(
        &mut self,
        row: &R,
        column: &'static str,
        stand_in: T,
    ) -> T {
        let read = row
            .int(column)
            .map_err(|e| e.to_string())
            .and_then(|n| T::try_from(n).map_err(|_| format!("{n} is out of range")));
        self.or(column, read, stand_in)
    }

    /// The count `column` (attempts, lookups), or 0 with the failure noted
    /// under `label`:
    /// a count is damage from [`DAMAGED_COUNT`] on (no delivery gets near
    /// it), so a damaged row is set aside before anything adds to it.
    pub(crate) fn attempts<R: OperationRow>(&mut self, row: &R, column: &'static str, label: &str) -> u32 {
        let read = row.int(column).map_err(|e| e.to_string()).and_then(|n| {
            u32::try_from(n)
                .ok()
                .filter(|&n| n < DAMAGED_COUNT)
                .ok_or_else(|| format!("{n} is out of range (a count is below {DAMAGED_COUNT})"))
        });
        self.or(label, read, 0)
    }

    /// The first failure, if any.
    pub(crate) fn into_reason(self) -> Option<String> {
        self.0
    }
}

/// The stored JSON `text` of `column`, or the text as a JSON string with
/// why it cannot be read noted in `damage`.
fn parsed(damage: &mut Damage, column: &'static str, text: String) -> Value {
    let (value, error) = crate::outbox::stored::json_or_text(text);
    damage.or(column, error.map_or(Ok(()), |e| Err(e.to_string())), ());
    value
}

/// An operation from a row of [`select_operation`]'s columns. A column
/// that cannot be read (damaged by another program: text where a number
/// belongs, a number out of range, a status the schema does not know, JSON
/// that does not parse) does not fail the read: the operation comes back
/// with a stand-in for it and [`Operation::unreadable`] saying which column
/// and why (so one damaged row never fails a list or a claim of many).
/// Errors: only an `id` that cannot be read.
pub(crate) fn operation_from_row<R: OperationRow>(row: &R) -> Result<Operation, StoreError> {
    let id = row.int("id")?;
    let mut d = Damage::default();
    let text =
        |d: &mut Damage, c: &'static str| d.or(c, row.text(c).map_err(|e| e.to_string()), String::new());
    let text_or_null =
        |d: &mut Damage, c: &'static str| d.or(c, row.text_or_null(c).map_err(|e| e.to_string()), None);
    let time = |d: &mut Damage, c: &'static str| d.or(c, row.int(c).map_err(|e| e.to_string()), 0);
    let status = text(&mut d, "status");
    let status = d.or(
        "status",
        OperationStatus::parse(&status).ok_or_else(|| format!("{status:?} is not a status")),
        OperationStatus::Pending,
    );
    let payload = match row.text_or_null("payload") {
        // serde_json would read such a key as one of its own markers (a
        // number, a raw value): the payload would change on its way out.
        Ok(Some(text)) if let Some(key) = crate::outbox::stored::reserved_key_in(&text) => d.or(
            "payload",
            Err(format!("holds the key {key:?}, which serde_json reserves for itself")),
            Value::String(text),
        ),
        Ok(Some(text)) => parsed(&mut d, "payload", text),
        Ok(None) => Value::Null,
        // Not text (bytes that are not UTF-8, on SQLite): shown as the
        // stored bytes read lossily (U+FFFD for what is not UTF-8).
        Err(e) => {
            let stored = row.bytes_or_null("payload").ok().flatten();
            let shown =
                stored.map_or(Value::Null, |b| Value::String(String::from_utf8_lossy(&b).into_owned()));
            d.or("payload", Err(e.to_string()), shown)
        }
    };
    // Only an object is sent: its fields are the body, or the form.
    if let Some(why) = crate::outbox::stored::not_an_object(&payload) {
        d.or("payload", Err(why), ());
    }
    Ok(Operation {
        id,
        idempotency_key: text(&mut d, "idempotency_key"),
        provider: text(&mut d, "provider"),
        operation: text(&mut d, "operation"),
        reference: text_or_null(&mut d, "reference"),
        payload,
        status,
        key_group: d.count(row, "key_group", 0),
        provider_key: {
            let key = text(&mut d, "provider_key");
            d.or("provider_key", sendable_key(&key), ());
            key
        },
        key_first_sent_at_ms: d.or(
            "key_first_sent_at_ms",
            row.int_or_null("key_first_sent_at_ms").map_err(|e| e.to_string()),
            None,
        ),
        attempts: d.attempts(row, "attempts", "attempts"),
        provider_ref: text_or_null(&mut d, "provider_ref"),
        // A damaged response is shown as its text; only the other columns
        // decide whether the operation can be sent.
        response: row
            .text_or_null("response")
            .ok()
            .flatten()
            .map(|text| crate::outbox::stored::json_or_text(text).0),
        last_error: text_or_null(&mut d, "last_error"),
        dead_letter: d
            .or("dead_letter", row.flag_or_null("dead_letter").map_err(|e| e.to_string()), None)
            .unwrap_or(false),
        reconcile_attempts: d.attempts(row, "reconcile_attempts", "reconcile_attempts"),
        // A damaged flag counts as "a call may have acted": the careful side.
        effect_possible: d.count::<R, i64>(row, "effect_possible", 1) != 0,
        lookup_misses: d.attempts(row, "lookup_misses", "lookup_misses"),
        created_at_ms: time(&mut d, "created_at_ms"),
        delivery_started_at_ms: time(&mut d, "delivery_started_at_ms"),
        updated_at_ms: time(&mut d, "updated_at_ms"),
        unreadable: d.into_reason(),
    })
}

/// Whether `key` can go out as an idempotency header: an HTTP field value
/// (RFC 9110 §5.5) holds no control character, and an empty or blank key
/// would let a provider take every retry for a new request. A stored key
/// that fails is damage: its message is set aside, never sent (a request
/// that cannot be built says nothing about the provider, and must not
/// count against its breaker).
pub(crate) fn sendable_key(key: &str) -> Result<(), String> {
    if key.trim().is_empty() {
        return Err(format!("{key:?} is blank; an idempotency key needs a visible character"));
    }
    match key.chars().find(|c| c.is_control() && *c != '\t') {
        Some(c) => Err(format!("{key:?} holds the control character {c:?}, which no HTTP header can carry")),
        None => Ok(()),
    }
}

/// A claimed message from a row with its outbox columns (`attempts_column`
/// the message's attempts before this claim, `previous_delay_ms`,
/// `in_flight`) and its operation: damage in the message's columns is
/// noted on the operation like damage in its own, so the claim sets it
/// aside alone.
pub(crate) fn claimed_from_row<R: OperationRow>(
    row: &R,
    outbox_id: i64,
    attempts_column: &'static str,
    lease_token: i64,
    mut operation: Operation,
) -> Claimed {
    let mut d = Damage::default();
    let attempts = d.attempts(row, attempts_column, "attempts") + 1;
    let previous_delay_ms = d.count(row, "previous_delay_ms", 0);
    let interrupted = d.count::<R, i64>(row, "in_flight", 1) != 0;
    if operation.unreadable.is_none() {
        operation.unreadable = d.into_reason();
    }
    Claimed { outbox_id, lease_token, attempts, previous_delay_ms, interrupted, operation }
}

/// An attempt from a row of the attempt history (`kind, attempt_no,
/// provider_key, started_at_ms, duration_ms, status_code, error_kind,
/// classification, outcome, decision`). A column that cannot be read
/// (stored by an earlier version or behind failwell's back) reads as a
/// stand-in, and the decision ends with which column and why: the history
/// is shown whole, never a failed read.
pub(crate) fn attempt_from_row<R: OperationRow>(row: &R) -> AttemptRow {
    let mut d = Damage::default();
    let text =
        |d: &mut Damage, c: &'static str| d.or(c, row.text(c).map_err(|e| e.to_string()), String::new());
    let text_or_null =
        |d: &mut Damage, c: &'static str| d.or(c, row.text_or_null(c).map_err(|e| e.to_string()), None);
    let kind = match text(&mut d, "kind").as_str() {
        "call" => AttemptKind::Call,
        "lookup" => AttemptKind::Lookup,
        _ => AttemptKind::Skipped,
    };
    let status_code = row.int_or_null("status_code").map_err(|e| e.to_string()).and_then(|code| {
        code.map(|c| u16::try_from(c).map_err(|_| format!("{c} is out of range"))).transpose()
    });
    let mut attempt = AttemptRow {
        kind,
        attempt_no: d.count(row, "attempt_no", 0),
        provider_key: text_or_null(&mut d, "provider_key"),
        started_at_ms: d.count(row, "started_at_ms", 0),
        duration_ms: d.count(row, "duration_ms", 0),
        status_code: d.or("status_code", status_code, None),
        error_kind: text_or_null(&mut d, "error_kind"),
        classification: text_or_null(&mut d, "classification"),
        outcome: text(&mut d, "outcome"),
        decision: text(&mut d, "decision"),
    };
    if let Some(damage) = d.into_reason() {
        attempt.decision = format!("{} (stored {damage})", attempt.decision);
    }
    attempt
}
