//! [`RetryLayer`]: retries within attempts, backoff, budget and deadline.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rand::Rng;
use tokio::time::Sleep;
use tower::{Layer, Service};

use super::{Classify, ErrorsAreRetryable, Local, Padded, Rejected};
use crate::decision::retry_delay;
use crate::{Backoff, Classification, Deadline, DeadlineExceeded, RetryBudget, RetryPolicyError};

/// How a call is retried: at most `max_attempts` attempts (the first
/// included), waits from a [`Backoff`] or the provider's `Retry-After`
/// (whichever is longer, never earlier than the provider asked; a
/// `Retry-After` above `max_retry_after`, default 60 s, ends the retries),
/// and an optional shared [`RetryBudget`].
///
/// Only [`Classification::Retryable`] results are retried; permanent and
/// ambiguous ones are returned as they are (an ambiguous write is never
/// retried blindly, DESIGN promise 1).
#[derive(Clone, Debug)]
pub struct Retry {
    max_attempts: u32,
    backoff: Backoff,
    max_retry_after: Duration,
    budget: Option<RetryBudget>,
    retries: metrics::Counter,
    name: Arc<str>,
}

/// What follows a failed attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Retry after this wait (already withdrawn from the budget).
    Retry(Duration),
    /// No retry: return the attempt's result as it is (not retryable, out
    /// of attempts, `Retry-After` too long, or the budget is spent).
    Return,
    /// The wait does not fit in the deadline: fail with this error.
    DeadlineExceeded(DeadlineExceeded),
}

impl Retry {
    /// Retries for the integration `name` (for logs and metrics), up to
    /// `max_attempts` attempts in all. Errors when `max_attempts` is zero.
    pub fn new(name: &str, max_attempts: u32, backoff: Backoff) -> Result<Self, RetryPolicyError> {
        if max_attempts == 0 {
            return Err(RetryPolicyError::ZeroAttempts);
        }
        Ok(Self {
            max_attempts,
            backoff,
            max_retry_after: Duration::from_secs(60),
            budget: None,
            retries: metrics::counter!("failwell_retries_total", "policy" => name.to_owned()),
            name: Arc::from(name),
        })
    }

    /// The longest `Retry-After` honoured (a longer one ends the retries).
    pub fn max_retry_after(mut self, max: Duration) -> Self {
        self.max_retry_after = max;
        self
    }

    /// The budget retries are withdrawn from (shared by clones).
    pub fn budget(mut self, budget: RetryBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Attempts in all, the first included.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// Counts a new call (not a retry) into the budget.
    #[inline]
    pub fn start(&self) {
        if let Some(budget) = &self.budget {
            budget.deposit();
        }
    }

    /// Decides what follows attempt number `attempt` (1-based), which ended
    /// with `classification` after a wait of `previous_delay` before it.
    /// Checks, in order: retryable at all, attempts left, `Retry-After`
    /// within `max_retry_after`, the wait fits the `deadline`, the budget has
    /// a retry left. Only a [`Step::Retry`] withdraws from the budget.
    pub fn after_failure(
        &self,
        attempt: u32,
        previous_delay: Duration,
        classification: Classification,
        deadline: Option<Deadline>,
        rng: &mut impl Rng,
    ) -> Step {
        let Classification::Retryable { retry_after } = classification else {
            return Step::Return;
        };
        if attempt >= self.max_attempts {
            tracing::debug!(policy = %self.name, attempt, "attempts exhausted");
            return Step::Return;
        }
        let Some(delay) =
            retry_delay(&self.backoff, attempt, previous_delay, retry_after, self.max_retry_after, rng)
        else {
            tracing::debug!(policy = %self.name, ?retry_after, "Retry-After exceeds max_retry_after: no retry");
            return Step::Return;
        };
        if let Some(deadline) = deadline {
            let what = match retry_after {
                Some(wait) if wait >= delay => "the provider's Retry-After",
                _ => "the backoff before a retry",
            };
            if let Err(e) = deadline.check_wait(delay, what) {
                tracing::debug!(policy = %self.name, error = %e, "retry does not fit the deadline");
                metrics::counter!("failwell_deadline_exceeded_total").increment(1);
                return Step::DeadlineExceeded(e);
            }
        }
        if let Some(budget) = &self.budget
            && !budget.try_withdraw()
        {
            return Step::Return;
        }
        self.retries.increment(1);
        tracing::debug!(policy = %self.name, attempt, delay_ms = delay.as_millis() as u64, "retry scheduled");
        Step::Retry(delay)
    }
}

/// Retries each call per a [`Retry`], judging results with a [`Classify`].
/// The request must be `Clone` (one clone is kept for the retries). The
/// wait before each retry runs inside the call, under its deadline. `None`
/// passes calls through.
pub struct RetryLayer<C = ErrorsAreRetryable> {
    retry: Option<Retry>,
    classify: Arc<C>,
}

impl<C> Clone for RetryLayer<C> {
    fn clone(&self) -> Self {
        Self { retry: self.retry.clone(), classify: self.classify.clone() }
    }
}

impl RetryLayer {
    /// A layer retrying every `Err` (see [`ErrorsAreRetryable`]).
    pub fn new(retry: Option<Retry>) -> Self {
        Self { retry, classify: Arc::new(ErrorsAreRetryable) }
    }
}

impl<C> RetryLayer<C> {
    /// A layer judging results with `classify`.
    pub fn with_classifier(retry: Option<Retry>, classify: Arc<C>) -> Self {
        Self { retry, classify }
    }
}

impl<S, C> Layer<S> for RetryLayer<C> {
    type Service = RetryService<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        RetryService {
            inner,
            shared: self
                .retry
                .clone()
                .map(|retry| Local::new(Shared { retry, classify: self.classify.clone() })),
        }
    }
}

