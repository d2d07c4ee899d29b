//! The policies as [`tower`] layers, and [`Policy`], which composes them.
//!
//! Each layer works alone with any service whose error type can hold a
//! [`Rejected`] (`E: From<Rejected>`, true of [`PolicyError`] and of
//! tower's `BoxError`). [`Policy`] stacks them in this order, outermost
//! first:
//!
//! 1. [`DeadlineLayer`]: the time budget of the whole call, all attempts
//!    and waits included;
//! 2. [`BulkheadLayer`]: a permit for the whole call, so a slow provider
//!    holds at most its own share of concurrency;
//! 3. [`BreakerLayer`]: rejects at once while the provider is known to be
//!    down; sees one outcome per call (after the retries);
//! 4. [`RetryLayer`]: retries retryable failures with backoff, within the
//!    retry budget and the deadline;
//! 5. [`TimeoutLayer`]: bounds each attempt by `min(attempt timeout, time
//!    left)`.
//!
//! Rejections are cheap and immediate: an open breaker or a full bulkhead
//! costs no attempt and no wait beyond the bulkhead's bound.
//!
//! Every decision is visible: tracing events (target `failwell_policy`) and
//! metrics `failwell_retries_total`, `failwell_retry_budget_exhausted_total`,
//! `failwell_breaker_transitions_total`, `failwell_breaker_state`,
//! `failwell_breaker_rejected_total`, `failwell_bulkhead_rejected_total`,
//! `failwell_deadline_exceeded_total`, `failwell_attempt_timeouts_total`.
//! Metric handles are registered when a policy is built, so install the
//! metrics recorder first.

mod breaker;
mod bulkhead;
mod deadline;
#[cfg(feature = "reqwest")]
mod http;
mod retry;
mod timeout;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

pub use breaker::{BreakerLayer, BreakerService};
pub use bulkhead::{BulkheadLayer, BulkheadService};
pub use deadline::{DeadlineLayer, DeadlineService};
#[cfg(feature = "reqwest")]
pub use http::{BodyTooLarge, HttpClassifier, PolicyMiddleware};
pub use retry::{Retry, RetryLayer, RetryService, Step};
pub use timeout::{TimeoutLayer, TimeoutService};
use tower::{Layer, Service};

use crate::{
    BreakerOpen, BreakerStore, Bulkhead, BulkheadFull, CallOutcome, CircuitBreaker, Classification,
    DeadlineExceeded, InProcess,
};

/// Why a failwell layer refused a call or cut it short.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    /// The circuit breaker is open.
    #[error(transparent)]
    BreakerOpen(#[from] BreakerOpen),
    /// The bulkhead is full.
    #[error(transparent)]
    BulkheadFull(#[from] BulkheadFull),
    /// The deadline cannot fit an attempt or a wait.
    #[error(transparent)]
    DeadlineExceeded(#[from] DeadlineExceeded),
    /// The provider's adaptive sending rate has no turn for the call within
    /// its longest wait ([`crate::Throttle`]).
    #[error(transparent)]
    Throttled(#[from] crate::Throttled),
    /// One attempt took longer than its timeout (the duration given).
    #[error("the attempt timed out after {} ms", .0.as_millis())]
    TimedOut(Duration),
}

/// The error of a service wrapped by [`Policy`]: a rejection by a policy,
/// or the service's own error `E`.
#[derive(Debug)]
pub enum PolicyError<E> {
    /// A policy refused or cut short the call.
    Rejected(Rejected),
    /// The service failed; with retries, this is the last attempt's error.
    Inner(E),
}

impl<E> From<Rejected> for PolicyError<E> {
    fn from(r: Rejected) -> Self {
        Self::Rejected(r)
    }
}

impl<E: fmt::Display> fmt::Display for PolicyError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Rejected(r) => r.fmt(f),
            Self::Inner(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for PolicyError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Rejected(r) => Some(r),
            Self::Inner(e) => Some(e),
        }
    }
}

/// Decides what a call's result means, for the retry layer
/// ([`classify`](Self::classify): `None` for success, else its
/// [`Classification`]; only retryable results are retried) and for the
/// breaker ([`breaker_outcome`](Self::breaker_outcome)).
pub trait Classify<Req, Res, E>: Send + Sync + 'static {
    /// The classification of `request`'s result (`None`: it succeeded).
    /// The request is given because safety depends on it: a timeout is
    /// retryable for an idempotent request and ambiguous for a payment.
    fn classify(&self, request: &Req, result: &Result<Res, E>) -> Option<Classification>;

    /// What the result means for a circuit breaker: only failures
    /// attributable to the provider are [`CallOutcome::Failure`]. The
    /// default counts every `Err` as one.
    fn breaker_outcome(&self, result: &Result<Res, E>) -> CallOutcome {
        match result {
            Ok(_) => CallOutcome::Success,
            Err(_) => CallOutcome::Failure,
        }
    }
}

