//! The HTTP API's errors: RFC 9457 problem details
//! (`application/problem+json`) whose `type` is one of [`ProblemType`], as
//! the URI `urn:failwell:problem:SLUG`. Every type the API can send is
//! listed here, with the statuses it comes with and what it means;
//! `docs/PROBLEMS.md` is the same list for readers (a test holds them
//! equal).

use std::time::Duration;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use failwell_store::{StoreError, TransferRefusal};
use serde_json::json;

/// Declares [`ProblemType`]: each variant's slug, its statuses (the first
/// is the usual one) and its meaning.
macro_rules! problem_types {
    ($($variant:ident = $slug:literal, [$($status:ident),+], $meaning:literal;)+) => {
        /// Every kind of error the HTTP API answers with.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum ProblemType {
            $(
                #[doc = $meaning]
                $variant,
            )+
        }

        impl ProblemType {
            /// Every problem type, in the order `docs/PROBLEMS.md` lists them.
            pub const ALL: &'static [ProblemType] = &[$(ProblemType::$variant),+];

            /// The last part of the type URI, e.g. `missing-idempotency-key`.
            pub fn slug(self) -> &'static str {
                match self {
                    $(Self::$variant => $slug,)+
                }
            }

            /// The statuses it is sent with; the first is the usual one.
            pub fn statuses(self) -> &'static [StatusCode] {
                match self {
                    $(Self::$variant => &[$(StatusCode::$status),+],)+
                }
            }

            /// What it means, in one sentence.
            pub fn meaning(self) -> &'static str {
                match self {
                    $(Self::$variant => $meaning,)+
                }
            }
        }
    };
}