struct Shared<C> {
    retry: Retry,
    classify: Arc<C>,
}

impl<C> Clone for Shared<C> {
    fn clone(&self) -> Self {
        Self { retry: self.retry.clone(), classify: self.classify.clone() }
    }
}

/// The service of [`RetryLayer`].
pub struct RetryService<S, C = ErrorsAreRetryable> {
    inner: S,
    shared: Option<Local<Shared<C>>>,
}

impl<S: Clone, C> Clone for RetryService<S, C> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone(), shared: self.shared.clone() }
    }
}

impl<S: std::fmt::Debug, C> std::fmt::Debug for RetryService<S, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryService")
            .field("inner", &self.inner)
            .field("retry", &self.shared.as_ref().map(|s| &s.retry))
            .finish()
    }
}

impl<S, C, Req> Service<Req> for RetryService<S, C>
where
    S: Service<Req> + Clone,
    S::Error: From<Rejected>,
    C: Classify<Req, S::Response, S::Error>,
    Req: Clone,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = RetryFuture<S::Future, S, Req, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let Some(shared) = &self.shared else {
            return RetryFuture {
                state: State::Calling { inner: self.inner.call(req) },
                retrying: None,
                attempt: 1,
                previous_delay: Duration::ZERO,
            };
        };
        shared.retry.start();
        // Keep the service that was polled ready for this call; a clone
        // serves the retries (tower's readiness contract).
        let clone = self.inner.clone();
        let mut ready = std::mem::replace(&mut self.inner, clone);
        let inner = ready.call(req.clone());
        RetryFuture {
            state: State::Calling { inner },
            retrying: Some(Retrying { service: ready, request: req, shared: shared.share() }),
            attempt: 1,
            previous_delay: Duration::ZERO,
        }
    }
}

struct Retrying<S, Req, C> {
    service: S,
    request: Req,
    shared: Arc<Padded<Shared<C>>>,
}

pin_project_lite::pin_project! {
    /// The future of [`RetryService`].
    pub struct RetryFuture<F, S, Req, C> {
        #[pin]
        state: State<F>,
        retrying: Option<Retrying<S, Req, C>>,
        attempt: u32,
        previous_delay: Duration,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<F> {
        Calling { #[pin] inner: F },
        Waiting { sleep: Pin<Box<Sleep>> },
        // Waiting for the service's readiness, at most until the deadline.
        Readying { deadline: Option<Pin<Box<Sleep>>> },
    }
}

impl<F, S, Req, C, T, E> Future for RetryFuture<F, S, Req, C>
where
    F: Future<Output = Result<T, E>>,
    S: Service<Req, Response = T, Error = E, Future = F>,
    E: From<Rejected>,
    C: Classify<Req, T, E>,
    Req: Clone,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Calling { inner } => {
                    let result = std::task::ready!(inner.poll(cx));
                    let Some(retrying) = this.retrying.as_ref() else { return Poll::Ready(result) };
                    let Some(classification) = retrying.shared.classify.classify(&retrying.request, &result)
                    else {
                        return Poll::Ready(result);
                    };
                    let step = retrying.shared.retry.after_failure(
                        *this.attempt,
                        *this.previous_delay,
                        classification,
                        Deadline::current(),
                        &mut rand::rng(),
                    );
                    match step {
                        Step::Return => return Poll::Ready(result),
                        Step::DeadlineExceeded(e) => {
                            return Poll::Ready(Err(Rejected::DeadlineExceeded(e).into()));
                        }
                        Step::Retry(delay) => {
                            *this.previous_delay = delay;
                            this.state.set(State::Waiting { sleep: Box::pin(tokio::time::sleep(delay)) });
                        }
                    }
                }
                StateProj::Waiting { sleep } => {
                    std::task::ready!(sleep.as_mut().poll(cx));
                    this.state.set(State::Readying { deadline: None });
                }
                StateProj::Readying { deadline } => {
                    let Some(retrying) = this.retrying.as_mut() else { unreachable!("only retries wait") };
                    if retrying.service.poll_ready(cx)?.is_pending() {
                        let Some(at) = Deadline::current() else { return Poll::Pending };
                        let timer =
                            deadline.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at.instant())));
                        std::task::ready!(timer.as_mut().poll(cx));
                        metrics::counter!("failwell_deadline_exceeded_total").increment(1);
                        return Poll::Ready(Err(Rejected::DeadlineExceeded(DeadlineExceeded::no_time_for(
                            "the service to become ready",
                        ))
                        .into()));
                    }
                    // Checked once the service is ready, right before the
                    // attempt: none starts after the deadline.
                    if let Some(Err(e)) = Deadline::current().map(|d| d.check_attempt()) {
                        metrics::counter!("failwell_deadline_exceeded_total").increment(1);
                        return Poll::Ready(Err(Rejected::DeadlineExceeded(e).into()));
                    }
                    *this.attempt += 1;
                    let inner = retrying.service.call(retrying.request.clone());
                    this.state.set(State::Calling { inner });
                }
            }
        }
    }
}
