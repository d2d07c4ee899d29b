//! failwell's policy core: the pure decisions behind every provider call.
//!
//! Everything here is a function of (configuration, what was observed, now):
//! how a failed attempt is classified ([`classify`]), how long to wait before
//! the next one ([`backoff`], [`retry_after`]), which idempotency key an
//! intent carries ([`idempotency`]) and what to do after an attempt
//! ([`decision`]). This crate deliberately does no I/O: no sockets, no
//! database, no clock reads, no async runtime. Callers pass `now` and
//! randomness in, so every rule is tested as a plain table.

pub mod backoff;
pub mod classify;
pub mod decision;
pub mod idempotency;
pub mod outcome;
pub mod retry_after;

pub use backoff::{Backoff, BackoffError, Jitter};
pub use classify::{Class, Classification, Classifier, Observed, TransportFailure};
pub use decision::{
    Admission, AfterNotFound, Attempted, Decision, Due, NotFound, RetryPolicy, RetryPolicyError, admit,
    after_not_found, decide,
};
pub use idempotency::{IdempotencyPolicy, derive_key};
pub use outcome::Outcome;
pub use retry_after::parse_retry_after;
