//! Classify once: the one place that turns a failed attempt into
//! `Retryable`, `Permanent` or `Ambiguous`.
//!
//! Nothing else in failwell inspects status codes or error codes. The caller
//! reduces what it saw to an [`Observed`] (status, the provider's error code
//! found in the body, a parsed `Retry-After`, or a transport failure and
//! whether the request had been sent); this module applies the provider's
//! rules. It does not decide *whether* to retry (that is
//! [`crate::decision`]), and it does no parsing of bodies or headers.
//!
//! Two readings of the same rules:
//!
//! - [`Classifier::classify`] answers "may the provider have acted?" and is
//!   what the relay uses: an operation always carries an idempotency key, and
//!   [`crate::decision`] retries an ambiguous outcome under that same key.
//! - [`Classifier::classify_request`] answers "may a general HTTP client send
//!   this request again?": a *repeatable* request (an idempotent method per
//!   RFC 9110 §9.2.2, or one carrying an idempotency key, see
//!   [`is_repeatable`]) may be resent after an outcome that is merely
//!   ambiguous; any other request may not (DESIGN promise 1: a 502 from a
//!   load balancer may have reached the provider, so a non-idempotent write
//!   without a key is never retried blindly).
//!
//! Defaults (overrides by error code, then by status, win over both columns):
//!
//! | observed | `classify` | `classify_request`, repeatable | `classify_request`, not repeatable | [`Classifier::counts_as_outage`] |
//! |---|---|---|---|---|
//! | transport failure before sending (connect refused, DNS, TLS, connect timeout) | retryable | retryable | retryable | yes |
//! | transport failure after sending (timeout, reset) | ambiguous | retryable | ambiguous | yes |
//! | 408, 429, 503 | retryable | retryable | retryable | yes |
//! | 500, 502, 504, other 5xx | ambiguous | retryable | ambiguous | yes |
//! | 409 | ambiguous | ambiguous | ambiguous | no |
//! | other 4xx (400, 401, 402, 403, 404, 422, …) | permanent | permanent | permanent | no |
//! | any other status (1xx, 3xx, unexpected) | ambiguous | retryable | ambiguous | no |
//!
//! A classification of permanent never counts as an outage, whatever the
//! status (e.g. a 500 overridden to permanent, or `card_declined`).

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
/// error code, then a rule for the status, then the defaults of the module
/// table (see [`crate::classify`]).
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

    /// Classifies one failed attempt by whether the provider may have acted:
    /// 408, 429 and 503 retryable; 409, 500, 502, 504, other 5xx and any
    /// other status (a 3xx: failwell follows no redirect of a call)
    /// ambiguous; other 4xx permanent; a transport failure before sending
    /// retryable, after sending ambiguous. A `Retry-After` is kept on anything classified
    /// retryable.
    pub fn classify(&self, observed: Observed<'_>) -> Classification {
        let (class, retry_after) = match observed {
            Observed::Transport(TransportFailure::NotSent) => (Class::Retryable, None),
            Observed::Transport(TransportFailure::AfterSend) => (Class::Ambiguous, None),
            Observed::Response { status, error_code, retry_after } => {
                (self.rule(status, error_code).unwrap_or_else(|| default_class(status)), retry_after)
            }
        };
        verdict(class, retry_after)
    }

    /// Classifies one failed attempt of a general HTTP request. `repeatable`
    /// says whether sending the request twice has the effect of sending it
    /// once (see [`is_repeatable`]). A repeatable request is retryable
    /// wherever [`Classifier::classify`] would say ambiguous because the
    /// provider may have acted (a transport failure after sending, 500, 502,
    /// 504, other 5xx); a request that is not repeatable stays ambiguous
    /// there. 409 stays ambiguous either way (a conflict says the provider
    /// holds some state, not that resending is safe). Error-code and status
    /// overrides win unchanged. A `Retry-After` is kept on anything
    /// classified retryable.
    pub fn classify_request(&self, observed: Observed<'_>, repeatable: bool) -> Classification {
        let (class, retry_after) = match observed {
            Observed::Transport(TransportFailure::NotSent) => (Class::Retryable, None),
            Observed::Transport(TransportFailure::AfterSend) => (may_resend(repeatable), None),
            Observed::Response { status, error_code, retry_after } => {
                let class = self.rule(status, error_code).unwrap_or_else(|| match default_class(status) {
                    Class::Ambiguous if status != 409 => may_resend(repeatable),
                    class => class,
                });
                (class, retry_after)
            }
        };
        verdict(class, retry_after)
    }

    /// Whether a failed attempt says something about the provider's health,
    /// for a circuit breaker: transport failures (before or after sending),
    /// 5xx, 408 and 429 count; anything classified permanent (including by an
    /// override, e.g. `card_declined`, or a 500 configured as permanent), 409
    /// and other 4xx do not, since they are answers about the request.
    pub fn counts_as_outage(&self, observed: Observed<'_>) -> bool {
        match observed {
            Observed::Transport(_) => true,
            Observed::Response { status, .. } => {
                self.classify(observed) != Classification::Permanent
                    && matches!(status, 408 | 429 | 500..=599)
            }
        }
    }

    /// The configured rule for this error code, else for this status.
    fn rule(&self, status: u16, error_code: Option<&str>) -> Option<Class> {
        error_code.and_then(|c| self.codes.get(c)).or_else(|| self.statuses.get(&status)).copied()
    }
}

/// Whether a request may be sent again after an outcome the provider may
/// have acted on: its `method` is idempotent per RFC 9110 §9.2.2 (`GET`,
/// `HEAD`, `OPTIONS`, `TRACE`, `PUT`, `DELETE`; method names are
/// case-sensitive, RFC 9110 §9.1), or it carries an idempotency key the
/// provider deduplicates by (`has_idempotency_key`).
pub fn is_repeatable(method: &str, has_idempotency_key: bool) -> bool {
    has_idempotency_key || matches!(method, "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE")
}

/// Where the provider may have acted: resending is safe only for a
/// repeatable request.
fn may_resend(repeatable: bool) -> Class {
    if repeatable { Class::Retryable } else { Class::Ambiguous }
}

fn verdict(class: Class, retry_after: Option<Duration>) -> Classification {
    match class {
        Class::Retryable => Classification::Retryable { retry_after },
        Class::Permanent => Classification::Permanent,
        Class::Ambiguous => Classification::Ambiguous,
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