problem_types! {
    MissingIdempotencyKey = "missing-idempotency-key", [BAD_REQUEST],
        "The Idempotency-Key header is missing or blank.";
    InvalidIdempotencyKey = "invalid-idempotency-key", [BAD_REQUEST],
        "The Idempotency-Key is longer than 255 bytes, not visible ASCII, or given twice.";
    MalformedJson = "malformed-json", [BAD_REQUEST],
        "The body is not JSON.";
    UnreadableBody = "unreadable-body", [BAD_REQUEST],
        "The body could not be read.";
    InvalidBody = "invalid-body", [UNPROCESSABLE_ENTITY, BAD_REQUEST],
        "The body is not the request this route takes, or a payload failwell could not store and read back.";
    InvalidPath = "invalid-path", [BAD_REQUEST],
        "A path parameter is not of its type (e.g. an id that is not a number).";
    InvalidQuery = "invalid-query", [BAD_REQUEST],
        "A query parameter is unknown or out of its range.";
    InvalidRequest = "invalid-request", [BAD_REQUEST],
        "The admin request is not one failwell takes.";
    UnsupportedMediaType = "unsupported-media-type", [UNSUPPORTED_MEDIA_TYPE],
        "The body is not sent as application/json.";
    BodyTooLarge = "body-too-large", [PAYLOAD_TOO_LARGE],
        "The body exceeds the route's limit.";
    NotFound = "not-found", [NOT_FOUND],
        "No such route, or no such stored event.";
    MethodNotAllowed = "method-not-allowed", [METHOD_NOT_ALLOWED],
        "The route does not take this method.";
    OperationNotFound = "operation-not-found", [NOT_FOUND],
        "No operation has this idempotency key.";
    UnknownProvider = "unknown-provider", [UNPROCESSABLE_ENTITY, NOT_FOUND],
        "The provider is not configured (404 in a /v1/read path).";
    UnknownOperation = "unknown-operation", [UNPROCESSABLE_ENTITY, NOT_FOUND],
        "The provider has no such operation (404 in a /v1/read path).";
    ReadOperation = "read-operation", [UNPROCESSABLE_ENTITY],
        "A read was submitted for queueing: reads are answered at once at /v1/read.";
    NotARead = "not-a-read", [UNPROCESSABLE_ENTITY],
        "A write was asked at /v1/read: writes are submitted at /v1/operations.";
    InvalidReference = "invalid-reference", [UNPROCESSABLE_ENTITY],
        "The payload's reference field is missing, blank, longer than 255 bytes, or not a string or integer.";
    ReferenceReused = "reference-reused", [UNPROCESSABLE_ENTITY],
        "Another operation of the provider holds this reference.";
    IdempotencyKeyReused = "idempotency-key-reused", [UNPROCESSABLE_ENTITY],
        "The idempotency key was already used with a different request.";
    ProviderUnavailable = "provider-unavailable", [SERVICE_UNAVAILABLE],
        "The operation's manifest says to refuse while the provider is unavailable (with Retry-After).";
    StoreUnavailable = "store-unavailable", [SERVICE_UNAVAILABLE],
        "The database did not answer; nothing was written (try again).";
    Overloaded = "overloaded", [SERVICE_UNAVAILABLE],
        "The API's bulkhead is full (with Retry-After).";
    RequestTimeout = "request-timeout", [SERVICE_UNAVAILABLE],
        "The request took longer than api.request_timeout_ms; resubmit with the same key (with Retry-After).";
    MetricsUnavailable = "metrics-unavailable", [SERVICE_UNAVAILABLE],
        "Another metrics recorder was installed in this process first.";
    UnknownIntegration = "unknown-integration", [NOT_FOUND],
        "No webhook integration has this name.";
    MissingSignatureHeader = "missing-signature-header", [BAD_REQUEST],
        "The webhook's signature header is missing.";
    MalformedSignatureHeader = "malformed-signature-header", [BAD_REQUEST],
        "The webhook's signature header is not in the scheme's format.";
    InvalidSignature = "invalid-signature", [UNAUTHORIZED],
        "No active secret signs this webhook's body.";
    StaleTimestamp = "stale-timestamp", [UNAUTHORIZED],
        "The webhook's signed timestamp is older than the tolerance.";
    FutureTimestamp = "future-timestamp", [UNAUTHORIZED],
        "The webhook's signed timestamp is later than the tolerance.";
    MissingEventId = "missing-event-id", [BAD_REQUEST],
        "The webhook has no event id where its integration says (or its body is not JSON).";
    InvalidEventId = "invalid-event-id", [BAD_REQUEST],
        "The webhook's event id is empty, longer than 255 bytes or not visible ASCII.";
    AdminDisabled = "admin-disabled", [NOT_FOUND],
        "The admin API and the dashboard are off: no [admin] token is configured.";
    Unauthorized = "unauthorized", [UNAUTHORIZED],
        "The admin API needs the bearer token.";
    NotComparable = "not-comparable", [BAD_REQUEST],
        "The provider has no [providers.NAME.compare] to reconcile against.";
    ProviderListFailed = "provider-list-failed", [BAD_GATEWAY],
        "The provider's records could not be read for a comparison.";
    NotADeadLetter = "not-a-dead-letter", [NOT_FOUND],
        "No dead letter has this kind and id.";
    OperationNotOpen = "operation-not-open", [CONFLICT],
        "Only unknown and needs_human operations are resolved by hand.";
    ReportNotFound = "report-not-found", [NOT_FOUND],
        "No comparison report has this id.";
    InvalidAccount = "invalid-account", [UNPROCESSABLE_ENTITY],
        "A ledger account's id (1–255 bytes) or unit (1–16 bytes) is not printable ASCII without spaces.";
    AccountExists = "account-exists", [CONFLICT],
        "The ledger account exists with another unit or floor.";
    UnknownAccount = "unknown-account", [UNPROCESSABLE_ENTITY, NOT_FOUND],
        "No ledger account has this id (404 in a /v1/ledger/accounts path).";
    UnknownTransfer = "unknown-transfer", [NOT_FOUND],
        "No ledger transfer has this id.";
    InsufficientFunds = "insufficient-funds", [UNPROCESSABLE_ENTITY],
        "The debit would take the account's available balance below its floor.";
    UnitMismatch = "unit-mismatch", [UNPROCESSABLE_ENTITY],
        "The transfer's two accounts have different units.";
    InvalidTransfer = "invalid-transfer", [UNPROCESSABLE_ENTITY],
        "The transfer breaks a rule of the ledger (an amount not positive, one account on both sides, a timeout on a transfer that is not a hold, a post over the hold, an overflow).";
    TransferIdReused = "transfer-id-reused", [CONFLICT],
        "The transfer id was already used with different content.";
    HoldEnded = "hold-ended", [CONFLICT],
        "The hold ended otherwise already; or a dead letter's hold ended, so replaying it would take effect without it.";
    HoldTied = "hold-tied", [CONFLICT],
        "The hold is tied to an operation, whose outcome posts or voids it.";
}

impl ProblemType {
    /// The `type` URI: `urn:failwell:problem:SLUG`.
    pub fn uri(self) -> String {
        format!("urn:failwell:problem:{}", self.slug())
    }
}

/// An RFC 9457 problem response.
#[derive(Debug)]
pub struct Problem {
    kind: ProblemType,
    status: StatusCode,
    detail: String,
}

impl Problem {
    /// A problem of `kind` with its usual status.
    pub(crate) fn new(kind: ProblemType, detail: impl Into<String>) -> Self {
        Self { kind, status: kind.statuses()[0], detail: detail.into() }
    }

