//! The inbox's data types: events as received, stored and forwarded.

use failwell_policy::{NotApplicable, Reported};
use serde::Serialize;

/// A webhook delivery whose signature verified, to be stored before
/// anything else happens to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewEvent {
    /// The integration (webhook source) it came for.
    pub integration: String,
    /// The provider's event id: the deduplication key with `integration`.
    pub event_id: String,
    /// The request body, byte for byte.
    pub payload: Vec<u8>,
    /// The headers of interest, as a JSON object of strings.
    pub headers: serde_json::Value,
    /// What the event says about one of our operations, applied in the
    /// transaction that stores the event: `None` when the integration does
    /// not map its events to the ledger, `Some(Err(why))` when it does but
    /// this event reports nothing it can apply (recorded as not applicable).
    pub report: Option<Result<EventReport, NotApplicable>>,
    /// Whether to forward the event to the application (a forward is
    /// created in the transaction that stores the event).
    pub forward: bool,
}

/// What an event reports about the provider's object behind one of our
/// operations, read from the event by the integration's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventReport {
    /// The provider our operation went to.
    pub provider: String,
    /// Our reference of the operation, as the event carries it.
    pub reference: String,
    /// What the provider says.
    pub reported: Reported,
    /// The event's version (provider-side creation time or object
    /// version): only a newer event changes the operation.
    pub version: i64,
    /// The provider's id of the object (e.g. `ch_…`), kept on the operation
    /// when the event settles it and none is known yet.
    pub provider_ref: Option<String>,
}

/// A ledger step of an event, as the operation it was applied to sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct OperationEvent {
    /// The integration the event came for.
    pub integration: String,
    /// The provider's event id.
    pub event_id: String,
    /// What it did.
    #[serde(flatten)]
    pub step: EventStep,
}

/// What an event did to the operations ledger, as recorded in its history.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LedgerEffect {
    /// Settled an operation whose outcome was open (pending or unknown).
    Resolved,
    /// Settled an operation the other way than it was settled.
    Changed,
    /// Settled an operation the way it was settled already.
    Confirmed,
    /// Newer, in progress: the version was recorded, nothing else.
    Noted,
    /// Not newer than the event already applied.
    Stale,
    /// In progress while the operation is settled: never goes back.
    WouldRegress,
    /// Contradicts the provider's answer to failwell's own call, with no
    /// event applied since to order them: left for reconciliation.
    Conflict,
    /// No operation of the provider has the reference.
    NoOperation,
    /// The event does not report on an operation (its fields are missing
    /// or its status is not mapped).
    NotApplicable,
}

impl LedgerEffect {
    /// The stable lower-case name used in SQL and JSON.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Resolved => "resolved",
            Self::Changed => "changed",
            Self::Confirmed => "confirmed",
            Self::Noted => "noted",
            Self::Stale => "stale",
            Self::WouldRegress => "would_regress",
            Self::Conflict => "conflict",
            Self::NoOperation => "no_operation",
            Self::NotApplicable => "not_applicable",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        [
            Self::Resolved,
            Self::Changed,
            Self::Confirmed,
            Self::Noted,
            Self::Stale,
            Self::WouldRegress,
            Self::Conflict,
            Self::NoOperation,
            Self::NotApplicable,
        ]
        .into_iter()
        .find(|e| e.as_str() == s)
    }
}

/// A stored webhook event, as the feed hands it out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredEvent {
    /// Its place in the order of first receipt (the feed's cursor).
    pub seq: i64,
    /// The integration it came for.
    pub integration: String,
    /// The provider's event id.
    pub event_id: String,
    /// The request body, byte for byte.
    pub payload: Vec<u8>,
    /// The headers kept with it (a JSON object).
    pub headers: serde_json::Value,
    /// When it was first received, ms since epoch.
    pub received_at_ms: i64,
}

/// What storing a webhook event did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Received {
    /// First delivery: stored.
    New,
    /// Already stored: nothing was written (the system working, not an error).
    Duplicate,
}

/// One step in an event's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct EventStep {
    /// `ledger` (what the event did to an operation) or `forward` (an
    /// attempt to deliver it to the application).
    pub kind: String,
    /// When, ms since epoch.
    pub at_ms: i64,
    /// How long (forwarding attempts), in ms.
    pub duration_ms: Option<u64>,
    /// The application's HTTP status (forwarding attempts).
    pub status_code: Option<u16>,
    /// The operation the event was applied to (ledger steps).
    pub operation_id: Option<i64>,
    /// What the event did to the ledger (ledger steps).
    pub effect: Option<LedgerEffect>,
    /// What happened, in words.
    pub detail: String,
}

impl EventStep {
    /// A step of `kind` at `at_ms` (ms since epoch) described by `detail`,
    /// with no other facts.
    pub fn new(kind: &str, at_ms: i64, detail: String) -> Self {
        Self {
            kind: kind.to_owned(),
            at_ms,
            duration_ms: None,
            status_code: None,
            operation_id: None,
            effect: None,
            detail,
        }
    }
}

/// A stored event with its processing: history and forwarding state.
#[derive(Clone, Debug, PartialEq)]
pub struct EventRecord {
    /// The event as stored.
    pub event: StoredEvent,
    /// Its history, oldest first.
    pub steps: Vec<EventStep>,
    /// Its forwarding: `pending`, `done` or `dead` (`None`: not forwarded).
    pub forward_state: Option<String>,
    /// Forwarding attempts made.
    pub forward_attempts: u32,
    /// Why the last attempt failed or was deferred.
    pub forward_last_error: Option<String>,
    /// When the next attempt is due (pending forwards), ms since epoch.
    pub forward_due_at_ms: Option<i64>,
}

/// An event claimed for forwarding to the application, under a lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimedForward {
    /// The forward's id.
    pub id: i64,
    /// The claim's lease token: its completion applies only while the
    /// forward still carries it.
    pub lease_token: i64,
    /// Attempts including the one about to be made (≥ 1).
    pub attempts: u32,
    /// The delay chosen before this attempt, in ms (decorrelated jitter).
    pub previous_delay_ms: u64,
    /// The event to forward.
    pub event: StoredEvent,
}

/// What follows a forwarding attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForwardTransition {
    /// The application took it (2xx).
    Delivered,
    /// Try again at `available_at_ms`.
    Retry {
        /// Next attempt, ms since epoch.
        available_at_ms: i64,
        /// The delay chosen, in ms.
        delay_ms: u64,
        /// What went wrong.
        error: String,
    },
    /// Not attempted (the endpoint's breaker is open or its bulkhead full):
    /// try at `available_at_ms`, the attempt given back.
    Defer {
        /// Next attempt, ms since epoch.
        available_at_ms: i64,
        /// Why.
        reason: String,
    },
    /// Given up: a dead letter.
    DeadLetter {
        /// The last error.
        error: String,
    },
}

/// A forwarding attempt's record and what follows, for
/// [`crate::InboxStore::complete_forwards`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardCompletion {
    /// The forward.
    pub id: i64,
    /// The claim's lease token.
    pub lease_token: i64,
    /// The event's sequence number.
    pub event_seq: i64,
    /// The attempt's history step (`None` when no attempt was made).
    pub step: Option<EventStep>,
    /// What follows.
    pub transition: ForwardTransition,
}
