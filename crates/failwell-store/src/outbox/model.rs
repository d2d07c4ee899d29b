//! The store's data types: what goes in, what comes out.

use failwell_policy::Outcome;
use serde::Serialize;
use serde_json::Value;

/// The state of an operation: pending until one of the three outcomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OperationStatus {
    /// Accepted and durable; delivery in progress or scheduled.
    Pending,
    /// The provider acted.
    Succeeded,
    /// The provider refused or certainly did not act (also the status of a
    /// dead-lettered operation).
    Failed,
    /// The provider may have acted; reconciliation will find out.
    Unknown,
    /// The outcome cannot be found out by failwell (the provider has no
    /// lookup, the operation no reference, or its manifest declares
    /// `disagreement.reconcile = "none"`), and it is never retried: a
    /// person decides. A webhook event that settles it still applies.
    NeedsHuman,
}

impl OperationStatus {
    /// The stable lower-case name used in SQL and JSON.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Unknown => "unknown",
            Self::NeedsHuman => "needs_human",
        }
    }

    /// Whether the operation has reached an end (`succeeded` or `failed`).
    pub fn is_terminal(&self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => Self::Pending,
            "succeeded" => Self::Succeeded,
            "failed" => Self::Failed,
            "unknown" => Self::Unknown,
            "needs_human" => Self::NeedsHuman,
            _ => return None,
        })
    }
}

impl From<Outcome> for OperationStatus {
    fn from(outcome: Outcome) -> Self {
        match outcome {
            Outcome::Succeeded => Self::Succeeded,
            Outcome::Failed => Self::Failed,
            Outcome::Unknown => Self::Unknown,
        }
    }
}

/// A new intent to record.
#[derive(Clone, Debug, PartialEq)]
pub struct NewOperation {
    /// The caller's idempotency key: one intent, one key (UNIQUE).
    pub idempotency_key: String,
    /// The provider's name in configuration.
    pub provider: String,
    /// The operation's name in the provider's configuration.
    pub operation: String,
    /// Our business reference (e.g. the order id), used for status lookups.
    pub reference: Option<String>,
    /// The request payload, as given by the caller.
    pub payload: Value,
    /// A hold made with the operation, in the same transaction, that its
    /// outcome posts or voids (`docs/LEDGER.md`).
    pub hold: Option<crate::NewHold>,
}

/// A recorded operation.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Operation {
    /// Database id.
    pub id: i64,
    /// The caller's idempotency key.
    pub idempotency_key: String,
    /// Provider name.
    pub provider: String,
    /// Operation name.
    pub operation: String,
    /// Business reference for status lookups.
    pub reference: Option<String>,
    /// Request payload, as stored: numbers as written, keys in their order.
    /// When the stored text cannot be read as JSON, that text as a JSON
    /// string, and [`Operation::unreadable`] says why.
    pub payload: Value,
    /// Current status.
    pub status: OperationStatus,
    /// Which key generation is in use (moves on only after a status lookup
    /// proved the previous key's requests had no effect).
    pub key_group: u32,
    /// The idempotency key sent to the provider (derived from the intent).
    pub provider_key: String,
    /// When the provider key was first sent (ms since the Unix epoch): the
    /// start of its first recorded call, or the claim of a call found
    /// interrupted; `None` while no call of the key is known to have left.
    pub key_first_sent_at_ms: Option<i64>,
    /// Provider calls made so far.
    pub attempts: u32,
    /// The provider's id for the effect (e.g. a charge id), once known.
    pub provider_ref: Option<String>,
    /// The provider's last response body, if JSON.
    pub response: Option<Value>,
    /// The last error, for failed, unknown and retrying operations.
    pub last_error: Option<String>,
    /// Whether the delivery was given up and parked as a dead letter.
    pub dead_letter: bool,
    /// Status lookups that failed so far (for the lookup backoff).
    pub reconcile_attempts: u32,
    /// A call under the current key group may have taken effect (an
    /// ambiguous or interrupted attempt): giving up then means `unknown`,
    /// never `failed`.
    pub effect_possible: bool,
    /// Status lookups in a row that found nothing.
    pub lookup_misses: u32,
    /// Creation time, ms since epoch.
    pub created_at_ms: i64,
    /// When the current delivery started, ms since epoch: the creation,
    /// or an operator's replay of its dead letter. Deadlines count from it.
    pub delivery_started_at_ms: i64,
    /// Last change, ms since epoch.
    pub updated_at_ms: i64,
    /// Why the stored payload cannot be read, with the place (e.g. `payload:
    /// recursion limit exceeded at line 1 column 129`); `None` for every
    /// operation failwell wrote. (A damaged `response` is shown as its text
    /// and decides nothing.) The
    /// relay never sends such an operation: its claim dead-letters the
    /// message alone and the others go on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
}

