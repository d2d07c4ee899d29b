//! What operators see: dead letters, manual resolutions, the history of an
//! operation and the four numbers per integration.

use serde::Serialize;
use serde_json::Value;

/// Which queue a dead letter comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeadLetterKind {
    /// An outbox message: a call to a provider that was given up.
    Message,
    /// A webhook event's forward to the application that was given up.
    Forward,
}

impl DeadLetterKind {
    /// `message` or `forward`, as in URLs and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Message => "message",
            Self::Forward => "forward",
        }
    }

    /// Parses [`Self::as_str`]'s spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "message" => Some(Self::Message),
            "forward" => Some(Self::Forward),
            _ => None,
        }
    }
}

/// Who does something on an operator's behalf: recorded in the history as
/// `operator:<channel>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    /// `failwell` on the command line.
    Cli,
    /// The admin HTTP API.
    Api,
    /// The `/ui` dashboard.
    Ui,
}

impl Channel {
    /// `operator:cli`, `operator:api` or `operator:ui`.
    pub fn actor(self) -> &'static str {
        match self {
            Self::Cli => "operator:cli",
            Self::Api => "operator:api",
            Self::Ui => "operator:ui",
        }
    }
}

/// What an operator's [`crate::OperatorStore::resolve`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ManualResolution {
    /// The operation now has the status given.
    Resolved,
    /// No operation has the key.
    NotFound,
    /// The operation is not `unknown` or `needs_human` (it has this status):
    /// nothing was changed.
    NotOpen(crate::OperationStatus),
}

/// A dead letter: work given up after its attempts or deadline.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct DeadLetter {
    /// Message or forward.
    pub kind: DeadLetterKind,
    /// The outbox message's or forward's id.
    pub id: i64,
    /// The provider (messages) or webhook integration (forwards).
    pub integration: String,
    /// The operation's idempotency key (messages) or the provider's event
    /// id (forwards).
    pub key: String,
    /// The operation's name (messages only).
    pub operation: Option<String>,
    /// Attempts made.
    pub attempts: u32,
    /// The last error.
    pub last_error: Option<String>,
    /// When it was given up, ms since epoch.
    pub dead_at_ms: i64,
    /// When the work was created, ms since epoch.
    pub created_at_ms: i64,
    /// The payload: the operation's request (messages), or the event body
    /// (forwards; a JSON string when it is not JSON).
    pub payload: Value,
}

/// Which dead letters to list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeadLetterFilter {
    /// Only this kind.
    pub kind: Option<DeadLetterKind>,
    /// Only this provider or integration.
    pub integration: Option<String>,
    /// Only those given up after this moment (ms since epoch).
    pub since_ms: Option<i64>,
}

/// One entry of a subject's history: a state change or an attempt.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct HistoryEntry {
    /// When, ms since epoch.
    pub at_ms: i64,
    /// `operation`, `message`, `forward`, `attempt`, `event` or `report`.
    pub subject: &'static str,
    /// Who: `api`, `app`, `relay`, `reconciler`, `webhook`, `forwarder`,
    /// `comparison` or `operator:<channel>`.
    pub actor: String,
    /// What changed, e.g. `pending -> unknown`, `call 2: HTTP 500
    /// (retryable)`, or a ledger effect.
    pub change: String,
    /// Why, or the decision taken.
    pub detail: Option<String>,
}

/// The four numbers of one integration (a provider, or a webhook
/// integration's forwards), as of `now`.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct IntegrationStats {
    /// Provider or webhook integration name.
    pub integration: String,
    /// Calls that started within the window.
    pub calls: u64,
    /// Of those, calls the provider answered definitively (a success or a
    /// permanent refusal): the rest failed retryably or ambiguously.
    pub answered: u64,
    /// `answered / calls` (`None` without calls in the window).
    pub success_ratio: Option<f64>,
    /// 95th percentile of those calls' durations in ms, from an HDR
    /// histogram (3 significant digits); `None` without calls.
    pub p95_ms: Option<u64>,
    /// Open entries: outbox messages (or forwards) not yet delivered or
    /// given up.
    pub depth: u64,
    /// Age of the oldest open entry in ms (`None` when there is none).
    pub oldest_open_age_ms: Option<i64>,
    /// Operations whose outcome is unknown.
    pub unknown: u64,
    /// Operations waiting for a person (`needs_human`).
    pub needs_human: u64,
    /// Dead letters now.
    pub dead_letters: u64,
    /// Dead letters given up after the last acknowledgement.
    pub dead_letters_unacked: u64,
}

/// All integrations' numbers, and the window they were taken over.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Stats {
    /// When, ms since epoch.
    pub at_ms: i64,
    /// The success-rate and latency window, ms.
    pub window_ms: u64,
    /// The last `failwell dlq ack`, ms since epoch.
    pub last_ack_ms: Option<i64>,
    /// By integration name.
    pub integrations: Vec<IntegrationStats>,
}