/// The classifier for services with no better one: `Ok` is success, every
/// `Err` a retryable provider failure. Only right for calls that are safe to
/// repeat; a non-idempotent call needs a classifier that calls an error
/// after sending ambiguous (see `HttpClassifier`, feature `reqwest`).
#[derive(Clone, Copy, Debug, Default)]
pub struct ErrorsAreRetryable;

impl<Req, Res, E> Classify<Req, Res, E> for ErrorsAreRetryable {
    fn classify(&self, _: &Req, result: &Result<Res, E>) -> Option<Classification> {
        result.as_ref().err().map(|_| Classification::Retryable { retry_after: None })
    }
}

/// A per-clone handle: the layers keep their shared state behind an `Arc`
/// that each clone of a service allocates afresh, so the reference counting
/// done per call stays on a cache line of the calling thread. The allocation
/// is [`Padded`], so two clones never share a line.
pub(crate) struct Local<T>(Arc<Padded<T>>);

/// A value on cache lines of its own (128 bytes: CPUs fetch lines in
/// pairs), so that writes to it, such as an `Arc`'s reference count, do not
/// slow down threads using a neighbouring allocation.
#[repr(align(128))]
pub(crate) struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: Clone> Clone for Local<T> {
    fn clone(&self) -> Self {
        Self::new((**self).clone())
    }
}

impl<T> Local<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(Arc::new(Padded(value)))
    }

    /// A reference for a call's future.
    #[inline]
    pub(crate) fn share(&self) -> Arc<Padded<T>> {
        self.0.clone()
    }
}

impl<T> std::ops::Deref for Local<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.0.0
    }
}

/// Wraps a service's errors in [`PolicyError::Inner`]; the innermost layer
/// of a [`Policy`].
#[derive(Clone, Debug)]
pub struct IntoPolicyError<S> {
    inner: S,
}

impl<S, Req> Service<Req> for IntoPolicyError<S>
where
    S: Service<Req>,
{
    type Response = S::Response;
    type Error = PolicyError<S::Error>;
    type Future = IntoPolicyErrorFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(PolicyError::Inner)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        IntoPolicyErrorFuture { inner: self.inner.call(req) }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`IntoPolicyError`].
    #[derive(Debug)]
    pub struct IntoPolicyErrorFuture<F> {
        #[pin]
        inner: F,
    }
}

impl<F, T, E> Future for IntoPolicyErrorFuture<F>
where
    F: Future<Output = Result<T, E>>,
{
    type Output = Result<T, PolicyError<E>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx).map_err(PolicyError::Inner)
    }
}

/// The composed service: see [`Policy`].
pub type PolicyService<S, B, C> = DeadlineService<
    BulkheadService<BreakerService<RetryService<TimeoutService<IntoPolicyError<S>>, C>, B, C>>,
>;

