//! The operator role: what operators read and do — counts, dead letters
//! (listed, replayed, purged, acknowledged), manual resolutions, the four
//! numbers per integration and an operation's history.
//!
//! The trait is [`OperatorStore`]; its statements, the same SQL on every
//! database, are in `statements.rs` (`operator_statements!`).

mod model;
pub(crate) mod rows;
pub(crate) mod statements;
pub(crate) mod stats;

pub use model::*;

use crate::Counts;
use crate::StoreError;

/// What operators read and do: counts, dead letters (listed, replayed,
/// purged, acknowledged), manual resolutions, the four numbers per
/// integration and an operation's history. What the operator commands, the
/// admin API and the dashboard need of a store.
#[async_trait::async_trait]
pub trait OperatorStore: Send + Sync {
    /// Operation and message counts by state.
    async fn counts(&self) -> Result<Counts, StoreError>;

    /// Dead letters of both kinds matching `filter`, newest first, at most
    /// `limit`.
    async fn dead_letters(&self, filter: DeadLetterFilter, limit: u32)
    -> Result<Vec<DeadLetter>, StoreError>;

    /// One dead letter, if `(kind, id)` is one.
    async fn dead_letter(&self, kind: DeadLetterKind, id: i64) -> Result<Option<DeadLetter>, StoreError>;

    /// Puts a dead letter back in its queue, due now, with its attempts
    /// counted afresh and (for a message) its operation `pending` again with
    /// its deadline counted from now; the idempotency key stays the same.
    /// Returns `false`, writing nothing, when `(kind, id)` is not a dead
    /// letter (never was, replayed or purged meanwhile).
    async fn replay(
        &self,
        kind: DeadLetterKind,
        id: i64,
        channel: Channel,
        now_ms: i64,
    ) -> Result<bool, StoreError>;

    /// Deletes a dead letter for good (its operation stays `failed`; the
    /// history keeps who purged it and when). `false` when `(kind, id)` is
    /// not a dead letter.
    async fn purge(
        &self,
        kind: DeadLetterKind,
        id: i64,
        channel: Channel,
        now_ms: i64,
    ) -> Result<bool, StoreError>;

    /// An operator settles an operation whose outcome failwell could not
    /// find out (`unknown` or `needs_human`) after checking with the
    /// provider: `succeeded` (with the provider's id, if known) or `failed`.
    /// The `note` goes into the operation's last error and its history,
    /// beside who did it. Nothing is changed for another status.
    async fn resolve(
        &self,
        idempotency_key: &str,
        outcome: failwell_policy::Outcome,
        provider_ref: Option<String>,
        note: String,
        channel: Channel,
        now_ms: i64,
    ) -> Result<ManualResolution, StoreError>;

    /// Records that an operator has looked at the dead letters: those given
    /// up until now no longer count as unacknowledged.
    async fn ack_dead_letters(&self, channel: Channel, now_ms: i64) -> Result<(), StoreError>;

    /// The four numbers of every integration (success ratio and p95 latency
    /// of the calls started in the last `window_ms`, open entries and the
    /// oldest one's age, dead letters since the last acknowledgement), with
    /// a row for each name in `known` even when it has nothing.
    async fn stats(&self, now_ms: i64, window_ms: u64, known: &[String]) -> Result<Stats, StoreError>;

    /// Everything that happened to one operation, oldest first: its state
    /// changes and its message's (with who made them), every attempt, what
    /// webhook events did, and the discrepancies reports found. A plain
    /// success's two changes (`message pending -> done`, `operation … ->
    /// succeeded`) come from its attempt row where the relay marked it
    /// (`attempts.settled_from`), at the attempt's end, right after it. Its
    /// creation (`operation created`, by whoever recorded it, at its
    /// `created_at_ms`) comes from the operation's `created_by` where that
    /// is set, and from a history row where it is not.
    async fn history(&self, operation_id: i64) -> Result<Vec<HistoryEntry>, StoreError>;
}

/// The status an operator's resolution gives an operation: `succeeded` or
/// `failed` (`unknown` is not something an operator can settle on).
pub(crate) fn resolved_status(outcome: failwell_policy::Outcome) -> Result<&'static str, StoreError> {
    match outcome {
        failwell_policy::Outcome::Succeeded => Ok("succeeded"),
        failwell_policy::Outcome::Failed => Ok("failed"),
        failwell_policy::Outcome::Unknown => {
            Err(StoreError::Corrupt { what: "resolution", detail: "unknown is not an outcome".into() })
        }
    }
}

/// Why an operation with status `current` (`None`: no such operation)
/// cannot be resolved by an operator, or `None` when it can (only
/// `unknown` and `needs_human` are open to it).
pub(crate) fn resolution_refused(current: Option<String>) -> Result<Option<ManualResolution>, StoreError> {
    let Some(current) = current else { return Ok(Some(ManualResolution::NotFound)) };
    if current == "unknown" || current == "needs_human" {
        return Ok(None);
    }
    let status = crate::OperationStatus::parse(&current)
        .ok_or(StoreError::Corrupt { what: "status", detail: current })?;
    Ok(Some(ManualResolution::NotOpen(status)))
}

/// What a resolution writes as the operation's last error (and so into its
/// history): who resolved it, and their note.
pub(crate) fn resolution_note(channel: Channel, note: &str) -> String {
    format!("resolved by {}: {note}", channel.actor())
}
