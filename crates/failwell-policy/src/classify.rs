//! Classify once: the one place that turns a failed attempt into
//! `Retryable`, `Permanent` or `Ambiguous`.
//!
//! Nothing else in failwell inspects status codes or error codes. The caller
//! reduces what it saw to an [`Observed`] (status, the provider's error code
//! found in the body, a parsed `Retry-After`, or a transport failure and
//! whether the request had been sent); this module applies the provider's
//! rules. It does not decide *whether* to retry (that is
//! [`crate::decision`]), and it does no parsing of bodies or headers.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

/// How a failed attempt is to be treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Classification {
    /// The provider certainly did not act; trying again is safe. Carries the
    /// provider's `Retry-After`, if it sent one.
    Retryable {
        /// Minimum wait the provider asked for.
        retry_after: Option<Duration>,
    },
    /// The provider refused for good (400, 422, declined card): never retry.
    Permanent,
    /// The provider may or may not have acted (timeout or reset after the
    /// request was sent, 500, 502, 504, 409). Retried only with the same
    /// idempotency key, or after a status lookup says it did not happen.
    Ambiguous,
}

impl Classification {
    /// The stable lower-case name stored in history rows and metrics:
    /// `retryable`, `permanent` or `ambiguous`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Retryable { .. } => "retryable",
            Self::Permanent => "permanent",
            Self::Ambiguous => "ambiguous",
        }
    }
}

/// A rule's verdict in configuration: the classification without its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// See [`Classification::Retryable`].
    Retryable,
    /// See [`Classification::Permanent`].
    Permanent,
    /// See [`Classification::Ambiguous`].
    Ambiguous,
}

/// A transport-level failure, reduced to what matters for safety: whether
/// the provider can have received the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportFailure {
    /// The request was never sent: connection refused, DNS failure, TLS
    /// handshake failure, connect timeout.
    NotSent,
    /// The request was (or may have been) sent and no complete response came
    /// back: timeout, connection reset, connection closed mid-response.
    AfterSend,
}

/// What one attempt produced, as far as classification needs to know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observed<'a> {
    /// The provider answered with a non-2xx status.
    Response {
        /// HTTP status code.
        status: u16,
        /// The provider's error code from the body (e.g. `card_declined`).
        error_code: Option<&'a str>,
        /// The parsed `Retry-After` header.
        retry_after: Option<Duration>,
    },
    /// No response arrived.
    Transport(TransportFailure),
}

/// Per-provider classification rules. Precedence: a rule for the provider's
/// error code, then a rule for the status, then the defaults:
///
/// | status | class |
/// |---|---|
/// | 408, 429, 503 | retryable (the provider says it did not act) |
/// | 409, 500, 502, 504, other 5xx | ambiguous (it may have acted; DESIGN promise 1) |
/// | other 4xx (400, 401, 402, 403, 404, 422, …) | permanent |
///
/// and a transport failure before sending is retryable, after sending ambiguous.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Classifier {
    statuses: BTreeMap<u16, Class>,
    codes: BTreeMap<String, Class>,
}

impl Classifier {
    /// Builds a classifier from per-status and per-error-code overrides.
    pub fn new(statuses: BTreeMap<u16, Class>, codes: BTreeMap<String, Class>) -> Self {
        Self { statuses, codes }
    }

    /// Classifies one failed attempt. A `Retry-After` is kept on anything
    /// classified retryable.
    pub fn classify(&self, observed: Observed<'_>) -> Classification {
        let (class, retry_after) = match observed {
            Observed::Transport(TransportFailure::NotSent) => (Class::Retryable, None),
            Observed::Transport(TransportFailure::AfterSend) => (Class::Ambiguous, None),
            Observed::Response { status, error_code, retry_after } => {
                let by_code = error_code.and_then(|c| self.codes.get(c)).copied();
                let class = by_code
                    .or_else(|| self.statuses.get(&status).copied())
                    .unwrap_or_else(|| default_class(status));
                (class, retry_after)
            }
        };
        match class {
            Class::Retryable => Classification::Retryable { retry_after },
            Class::Permanent => Classification::Permanent,
            Class::Ambiguous => Classification::Ambiguous,
        }
    }
}

fn default_class(status: u16) -> Class {
    match status {
        408 | 429 | 503 => Class::Retryable,
        409 => Class::Ambiguous,
        400..=499 => Class::Permanent,
        // 500, 502, 504 and anything unexpected: the provider may have acted.
        _ => Class::Ambiguous,
    }
}

#[cfg(test)]
mod tests;