/// The resilience policy of one integration, as one [`tower::Layer`]:
/// deadline → bulkhead → breaker → retry with budget → per-attempt timeout,
/// each optional (see the module docs for why this order).
///
/// ```
/// use std::time::Duration;
/// use failwell_policy::{Backoff, BreakerConfig, Bulkhead, BulkheadConfig, CircuitBreaker, Jitter, Policy, Retry};
///
/// let policy = Policy::new()
///     .deadline(Duration::from_secs(5))
///     .bulkhead(Bulkhead::new("payments", BulkheadConfig::default()).unwrap())
///     .breaker(CircuitBreaker::new("payments", BreakerConfig::default()).unwrap())
///     .retry(Retry::new("payments", 4, Backoff::try_new(Duration::from_millis(100), Duration::from_secs(2), Jitter::Full).unwrap()).unwrap())
///     .attempt_timeout(Duration::from_secs(1));
/// # let _ = policy;
/// ```
#[derive(Debug)]
pub struct Policy<B: BreakerStore = InProcess, C = ErrorsAreRetryable> {
    deadline: Option<Duration>,
    bulkhead: Option<Bulkhead>,
    breaker: Option<CircuitBreaker<B>>,
    retry: Option<Retry>,
    attempt_timeout: Option<Duration>,
    classify: Arc<C>,
}

impl<B: BreakerStore, C> Clone for Policy<B, C> {
    fn clone(&self) -> Self {
        Self {
            deadline: self.deadline,
            bulkhead: self.bulkhead.clone(),
            breaker: self.breaker.clone(),
            retry: self.retry.clone(),
            attempt_timeout: self.attempt_timeout,
            classify: self.classify.clone(),
        }
    }
}

impl Default for Policy {
    fn default() -> Self {
        Self::new()
    }
}

impl Policy {
    /// A policy with no layer enabled and the [`ErrorsAreRetryable`]
    /// classifier.
    pub fn new() -> Self {
        Self {
            deadline: None,
            bulkhead: None,
            breaker: None,
            retry: None,
            attempt_timeout: None,
            classify: Arc::new(ErrorsAreRetryable),
        }
    }
}

impl<B: BreakerStore, C> Policy<B, C> {
    /// The time budget of each call, all attempts and waits included.
    pub fn deadline(mut self, budget: Duration) -> Self {
        self.deadline = Some(budget);
        self
    }

    /// The concurrency limit.
    pub fn bulkhead(mut self, bulkhead: Bulkhead) -> Self {
        self.bulkhead = Some(bulkhead);
        self
    }

    /// The circuit breaker (any [`BreakerStore`]).
    pub fn breaker<B2: BreakerStore>(self, breaker: CircuitBreaker<B2>) -> Policy<B2, C> {
        self.optional_breaker(Some(breaker))
    }

    /// The circuit breaker, if any (`None`: calls are not guarded; the
    /// store type is fixed all the same).
    pub fn optional_breaker<B2: BreakerStore>(self, breaker: Option<CircuitBreaker<B2>>) -> Policy<B2, C> {
        Policy {
            deadline: self.deadline,
            bulkhead: self.bulkhead,
            breaker,
            retry: self.retry,
            attempt_timeout: self.attempt_timeout,
            classify: self.classify,
        }
    }

    /// Retries, with their attempts, backoff and budget.
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = Some(retry);
        self
    }

    /// The timeout of one attempt.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = Some(timeout);
        self
    }

    /// How results are classified for the breaker and the retries.
    pub fn classify<C2>(self, classify: C2) -> Policy<B, C2> {
        Policy {
            deadline: self.deadline,
            bulkhead: self.bulkhead,
            breaker: self.breaker,
            retry: self.retry,
            attempt_timeout: self.attempt_timeout,
            classify: Arc::new(classify),
        }
    }
}

impl<S, B: BreakerStore, C> Layer<S> for Policy<B, C> {
    type Service = PolicyService<S, B, C>;

    fn layer(&self, service: S) -> Self::Service {
        let service = TimeoutLayer::new(self.attempt_timeout).layer(IntoPolicyError { inner: service });
        let service = RetryLayer::with_classifier(self.retry.clone(), self.classify.clone()).layer(service);
        let service =
            BreakerLayer::with_classifier(self.breaker.clone(), self.classify.clone()).layer(service);
        let service = BulkheadLayer::new(self.bulkhead.clone()).layer(service);
        DeadlineLayer::new(self.deadline).layer(service)
    }
}

#[cfg(test)]
mod tests;