/// What [`crate::OutboxStore::submit`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum Submitted {
    /// A new operation was recorded.
    Created(Operation),
    /// The same request was submitted before; this is the stored operation.
    Replayed(Operation),
}

/// A queue whose items are claimed under leases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leased {
    /// Outbox messages (the relay).
    Outbox,
    /// Webhook forwards (the forwarder).
    Forwards,
}

impl Leased {
    /// The queue's table.
    pub(crate) fn table(self) -> &'static str {
        match self {
            Self::Outbox => "outbox",
            Self::Forwards => "forwards",
        }
    }
}

/// Which due outbox messages a claim may take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimScope {
    /// Every due message, oldest first.
    All,
    /// The due messages of these providers, taken in turns (each provider's
    /// oldest first, then the next provider's), so one provider's backlog
    /// never starves another. Other providers' messages stay where they
    /// are: nothing is written for them and no attempt is spent.
    Providers(Vec<String>),
    /// The due messages of providers *not* in this list (ones the
    /// configuration does not know), oldest first.
    Strays(Vec<String>),
}

/// An outbox message claimed for one attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct Claimed {
    /// Outbox message id.
    pub outbox_id: i64,
    /// The lease token every completion must present.
    pub lease_token: i64,
    /// Attempts made, including the one this claim is for (≥ 1).
    pub attempts: u32,
    /// The backoff delay chosen before this attempt, in ms.
    pub previous_delay_ms: u64,
    /// An earlier attempt was in flight when its lease expired (its worker
    /// crashed): its outcome is unknown.
    pub interrupted: bool,
    /// The operation, as claimed.
    pub operation: Operation,
}

/// What a history row records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttemptKind {
    /// A call that may have an effect.
    Call,
    /// A read-only status lookup (reconciliation).
    Lookup,
    /// An attempt that was due but deliberately not sent (the decision says
    /// why: an expired key, a passed deadline, an unknown provider).
    Skipped,
}

impl AttemptKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Call => "call",
            Self::Lookup => "lookup",
            Self::Skipped => "skipped",
        }
    }
}

/// One row of the append-only attempt history, as written.
#[derive(Clone, Debug, PartialEq)]
pub struct AttemptRecord {
    /// Call or lookup.
    pub kind: AttemptKind,
    /// Start, ms since epoch.
    pub started_at_ms: i64,
    /// Duration in ms.
    pub duration_ms: u64,
    /// HTTP status, when a response arrived.
    pub status_code: Option<u16>,
    /// Transport error kind (`connect`, `timeout`, `reset`, …) or provider
    /// error code, when there is one.
    pub error_kind: Option<String>,
    /// `retryable`, `permanent` or `ambiguous` for failed attempts.
    pub classification: Option<&'static str>,
    /// The attempt's own outcome.
    pub outcome: Outcome,
    /// What was decided, e.g. `retry in 412 ms` or `unknown: attempts exhausted`.
    pub decision: String,
}

impl AttemptRecord {
    /// Whether the call may have acted at the provider (an ambiguous or
    /// unknown outcome): its key group is marked until a lookup clears it.
    pub(crate) fn maybe_acted(&self) -> bool {
        self.kind == AttemptKind::Call
            && (self.classification == Some("ambiguous") || self.outcome == Outcome::Unknown)
    }
}

/// One row of the attempt history, as read back.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct AttemptRow {
    /// Call or lookup.
    pub kind: AttemptKind,
    /// Attempt number of the operation at that time.
    pub attempt_no: u32,
    /// The idempotency key that was sent, for calls.
    pub provider_key: Option<String>,
    /// Start, ms since epoch.
    pub started_at_ms: i64,
    /// Duration in ms.
    pub duration_ms: u64,
    /// HTTP status, when a response arrived.
    pub status_code: Option<u16>,
    /// Transport error kind or provider error code.
    pub error_kind: Option<String>,
    /// Classification of a failed attempt.
    pub classification: Option<String>,
    /// The attempt's outcome.
    pub outcome: String,
    /// What was decided.
    pub decision: String,
}

