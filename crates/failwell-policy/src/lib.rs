//! failwell's policy core: the decisions behind every provider call, and
//! the resilience policies that carry them out.
//!
//! The decisions are functions of (configuration, what was observed, now):
//! how a failed attempt is classified ([`classify`]), how long to wait before
//! the next one ([`backoff`], [`retry_after`]), which idempotency key an
//! intent carries ([`idempotency`]) and what to do after an attempt of
//! queued work ([`decision`]), and what a provider's webhook event does to
//! our record of an operation ([`ledger`]), where we and the provider
//! disagree over a time window ([`compare`]), which combinations of an
//! integration's written answers are refused ([`manifest`]), and what a
//! transfer or an operation's outcome does to internal balances
//! ([`balance`]). They do no I/O and read no
//! clock: callers pass `now` and randomness in, so every rule is tested as a
//! plain table.
//!
//! The stateful policies keep what a decision needs across calls: the
//! [`breaker`] (closed / open / half-open), the [`bulkhead`] (concurrency
//! limit), the retry [`budget`], the adaptive sending rate ([`throttle`])
//! and the [`deadline`] of a call. They read
//! tokio's clock ([`clock`]), so tests pause and advance time, and they do
//! no other I/O. [`layer`] makes each of them a `tower::Layer` and composes
//! them as a [`Policy`]; with the `reqwest` feature, it also offers the same
//! policy as `reqwest-middleware` middleware (`PolicyMiddleware`, classified
//! by `HttpClassifier`). failwell's relay and HTTP API use exactly these.

pub mod backoff;
pub mod balance;
pub mod breaker;
pub mod budget;
pub mod bulkhead;
pub mod classify;
pub mod clock;
pub mod compare;
pub mod deadline;
pub mod decision;
pub mod idempotency;
pub mod layer;
pub mod ledger;
pub mod manifest;
pub mod outcome;
pub mod retry_after;
pub mod throttle;

pub use backoff::{Backoff, BackoffError, Jitter};
pub use balance::{
    Applied, Balance, Delta, HoldAction, HoldState, Refused, Sides, end_hold, hold_after, transfer,
};
pub use breaker::{
    BreakerConfig, BreakerConfigError, BreakerOpen, BreakerState, BreakerStore, CallOutcome, CircuitBreaker,
    DynStore, InProcess, Permit, SlidingWindow, StateChange, Ticket, announce,
};
pub use budget::{RetryBudget, RetryBudgetConfig, RetryBudgetConfigError};
pub use bulkhead::{Bulkhead, BulkheadConfig, BulkheadConfigError, BulkheadFull, BulkheadPermit};
pub use classify::{Class, Classification, Classifier, Observed, TransportFailure, is_repeatable};
pub use compare::{Discrepancy, DiscrepancyKind, OurRecord, OurStatus, TheirRecord, TheirStatus, compare};
pub use deadline::{Deadline, DeadlineExceeded, Timeouts, TimeoutsError};
pub use decision::{
    Admission, AfterNotFound, Attempted, Decision, Due, NotFound, RetryPolicy, RetryPolicyError, admit,
    after_not_found, decide,
};
pub use idempotency::{IdempotencyPolicy, derive_key};
pub use layer::{Classify, ErrorsAreRetryable, Policy, PolicyError, PolicyService, Rejected, Retry, Step};
#[cfg(feature = "reqwest")]
pub use layer::{HttpClassifier, PolicyMiddleware};
pub use ledger::{EventEffect, Ledger, NotApplicable, Reported, apply_event};
pub use manifest::{
    Answer, Effective, KeyUse, Manifest, Offers, OnUnavailable, Reconcile, Refusal, RetryOwner, Severity,
};
pub use outcome::Outcome;
pub use retry_after::parse_retry_after;
pub use throttle::{
    AdaptiveRate, Observation, Throttle, ThrottleConfig, ThrottleConfigError, Throttled, Turn,
};
