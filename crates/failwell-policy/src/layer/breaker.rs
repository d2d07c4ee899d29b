//! [`BreakerLayer`]: a circuit breaker around each call.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Sleep;
use tower::{Layer, Service};

use super::{Classify, ErrorsAreRetryable, Local, Padded, Rejected};
use crate::{BreakerStore, CallOutcome, CircuitBreaker, InProcess, Ticket};

/// Asks the [`CircuitBreaker`] before each call and reports the call's
/// outcome (as [`Classify::breaker_outcome`] sees it) when it ends. A call
/// the breaker refuses fails at once with [`Rejected::BreakerOpen`], costing
/// nothing downstream. A half-open probe is bounded by the breaker's
/// `probe_timeout` ([`Rejected::TimedOut`], a failure); a call dropped before
/// it ends reports [`CallOutcome::Ignored`]. `None` passes calls through.
pub struct BreakerLayer<B: BreakerStore = InProcess, C = ErrorsAreRetryable> {
    breaker: Option<CircuitBreaker<B>>,
    classify: Arc<C>,
}

impl<B: BreakerStore, C> Clone for BreakerLayer<B, C> {
    fn clone(&self) -> Self {
        Self { breaker: self.breaker.clone(), classify: self.classify.clone() }
    }
}

impl<B: BreakerStore> BreakerLayer<B> {
    /// A layer over `breaker` counting every `Err` as a failure.
    pub fn new(breaker: Option<CircuitBreaker<B>>) -> Self {
        Self { breaker, classify: Arc::new(ErrorsAreRetryable) }
    }
}

impl<B: BreakerStore, C> BreakerLayer<B, C> {
    /// A layer over `breaker` judging results with `classify`.
    pub fn with_classifier(breaker: Option<CircuitBreaker<B>>, classify: Arc<C>) -> Self {
        Self { breaker, classify }
    }
}

impl<S, B: BreakerStore, C> Layer<S> for BreakerLayer<B, C> {
    type Service = BreakerService<S, B, C>;

    fn layer(&self, inner: S) -> Self::Service {
        BreakerService {
            inner,
            shared: self
                .breaker
                .clone()
                .map(|breaker| Local::new(Shared { breaker, classify: self.classify.clone() })),
        }
    }
}

struct Shared<B: BreakerStore, C> {
    breaker: CircuitBreaker<B>,
    classify: Arc<C>,
}

impl<B: BreakerStore, C> Clone for Shared<B, C> {
    fn clone(&self) -> Self {
        Self { breaker: self.breaker.clone(), classify: self.classify.clone() }
    }
}

/// The service of [`BreakerLayer`].
pub struct BreakerService<S, B: BreakerStore = InProcess, C = ErrorsAreRetryable> {
    inner: S,
    shared: Option<Local<Shared<B, C>>>,
}

impl<S: Clone, B: BreakerStore, C> Clone for BreakerService<S, B, C> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone(), shared: self.shared.clone() }
    }
}

impl<S: std::fmt::Debug, B: BreakerStore, C> std::fmt::Debug for BreakerService<S, B, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BreakerService")
            .field("inner", &self.inner)
            .field("breaker", &self.shared.as_ref().map(|s| &s.breaker))
            .finish()
    }
}

impl<S, B, C, Req> Service<Req> for BreakerService<S, B, C>
where
    S: Service<Req>,
    S::Error: From<Rejected>,
    B: BreakerStore,
    C: Classify<Req, S::Response, S::Error>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BreakerFuture<S::Future, Req, S::Response, S::Error, B, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let Some(shared) = &self.shared else {
            return BreakerFuture {
                inner: Some(self.inner.call(req)),
                guard: None,
                probe_timer: None,
                rejected: None,
            };
        };
        match shared.breaker.store().try_acquire() {
            Ok(ticket) => {
                let probe_timer = ticket.is_probe().then(|| {
                    let timeout = shared.breaker.store().probe_timeout();
                    (Box::pin(tokio::time::sleep(timeout)), timeout)
                });
                // The guard exists before the inner call, so a panic in it
                // still hands the ticket back (a probe slot is never lost).
                let guard = Guard { shared: shared.share(), ticket: Some(ticket), _result: PhantomData };
                BreakerFuture {
                    inner: Some(self.inner.call(req)),
                    guard: Some(guard),
                    probe_timer,
                    rejected: None,
                }
            }
            Err(open) => BreakerFuture {
                inner: None,
                guard: None,
                probe_timer: None,
                rejected: Some(Rejected::BreakerOpen(open).into()),
            },
        }
    }
}

/// Reports the outcome once; a call dropped unfinished reports `Ignored`.
struct Guard<B: BreakerStore, C, Req, T, E> {
    shared: Arc<Padded<Shared<B, C>>>,
    ticket: Option<Ticket>,
    _result: PhantomData<fn(Req) -> Result<T, E>>,
}

impl<B: BreakerStore, C, Req, T, E> Guard<B, C, Req, T, E> {
    fn record(&mut self, outcome: CallOutcome) {
        if let Some(ticket) = self.ticket.take() {
            self.shared.breaker.store().record(ticket, outcome);
        }
    }
}

impl<B: BreakerStore, C, Req, T, E> Drop for Guard<B, C, Req, T, E> {
    fn drop(&mut self) {
        self.record(CallOutcome::Ignored);
    }
}

pin_project_lite::pin_project! {
    /// The future of [`BreakerService`].
    pub struct BreakerFuture<F, Req, T, E, B: BreakerStore, C> {
        #[pin]
        inner: Option<F>,
        guard: Option<Guard<B, C, Req, T, E>>,
        probe_timer: Option<(Pin<Box<Sleep>>, Duration)>,
        rejected: Option<E>,
    }
}

impl<F, Req, T, E, B, C> Future for BreakerFuture<F, Req, T, E, B, C>
where
    F: Future<Output = Result<T, E>>,
    E: From<Rejected>,
    B: BreakerStore,
    C: Classify<Req, T, E>,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Some(inner) = this.inner.as_pin_mut() else {
            return Poll::Ready(Err(this.rejected.take().expect("a rejected breaker future is polled once")));
        };
        match inner.poll(cx) {
            Poll::Ready(result) => {
                if let Some(guard) = this.guard {
                    guard.record(guard.shared.classify.breaker_outcome(&result));
                }
                Poll::Ready(result)
            }
            Poll::Pending => {
                let Some((timer, timeout)) = this.probe_timer else { return Poll::Pending };
                std::task::ready!(timer.as_mut().poll(cx));
                if let Some(guard) = this.guard {
                    guard.record(CallOutcome::Failure);
                }
                tracing::debug!(timeout_ms = timeout.as_millis() as u64, "half-open probe timed out");
                Poll::Ready(Err(Rejected::TimedOut(*timeout).into()))
            }
        }
    }
}