    /// A problem of `kind` with `status`, one of [`ProblemType::statuses`]
    /// (the usual one otherwise).
    pub(crate) fn with_status(kind: ProblemType, status: StatusCode, detail: impl Into<String>) -> Self {
        let status = if kind.statuses().contains(&status) { status } else { kind.statuses()[0] };
        Self { kind, status, detail: detail.into() }
    }

    /// 503 `provider-unavailable` with `Retry-After: secs`; `detail` gets
    /// the whole seconds to wait (at least 1, rounded up from `wait`).
    pub(crate) fn provider_unavailable(wait: Duration, detail: impl FnOnce(u64) -> String) -> Response {
        let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
        Self::new(ProblemType::ProviderUnavailable, detail(secs)).with_retry_after(secs)
    }

    /// A refused ledger transfer (or hold): the problem type its
    /// [`failwell_engine::ledger::refusal_reason`] names, with its usual
    /// status, the refusal's own words as the detail.
    pub(crate) fn refused(reason: &TransferRefusal) -> Self {
        let slug = failwell_engine::ledger::refusal_reason(reason);
        let kind = ProblemType::ALL
            .iter()
            .copied()
            .find(|t| t.slug() == slug)
            .unwrap_or(ProblemType::InvalidTransfer);
        Problem::new(kind, format!("{reason}."))
    }

    /// The problem's JSON body: `type`, `title`, `status`, `detail`.
    pub(crate) fn body(&self) -> serde_json::Value {
        json!({
            "type": self.kind.uri(),
            "title": self.status.canonical_reason().unwrap_or("Error"),
            "status": self.status.as_u16(),
            "detail": self.detail,
        })
    }

    /// The problem's response with a `Retry-After` of `secs` seconds.
    pub(crate) fn with_retry_after(self, secs: u64) -> Response {
        let mut response = self.into_response();
        response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
        response
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = self.body().to_string();
        (self.status, [(header::CONTENT_TYPE, "application/problem+json")], body).into_response()
    }
}

/// A body that could not be read: 413 `body-too-large` past the route's
/// limit, else `unreadable-body`.
impl From<axum::extract::rejection::BytesRejection> for Problem {
    fn from(rejection: axum::extract::rejection::BytesRejection) -> Self {
        let kind = if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ProblemType::BodyTooLarge
        } else {
            ProblemType::UnreadableBody
        };
        Problem::new(kind, rejection.body_text())
    }
}

impl From<StoreError> for Problem {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::KeyReused { key } => Problem::new(
                ProblemType::IdempotencyKeyReused,
                format!("Idempotency-Key {key:?} was already used with a different request."),
            ),
            StoreError::ReferenceReused { reference } => Problem::new(
                ProblemType::ReferenceReused,
                format!(
                    "Reference {reference:?} already belongs to another operation of this provider: \
                     the provider's record could not be told apart from it."
                ),
            ),
            StoreError::InvalidPayload { reason } => {
                Problem::new(ProblemType::InvalidBody, format!("`payload` {reason}."))
            }
            StoreError::InvalidAccount(detail) => {
                Problem::new(ProblemType::InvalidAccount, format!("{detail}."))
            }
            StoreError::HoldRefused(reason) => {
                let refused = Problem::refused(&reason);
                Problem {
                    detail: format!("The hold was refused, nothing was recorded: {}", refused.detail),
                    ..refused
                }
            }
            e @ StoreError::HoldEnded { .. } => Problem::new(ProblemType::HoldEnded, format!("{e}.")),
            other => {
                tracing::error!(error = ?other, "store error");
                Problem::new(ProblemType::StoreUnavailable, "The store is unavailable; try again.")
            }
        }
    }
}

/// The answer to a method a route does not take (405).
pub(crate) async fn method_not_allowed() -> Problem {
    Problem::new(ProblemType::MethodNotAllowed, "This route does not take that method.")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::ProblemType;

    /// `docs/PROBLEMS.md` lists every problem type the API can send, with
    /// its statuses, and nothing else.
    #[test]
    fn the_docs_list_every_problem_type_with_its_statuses() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/PROBLEMS.md");
        let docs = std::fs::read_to_string(path).unwrap();
        let listed: BTreeMap<String, String> = docs
            .lines()
            .filter_map(|line| {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                let uri = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
                uri.starts_with("urn:failwell:problem:").then(|| (uri.to_string(), cells[2].to_string()))
            })
            .collect();
        let coded: BTreeMap<String, String> = ProblemType::ALL
            .iter()
            .map(|t| {
                let statuses: Vec<String> = t.statuses().iter().map(|s| s.as_u16().to_string()).collect();
                (t.uri(), statuses.join(", "))
            })
            .collect();
        assert_eq!(listed, coded);
    }
}