/// The state an attempt moves its operation and message to.
#[derive(Clone, Debug, PartialEq)]
pub enum Transition {
    /// The provider acted: operation `succeeded`, message done.
    Succeeded {
        /// The provider's id for the effect.
        provider_ref: Option<String>,
        /// The response body.
        response: Option<Value>,
    },
    /// The provider refused for good: operation `failed`, message done.
    Failed {
        /// Why.
        error: String,
        /// The response body.
        response: Option<Value>,
    },
    /// Try again later with the same key: message pending again.
    Retry {
        /// When the next attempt may start, ms since epoch.
        available_at_ms: i64,
        /// The delay chosen, in ms.
        delay_ms: u64,
        /// The error of this attempt.
        error: String,
    },
    /// Outcome unknown: operation `unknown`, message done, reconciliation due.
    Unknown {
        /// Why.
        error: String,
        /// First status lookup, ms since epoch.
        reconcile_at_ms: i64,
    },
    /// Given up without an effect: operation `failed`, message dead-lettered.
    DeadLetter {
        /// Why, with the last error.
        error: String,
    },
    /// Not sent, and the attempt not spent: an open circuit breaker or a
    /// full bulkhead. The message is pending again from `available_at_ms`
    /// with the attempt count it had before the claim; the operation stays
    /// pending with `reason` as its last error.
    Defer {
        /// When to try again, ms since epoch.
        available_at_ms: i64,
        /// Why, e.g. `circuit breaker "payments" is open, next probe in 800 ms`.
        reason: String,
    },
}

/// The result of one finished attempt, for [`crate::OutboxStore::complete`].
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    /// The claimed message.
    pub outbox_id: i64,
    /// The claim's lease token.
    pub lease_token: i64,
    /// The message's operation.
    pub operation_id: i64,
    /// The history row to append (`None` for a deferral: nothing was tried).
    pub attempt: Option<AttemptRecord>,
    /// What follows.
    pub transition: Transition,
}

/// The conclusion of a status lookup for an unknown operation.
#[derive(Clone, Debug, PartialEq)]
pub enum Resolution {
    /// The provider has a record: the operation ends with its status.
    Found {
        /// `Succeeded` or `Failed`.
        outcome: Outcome,
        /// The provider's id for it.
        provider_ref: Option<String>,
        /// The record.
        response: Option<Value>,
    },
    /// The provider has no record and attempts remain: deliver again under
    /// `key_group` (the same group while the old key is honoured).
    Requeue {
        /// The key group to use.
        key_group: u32,
        /// The idempotency key of that group.
        provider_key: String,
    },
    /// The provider has no record and nothing more may be tried.
    DeadLetter {
        /// Why.
        error: String,
    },
    /// The provider has no record yet, but a call may still be in flight
    /// there: stay unknown and look once more before delivering again.
    Confirm {
        /// Next lookup, ms since epoch.
        retry_at_ms: i64,
    },
    /// No lookup was made (the provider's breaker is open or its bulkhead
    /// full): stay unknown, look at `retry_at_ms`, count nothing.
    Postpone {
        /// Next lookup, ms since epoch.
        retry_at_ms: i64,
    },
    /// Nothing can find the outcome out (no lookup, no reference, or the
    /// manifest says `reconcile = "none"`): `needs_human`, never retried.
    NeedsHuman {
        /// Why.
        reason: String,
    },
    /// The lookup itself failed: stay unknown and look again later.
    Later {
        /// Next lookup, ms since epoch.
        retry_at_ms: i64,
        /// The lookup's error.
        error: String,
    },
}

/// A status lookup's record and conclusion, for [`crate::OutboxStore::reconcile`].
#[derive(Clone, Debug, PartialEq)]
pub struct Reconciled {
    /// The unknown operation.
    pub operation_id: i64,
    /// The lookup's history row (`None` when no lookup was made).
    pub attempt: Option<AttemptRecord>,
    /// What it concluded.
    pub resolution: Resolution,
}

/// Counts by state, for status pages and the demo.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Counts {
    /// Operations pending.
    pub pending: u64,
    /// Operations succeeded.
    pub succeeded: u64,
    /// Operations failed (dead letters included).
    pub failed: u64,
    /// Operations with unknown outcome.
    pub unknown: u64,
    /// Operations waiting for a person (`needs_human`).
    pub needs_human: u64,
    /// Outbox messages dead-lettered.
    pub dead_letters: u64,
    /// Provider calls made (history rows of kind `call`).
    pub attempts: u64,
    /// Webhook events received (each once, however many deliveries).
    pub inbox_events: u64,
    /// Operations an event settled while their outcome was open (pending
    /// or unknown).
    pub resolved_by_events: u64,
    /// Events waiting to be forwarded to the application.
    pub forwards_pending: u64,
    /// Events whose forwarding was given up (dead letters).
    pub forward_dead_letters: u64,
}

/// What recording a result did (a completion, a forward's result).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// The transition was applied (the claim's lease token still held).
    Applied,
    /// The claim's lease was taken over by a newer claim: only the history
    /// was written. A worker outlived its lease.
    LeaseLost,
    /// A webhook event settled the operation meanwhile: only the history was
    /// written, and the call's provider id kept (normal when a provider's
    /// event overtakes its answer).
    SettledElsewhere,
    /// A webhook event settled the operation the other way than the call's
    /// answer says: the operation is `unknown` again and a status lookup is
    /// due at once.
    Conflict,
}
